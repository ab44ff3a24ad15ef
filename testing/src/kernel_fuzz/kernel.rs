//! One generated kernel: its signature (tensor parameters of small shapes,
//! static `usize`/`f32`/`bool` arguments), its body, its results, and the
//! runner and table entry that call it with fixed static values.

use super::body::Body;
use super::types::{float_lit, shape_lit, Dom, Elem, Ty, Var, BIT};
use crate::Rng;

/// Extents of generated tensors: 1 and odd sizes.
const EXTENTS: [usize; 4] = [1, 2, 3, 5];

/// The source of one generated kernel.
pub(crate) struct KernelSource {
    /// The annotated function.
    pub function: String,
    /// The function calling its companion's `run` on a device.
    pub runner: String,
    /// Its entry in the table of cases.
    pub case: String,
}

/// How the harness makes a tensor argument (the `Arg` constructor's text).
fn arg_text(shape: &[usize], elem: Elem, range: (i32, i32)) -> String {
    let s = format!("&{}", shape_lit(shape));
    match elem {
        Elem::F32 => format!("Arg::F32({s})"),
        Elem::S32 => format!("Arg::S32({s}, {}, {})", range.0, range.1),
        Elem::Pred => format!("Arg::Pred({s})"),
    }
}

fn random_shape(rng: &mut Body) -> Vec<usize> {
    let rank = rng.below(3);
    (0..rank).map(|_| rng.pick(&EXTENTS)).collect()
}

/// Generates the kernel `name` from `seed`.
pub(crate) fn kernel(name: &str, seed: u64) -> KernelSource {
    let mut b = Body::new(Rng::new(seed), Vec::new());
    let mut shapes: Vec<Vec<usize>> = (0..2 + b.below(2)).map(|_| random_shape(&mut b)).collect();
    if shapes.iter().all(Vec::is_empty) {
        shapes[0] = vec![b.pick(&EXTENTS[1..])];
    }
    b.shapes = shapes;

    // Parameters: (declaration, the static value or `None` for a tensor,
    // the tensor's argument in the case table).
    let mut params: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    let declare = |b: &mut Body, name: String, ty: Ty, dom: Dom| {
        b.scope.declare(Var {
            name,
            ty,
            dom,
            mutable: false,
            locked: false,
        });
    };
    for i in 0..1 + b.below(3) {
        let shape = b.shape();
        let elem = match b.below(10) {
            0..=6 => Elem::F32,
            7..=8 => Elem::S32,
            _ => Elem::Pred,
        };
        let (dom, range) = match elem {
            Elem::F32 => (Dom::new(3, 4.0), (0, 0)),
            Elem::S32 => (Dom::new(0, 5.0), (-5, 5)),
            Elem::Pred => (BIT, (0, 1)),
        };
        let name = format!("x{i}");
        params.push((
            format!("{name}: Tensor"),
            None,
            Some(arg_text(&shape, elem, range)),
        ));
        declare(&mut b, name, Ty::tensor(&shape, elem), dom);
    }
    if b.coin(0.5) {
        // A small integer scalar: a loop bound, a trip count, an index.
        let (lo, hi) = if b.coin(0.6) { (-1, 4) } else { (-2, 6) };
        params.push((
            "t0: Tensor".into(),
            None,
            Some(arg_text(&[], Elem::S32, (lo, hi))),
        ));
        declare(
            &mut b,
            "t0".into(),
            Ty::tensor(&[], Elem::S32),
            Dom::new(0, f64::from(hi.max(-lo))),
        );
    }
    if b.coin(0.5) {
        let n = b.below(5);
        params.push(("n0: usize".into(), Some(n.to_string()), None));
        declare(&mut b, "n0".into(), Ty::Usize, Dom::new(0, 4.0));
    }
    if b.coin(0.4) {
        let s = b.pick(&[-1.5, -0.5, 0.25, 0.5, 1.0, 2.0]);
        params.push(("s0: f32".into(), Some(float_lit(s)), None));
        declare(&mut b, "s0".into(), Ty::Float, Dom::new(2, 2.0));
    }
    if b.coin(0.5) {
        let v = b.coin(0.5);
        params.push(("b0: bool".into(), Some(v.to_string()), None));
        declare(&mut b, "b0".into(), Ty::Bool, BIT);
    }
    // Static arguments anywhere in the signature.
    for i in (1..params.len()).rev() {
        let j = b.below(i + 1);
        params.swap(i, j);
    }

    // Mostly the CPU attribute; the others' defaults change matmul operands
    // (rounded to bf16 or f16, which the values survive exactly) and the
    // block size of `blocks(n)` and `block_or`.
    let (attr, block) = match b.below(10) {
        0..=5 => ("cpu_kernel", None),
        6 => ("cpu_kernel(precision = \"highest\")", None),
        7 | 8 => ("tpu_kernel", Some(128)),
        _ => ("gpu_kernel", Some(64)),
    };
    b.block = block;
    b.tpu = attr == "tpu_kernel";
    let count = 1 + b.below(3);
    b.ret_count = count;
    b.ret_vec = count > 1 && b.coin(0.2);
    let n = 4 + b.below(5);
    b.block(n);
    // Results: mostly variables the body assigned, some through inexact ops.
    let ret = b.ret_expr();
    let lines = b.take_lines();
    let ret_ty = match (count, b.ret_vec) {
        (1, _) => "Tensor".to_string(),
        (_, true) => "Vec<Tensor>".to_string(),
        _ => format!("({})", vec!["Tensor"; count].join(", ")),
    };
    let decls: Vec<&str> = params.iter().map(|p| p.0.as_str()).collect();
    let mut function = format!(
        "#[{attr}]\nfn {name}({}) -> {ret_ty} {{\n",
        decls.join(", ")
    );
    for l in &lines {
        function.push_str(l);
        function.push('\n');
    }
    function.push_str(&format!("    {ret}\n}}\n"));

    let mut tensor_index = 0;
    let call_args: Vec<String> = params
        .iter()
        .map(|p| match &p.1 {
            Some(v) => v.clone(),
            None => {
                tensor_index += 1;
                format!("&a[{}]", tensor_index - 1)
            }
        })
        .collect();
    let call = format!("{name}::run(dev, {})?", call_args.join(", "));
    let body = match (count, b.ret_vec) {
        (1, _) => format!("    Ok(vec![{call}])"),
        (_, true) => format!("    Ok({call})"),
        _ => {
            let names: Vec<String> = (0..count).map(|i| format!("o{i}")).collect();
            format!(
                "    let ({}) = {call};\n    Ok(vec![{}])",
                names.join(", "),
                names.join(", ")
            )
        }
    };
    let runner = format!(
        "fn run_{name}(dev: &Device, a: &[HostTensor]) -> Result<Vec<HostTensor>> {{\n{body}\n}}\n"
    );
    let args: Vec<&str> = params.iter().filter_map(|p| p.2.as_deref()).collect();
    let terms: Vec<String> = b.ret_terms.iter().map(usize::to_string).collect();
    let case = format!(
        "    Case {{ name: \"{name}\", args: &[{}], outputs: &[{}], run: run_{name} }},",
        args.join(", "),
        terms.join(", ")
    );
    KernelSource {
        function,
        runner,
        case,
    }
}

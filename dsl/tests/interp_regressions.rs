//! Cases the interpreter's differential fuzzer (`tessel_testing::fuzz`)
//! found, as it printed them after shrinking. Where the plugin is the one
//! that is wrong (an XLA rewrite or bug, listed in the interpreter's
//! `# Semantics` docs), the test pins both results: the interpreter's, as
//! the op is defined, and the plugin's, so that a plugin that changes
//! shows up here (then update the docs and let the generator make the case
//! again).

mod common;

use common::*;
use tessel_dsl::interp::{evaluate, Checks};
use tessel_dsl::kernel::Kernel;
use tessel_dsl::ops::ScatterCombine;
use tessel_dsl::{DType, HostTensor, Tensor, TensorSpec};

/// The first output of `body` on `args`: the interpreter's and the
/// plugin's, as `f64`s.
fn both_ways(args: &[HostTensor], body: impl Fn(&[Tensor]) -> Vec<Tensor>) -> (Vec<f64>, Vec<f64>) {
    let k = Kernel::new(fresh_name("regression"), body);
    let specs: Vec<TensorSpec> = args.iter().map(|a| a.spec().clone()).collect();
    let g = k.trace(&specs).expect("the kernel traces");
    let e = evaluate(&g, args, Checks::default()).expect("the interpreter evaluates");
    let refs: Vec<&HostTensor> = args.iter().collect();
    let xla = k.run(&device(), &refs).expect("the plugin runs");
    (e.outputs[0].to_f64_vec(), xla[0].to_f64_vec())
}

/// Each value's sign and magnitude, so that -0 and +0 differ.
fn signed(v: &[f64]) -> Vec<(bool, f64)> {
    v.iter().map(|x| (x.is_sign_negative(), x.abs())).collect()
}

/// Seed 1932: `x * p.cast(F32)` with `p` false and `x` negative is -0; XLA
/// rewrites the product as a select and gives +0.
#[test]
fn product_with_a_cast_pred_is_minus_zero() {
    let args = [
        tensor(&[0.0, 0.0, 0.0], &[1, 3, 1], DType::Pred),
        tensor(&[-2.125], &[1, 1, 1], DType::F32),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| vec![a[1] * a[0].cast(DType::F32)]);
    assert_eq!(signed(&interp), vec![(true, 0.0); 3]);
    assert_eq!(signed(&xla), vec![(false, 0.0); 3], "the plugin's select");
}

/// Seed 1945: a dynamic slice of a dynamic slice clamps each start; XLA
/// folds the two into one slice at the sum of the starts.
#[test]
fn dynamic_slice_of_a_dynamic_slice_clamps_both_starts() {
    let args = [
        tensor(&[0.0, 0.0, 0.0, 0.0, 0.0, 1.0], &[6], DType::U8),
        tensor(&[4.0], &[], DType::S32),
        tensor(&[0.0], &[], DType::S32),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        // Start 4 of a window of 5 in 6 elements is clamped to 1.
        let v3 = a[0].dynamic_slice(&[a[1]], &[5]);
        vec![v3.dynamic_slice(&[a[2]], &[2])]
    });
    assert_eq!(interp, [0.0, 0.0]);
    assert_eq!(xla, [0.0, 1.0], "the plugin's folded slice");
}

/// Seed 2383: a divisor XLA proves constant (a select on `i < i`) is
/// turned into a product with its reciprocal, one f16 ulp off the
/// quotient.
#[test]
fn division_by_a_value_xla_proves_constant() {
    let args = [
        tensor(&[0.625], &[], DType::F16),
        tensor(&[0.0], &[], DType::S32),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        let never = a[1].lt(a[1]);
        let minus_three = Tensor::full(Vec::<usize>::new(), -3.0, DType::S32);
        vec![a[0] / never.select(a[1], minus_three).cast(DType::F16)]
    });
    // 0.625 / -3 = -0.208333..., between f16 values -0.2082520 and
    // -0.2083740; the nearer is the second.
    assert_eq!(interp, [-0.208_374_023_437_5]);
    assert_eq!(xla, [-0.208_251_953_125], "the plugin's reciprocal product");
}

/// Seed 3522: the update of a `dynamic_update_slice` that reads its own
/// operand one element further on sees the operand as it was; XLA updates
/// in place and reads an element it has already overwritten.
#[test]
fn update_slice_reading_its_operand_elsewhere() {
    let args = [
        tensor(&[1.0], &[1], DType::U8),
        tensor(&[5.0], &[], DType::S32),
        tensor(&[4.0], &[], DType::S32),
        tensor(
            &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            &[9],
            DType::U8,
        ),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        let window = a[3].dynamic_slice(&[a[2]], &[4]) / a[0];
        let updated = a[3].dynamic_update_slice(window, &[a[1]]);
        vec![updated.broadcast_in_dim(vec![9, 1], &[0])]
    });
    // Elements 4..8 written to 5..9.
    assert_eq!(interp, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(
        xla,
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "the plugin's in-place update"
    );
}

/// Seed 6039: `sqrt(a) * sqrt(a)` rounds the square roots; XLA rewrites it
/// as `a`.
#[test]
fn square_of_a_square_root_rounds() {
    let args = [tensor(&[3.5], &[1], DType::F16)];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        let r = a[0].abs().sqrt();
        vec![r * r]
    });
    // sqrt(3.5) rounds to 1.8710938 in f16, whose square rounds to 3.5019531.
    assert_eq!(interp, [3.501_953_125]);
    assert_eq!(xla, [3.5], "the plugin's rewrite");
}

/// Seed 11616: `-0 + 0` is +0; XLA drops the addition of a zero constant
/// and keeps -0.
#[test]
fn adding_a_zero_constant_makes_minus_zero_plus() {
    let args = [tensor(&[0.0, -0.0], &[2], DType::F32)];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        vec![a[0] + Tensor::full(Vec::<usize>::new(), 0.0, DType::F32)]
    });
    assert_eq!(signed(&interp), [(false, 0.0), (false, 0.0)]);
    assert_eq!(
        signed(&xla),
        [(false, 0.0), (true, 0.0)],
        "the plugin drops `+ 0`"
    );
}

/// Seed 434459: `expm1` of f16 0.1875 is 0.20623 (0.2061768 rounded to
/// f16); the plugin gives 0.2064209, 2 ulps away.
#[test]
fn expm1_of_f16_is_two_ulps_off_on_the_plugin() {
    let args = [tensor(&[0.0, 0.1875], &[2], DType::F16)];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| vec![a[0].expm1()]);
    assert_eq!(interp, [0.0, 1689.0 / 8192.0]);
    assert_eq!(xla, [0.0, 1691.0 / 8192.0], "the plugin's f16 expm1");
}

/// Seed 12698: `atan2(0, 0)` is 0; XLA's fusion emitters (its default CPU
/// codegen) give NaN when they see both zeros while compiling, here a
/// select between equal constants.
#[test]
fn atan2_of_zeros_known_while_compiling() {
    let args = [
        tensor(&[0.0], &[], DType::Pred),
        tensor(&[], &[0, 7], DType::Pred),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        let none = || vec![a[1].any(&[0, 1]).cast(DType::S32)];
        let zero = tessel_dsl::cond(a[0], none, none)[0].cast(DType::F32);
        vec![zero.atan2(zero)]
    });
    assert_eq!(interp, [0.0]);
    let fusion_emitters =
        !std::env::var("XLA_FLAGS").is_ok_and(|f| f.contains("fusion_emitters=false"));
    if fusion_emitters {
        assert!(xla[0].is_nan(), "the plugin's folded atan2: {xla:?}");
    }
}

/// Seed 5155246: `max(clamp(x, lo, hi), lo)` with `lo > hi`. The clamp is
/// `min(max(x, lo), hi)` = `hi`, so the maximum is `lo`. XLA folds
/// `maximum(stablehlo.clamp(lo, x, hi), lo)` to the clamp as if `lo <= hi`
/// held and gave `hi`; tessel therefore lowers a clamp as the maximum and
/// the minimum it is defined as, and both sides agree.
#[test]
fn a_clamp_whose_bounds_cross_then_a_maximum() {
    let args = [
        tensor(&[10.0, -3.0, 5.0], &[3], DType::S8),
        tensor(&[0.0], &[], DType::S8),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        vec![a[0].clamp(a[0], a[1]).maximum(a[0])]
    });
    // lo > hi for 10 and 5 (clamp gives 0, the maximum lo); lo <= hi for -3.
    assert_eq!(interp, [10.0, -3.0, 5.0]);
    assert_eq!(xla, interp);
    // Static bounds that cross: numpy's clip(x, 2, 0) is 0 everywhere.
    let floats = [tensor(&[-1.0, 1.0, 3.0], &[3], DType::F32)];
    let (interp, xla) = both_ways(&floats, |a: &[Tensor]| {
        vec![a[0].clamp(2.0, 0.0).maximum(2.0)]
    });
    assert_eq!(interp, [2.0, 2.0, 2.0]);
    assert_eq!(xla, interp);
}

/// Seed 5154465: `sign(-0)` is -0 (the sign of a zero is that zero). A sum
/// over an empty axis is known while compiling, and XLA's constant folding
/// gives +0 for `sign(-cast(sum))`; with the zero unknown it gives -0.
#[test]
fn sign_of_minus_zero_known_while_compiling() {
    let args = [
        tensor(&[], &[0, 1], DType::S32),
        tensor(&[0.0], &[1], DType::S32),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        vec![(-a[0].sum(&[0]).cast(DType::F64)).sign()]
    });
    assert_eq!(signed(&interp), [(true, 0.0)]);
    assert_eq!(signed(&xla), [(false, 0.0)], "the plugin's folded sign");
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| vec![(-a[1].cast(DType::F64)).sign()]);
    assert_eq!(signed(&interp), [(true, 0.0)]);
    assert_eq!(signed(&xla), signed(&interp));
}

/// Seed 5164490: a take at one index of a dynamic slice. The slice's start 2
/// is clamped to 1 (3 columns, a window of 2), so column 0 of the window is
/// column 1; XLA makes the take a dynamic slice, folds the two into one at
/// the sum of the starts (2) and clamps once, reading column 2.
#[test]
fn take_of_a_dynamic_slice_clamps_both_starts() {
    let args = [
        tensor(&[0.0, 1.0, 2.0], &[1, 3], DType::U64),
        tensor(&[2.0], &[], DType::S32),
        tensor(&[0.0], &[], DType::S32),
    ];
    let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
        let zero = Tensor::full(Vec::<usize>::new(), 0.0, DType::S32);
        let window = a[0].dynamic_slice(&[zero, a[1]], &[1, 2]);
        vec![window.take_with(a[2], 1, tessel_dsl::TakeMode::PromiseInBounds)]
    });
    assert_eq!(interp, [1.0]);
    assert_eq!(xla, [2.0], "the plugin's folded slices");
}

/// Seed 1795795383371248: the sign of the NaN of `inf % -1`, seen through a
/// sort (floats sort totally: -NaN first, +NaN last). With the divisor a
/// constant, XLA gives +NaN; with the divisor an argument it gives what the
/// interpreter's remainder (the host's `fmod`) gives, the processor's
/// default NaN (-NaN on x86-64). IEEE leaves the sign unspecified.
#[test]
fn nan_sign_of_a_remainder_by_a_constant() {
    let signs = |v: &[f64]| -> Vec<(bool, bool)> {
        v.iter()
            .map(|x| (x.is_nan(), x.is_sign_negative()))
            .collect()
    };
    let x = tensor(&[f64::INFINITY, 0.0], &[1, 2], DType::F64);
    let by_constant = |a: &[Tensor]| a[0] % Tensor::full(vec![1, 1], -1.0, DType::F64);
    let (interp, xla) = both_ways(std::slice::from_ref(&x), |a: &[Tensor]| {
        vec![by_constant(a)]
    });
    assert_eq!(
        signs(&xla)[0],
        (true, false),
        "the plugin's remainder by a constant"
    );
    // With the divisor an argument, the plugin gives the interpreter's NaN.
    let args = [x.clone(), tensor(&[-1.0], &[1, 1], DType::F64)];
    let (interp_arg, xla_arg) = both_ways(&args, |a: &[Tensor]| vec![a[0] % a[1]]);
    assert_eq!(signs(&interp), signs(&interp_arg));
    assert_eq!(signs(&interp_arg), signs(&xla_arg));
    // The fuzzer's case, an ascending sort: +NaN goes last; the
    // interpreter's NaN goes first if negative.
    let (interp, xla) = both_ways(std::slice::from_ref(&x), |a: &[Tensor]| {
        vec![by_constant(a).sort(1, false)]
    });
    assert!(xla[0] == 0.0 && xla[1].is_nan(), "{xla:?}");
    let first = interp_arg[0].is_sign_negative();
    assert_eq!(
        interp[usize::from(!first)].to_bits(),
        interp_arg[0].to_bits(),
        "{interp:?}"
    );
}

/// Seed 1795911000000402: a scatter whose indices are its own operand
/// (`x.index_update(1, x, u, Mul)`). The plugin's XLA updated the operand in
/// place and read the indices from the same buffer, so it read indices it
/// had already overwritten: position 3, which no index names, came out 0.
/// Lowering now hands such a scatter converted indices (`lower/mod.rs`);
/// both sides give the defined result, for every integer index type, for
/// indices that are a view of the operand, and for indices out of range.
#[test]
fn scatter_whose_indices_are_its_operand() {
    let want = [0.0, 0.0, 0.0, 5.0, 0.0, 3.0, 0.0];
    for d in [
        DType::S32,
        DType::S64,
        DType::U64,
        DType::U32,
        DType::S8,
        DType::U16,
    ] {
        let args = [
            tensor(&[0.0, 0.0, 0.0, 5.0, 0.0, 1.0, 0.0], &[1, 7], d),
            tensor(&[0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0], &[1, 1, 7], d),
        ];
        let views: [fn(Tensor) -> Tensor; 3] = [
            |x| x,
            |x| x.reshape(&[7, 1]).reshape(&[1, 7]),
            |x| x.sort(0, false),
        ];
        for view in views {
            let (interp, xla) = both_ways(&args, |a: &[Tensor]| {
                vec![a[0].index_update(1, view(a[0]), a[1], ScatterCombine::Mul)]
            });
            assert_eq!(interp, want, "{d:?}");
            assert_eq!(xla, want, "{d:?}");
        }
    }
    // 64-bit indices beyond the 32-bit range stay out of range.
    let x = tensor(&[4294967296.0, 4294967297.0, 1.0, 2.0], &[4], DType::S64);
    let u = tensor(&[7.0; 4], &[4], DType::S64);
    let (interp, xla) = both_ways(&[x, u], |a: &[Tensor]| {
        vec![a[0].index_update(0, a[0], a[1], ScatterCombine::Add)]
    });
    assert_eq!(interp, [4294967296.0, 4294967304.0, 8.0, 2.0]);
    assert_eq!(xla, interp);
    // Negative indices stay out of range too.
    let x = tensor(&[-1.0, -4294967296.0, 1.0, 0.0], &[4], DType::S64);
    let u = tensor(&[7.0; 4], &[4], DType::S64);
    let (interp, xla) = both_ways(&[x, u], |a: &[Tensor]| {
        vec![a[0].index_update(0, a[0], a[1], ScatterCombine::Add)]
    });
    assert_eq!(interp, [6.0, -4294967289.0, 1.0, 0.0]);
    assert_eq!(xla, interp);
}

//! Bad input on the command line never panics or aborts. Each listed
//! kernel's lowering case is mutated at random (an extent, a rank, a dtype,
//! an argument dropped, repeated or renamed, an option set to a value of the
//! wrong kind or out of range), then lowered, and run on random data (with
//! out-of-range integers, so indices, lengths and labels are bad values
//! too). Every outcome must be the kernel's result (exit 0) or one
//! `tessel:` error line with exit code 2: never a panic (exit 101), an abort
//! or a crash (a signal), nor an error of an op inside the library, which
//! would mean its argument checks let something through.
//!
//! `TESSEL_CLI_FUZZ_CASES=n` runs `n` cases instead of the fixed few (and
//! `TESSEL_CLI_FUZZ_SEED=s` starts elsewhere; `TESSEL_DEVICE=interpreter`
//! runs them on the interpreter). A finding prints its case's seed and the
//! command that reproduces it.

use std::path::Path;

use tessel::{DType, TensorSpec};
use tessel_testing::{random, Rng};

use super::tessel;

/// One tensor argument: `--shape name=dims:dtype` or `--arg name=file`.
#[derive(Clone, Debug)]
struct Arg {
    name: String,
    dims: Vec<usize>,
    dtype: DType,
}

/// A kernel with its arguments and options.
#[derive(Clone, Debug)]
struct Case {
    kernel: String,
    args: Vec<Arg>,
    opts: Vec<(String, String)>,
}

/// Dtypes a mutation may give an argument.
const DTYPES: &[DType] = &[
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::S32,
    DType::S8,
    DType::U8,
    DType::S64,
    DType::U32,
    DType::Pred,
    DType::F8E4M3FN,
    DType::F8E5M2,
];

/// Values a mutation may give an option: wrong kinds, signs, sizes and
/// special numbers, and a few that some option takes.
const OPTION_VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "8",
    "16",
    "4096",
    "99999999999",
    "-7",
    "0.5",
    "-0.5",
    "1e30",
    "nan",
    "inf",
    "-inf",
    "true",
    "false",
    "",
    "x",
    "none",
    "f32",
    "bf16",
    "s8",
    "int8",
    "fp8",
    "causal",
    "local:4:0",
    "4:0",
    "none:2",
    "0:0",
    "gelu",
    "ij->ji",
    "a,b->c",
    "==",
];

/// Extents a mutation may give an axis (besides one off and doubled).
const EXTENTS: &[usize] = &[0, 1, 2, 3, 5, 7, 9, 16, 17, 33];

fn parse_case(kernel: &str, words: &[&str]) -> Case {
    let mut case = Case {
        kernel: kernel.to_string(),
        args: Vec::new(),
        opts: Vec::new(),
    };
    for pair in words.chunks(2) {
        let (name, value) = pair[1].split_once('=').expect("name=value");
        match pair[0] {
            "--shape" => {
                let spec = TensorSpec::parse(value).expect("a lowering case's shape parses");
                case.args.push(Arg {
                    name: name.to_string(),
                    dims: spec.shape.clone(),
                    dtype: spec.dtype,
                });
            }
            "--opt" => case.opts.push((name.to_string(), value.to_string())),
            other => panic!("unexpected word {other} in a lowering case"),
        }
    }
    case
}

/// The options each kernel lists (`tessel list`), by kernel.
fn listed_options() -> Vec<(String, Vec<String>)> {
    let (code, list, err) = tessel(&["list"]);
    assert_eq!(code, 0, "{err}");
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in list.lines() {
        if !line.starts_with(' ') {
            if let Some((name, _)) = line.split_once('(') {
                out.push((name.to_string(), Vec::new()));
            }
        } else if let Some(rest) = line.trim_start().strip_prefix("--opt ") {
            if let (Some(last), Some((key, _))) = (out.last_mut(), rest.split_once('=')) {
                last.1.push(key.to_string());
            }
        }
    }
    out
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.int(0, items.len() as i64 - 1) as usize]
}

/// One random change to `case`; `options` are the kernel's listed options.
fn mutate(rng: &mut Rng, case: &mut Case, options: &[String]) -> String {
    let n = case.args.len() as i64;
    let choice = rng.int(0, 11);
    if n == 0 || choice >= 8 {
        // An option: a listed one set to a random value, or an unknown one.
        let key = if options.is_empty() || rng.int(0, 9) == 0 {
            "no_such_option".to_string()
        } else {
            pick(rng, options).clone()
        };
        let value = pick(rng, OPTION_VALUES).to_string();
        case.opts.retain(|(k, _)| *k != key);
        case.opts.push((key.clone(), value.clone()));
        return format!("option {key}={value}");
    }
    let i = rng.int(0, n - 1) as usize;
    let arg = &mut case.args[i];
    let rank = arg.dims.len() as i64;
    match choice {
        0..=2 if rank > 0 => {
            let axis = rng.int(0, rank - 1) as usize;
            let d = arg.dims[axis];
            let options = [d.saturating_sub(1), d + 1, 2 * d, *pick(rng, EXTENTS)];
            arg.dims[axis] = *pick(rng, &options);
            format!("{}: axis {axis} {d} -> {}", arg.name, arg.dims[axis])
        }
        3 => {
            let at = rng.int(0, rank) as usize;
            let d = *pick(rng, &[1, 2, 3]);
            arg.dims.insert(at, d);
            format!("{}: extent {d} inserted at {at}", arg.name)
        }
        4 if rank > 0 => {
            let at = rng.int(0, rank - 1) as usize;
            arg.dims.remove(at);
            format!("{}: axis {at} removed", arg.name)
        }
        5 => {
            arg.dtype = *pick(rng, DTYPES);
            format!("{}: dtype {}", arg.name, arg.dtype)
        }
        6 => {
            let gone = case.args.remove(i);
            format!("{} dropped", gone.name)
        }
        _ => {
            if rng.int(0, 1) == 0 {
                let copy = case.args[i].clone();
                case.args.push(copy);
                format!("{} repeated", case.args[i].name)
            } else {
                let old = std::mem::replace(&mut case.args[i].name, "no_such_arg".into());
                format!("{old} renamed")
            }
        }
    }
}

/// Whether a kernel error (`tessel: kernel `K`: OP(..) at FILE:..`) was
/// raised by an op inside the kernel library rather than by the library's
/// own argument checks, which name the kernel (or a kernel it is built on:
/// `flash_attention` inside `flash_attention_vjp`, whose pullback reports a
/// cotangent of the wrong type under the kernel's name too) or
/// `expert_kernel` (the routed layer). Such an error
/// means the kernel took arguments it cannot handle, and points into the
/// library instead of at the caller.
fn raised_inside_the_library(kernel: &str, line: &str) -> bool {
    let Some(rest) = line.split_once("`: ").map(|(_, r)| r) else {
        return false;
    };
    let (op, rest) = rest.split_once('(').unwrap_or((rest, ""));
    let in_library = rest.contains(") at kernels/src/");
    in_library && !(kernel.contains(op) || op == "expert_kernel")
}

/// A finding: what ran and how it ended.
fn verdict(words: &[String], code: i32, stderr: &str) -> Option<String> {
    // The last line is the error (progress lines may come before it).
    let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    let ok = match code {
        0 => true,
        2 => {
            last.starts_with("tessel: ")
                && last.len() > 10
                && !stderr.contains("panicked")
                && !raised_inside_the_library(&words[1], last)
        }
        _ => false,
    };
    (!ok).then(|| {
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!(
            "tessel {}\n  exit {code}\n  {}",
            words.join(" "),
            tail.join("\n  ")
        )
    })
}

/// `tessel lower` words for `case`.
fn lower_words(case: &Case) -> Vec<String> {
    let mut w = vec!["lower".to_string(), case.kernel.clone()];
    for a in &case.args {
        let dims: Vec<String> = a.dims.iter().map(|d| d.to_string()).collect();
        let dims = if dims.is_empty() {
            "scalar".to_string()
        } else {
            dims.join("x")
        };
        w.extend(["--shape".into(), format!("{}={dims}:{}", a.name, a.dtype)]);
    }
    for (k, v) in &case.opts {
        w.extend(["--opt".into(), format!("{k}={v}")]);
    }
    w
}

/// `tessel run` words for `case`, its inputs written to `dir` as random
/// data: floats in [-3, 3), integers in [-2, 40] (out of range for most
/// index arguments), pred coin flips. `None` when an input is too large to
/// write (a mutation can multiply extents).
fn run_words(rng: &mut Rng, case: &Case, dir: &Path) -> Option<Vec<String>> {
    let mut w = vec!["run".to_string(), case.kernel.clone()];
    for (i, a) in case.args.iter().enumerate() {
        if a.dims.iter().product::<usize>() > 1 << 20 {
            return None;
        }
        let t = random(rng, &a.dims, a.dtype, -3.0, 3.0);
        let t = if a.dtype.is_float() || a.dtype.is_pred() {
            t
        } else {
            random(rng, &a.dims, a.dtype, -2.0, 40.0)
        };
        let path = dir.join(format!("in{i}.npy"));
        t.write_npy(&path).expect("writes the input");
        w.extend(["--arg".into(), format!("{}={}", a.name, path.display())]);
    }
    for (k, v) in &case.opts {
        w.extend(["--opt".into(), format!("{k}={v}")]);
    }
    w.extend(["--out".into(), dir.join("out.npy").display().to_string()]);
    Some(w)
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn mutated_kernel_calls_fail_with_an_error_line() {
    let cases: Vec<Case> = super::kernels::LOWER_CASES
        .iter()
        .chain(super::serving::LOWER_CASES)
        .map(|(k, w)| parse_case(k, w))
        .collect();
    let options = listed_options();
    let count = env_u64("TESSEL_CLI_FUZZ_CASES").unwrap_or(2 * cases.len() as u64);
    let seed = env_u64("TESSEL_CLI_FUZZ_SEED").unwrap_or(1);
    let dir = std::env::temp_dir().join(format!("tessel-cli-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut findings = Vec::new();
    let (mut ok, mut refused) = (0, 0);
    for n in 0..count {
        // Everything follows from the case's seed, so `TESSEL_CLI_FUZZ_SEED=s
        // TESSEL_CLI_FUZZ_CASES=1` repeats the case a finding names.
        let case_seed = seed.wrapping_add(n);
        let mut rng = Rng::new(case_seed);
        let mut case = cases[(case_seed % cases.len() as u64) as usize].clone();
        let kernel_options = options
            .iter()
            .find(|(k, _)| *k == case.kernel)
            .map(|(_, o)| o.clone())
            .unwrap_or_default();
        // Unchanged cases run the kernel on bad values alone.
        let changes: Vec<String> = (0..*pick(&mut rng, &[0, 1, 1, 1, 2]))
            .map(|_| mutate(&mut rng, &mut case, &kernel_options))
            .collect();
        let mut commands = vec![lower_words(&case)];
        if let Some(run) = run_words(&mut rng, &case, &dir) {
            commands.push(run);
        }
        for words in commands {
            let refs: Vec<&str> = words.iter().map(String::as_str).collect();
            let (code, _, err) = super::tessel_env(&refs, &[("TESSEL_EXECUTABLE_CACHE", "0")]);
            match verdict(&words, code, &err) {
                Some(f) => {
                    findings.push(format!("seed {case_seed} ({}):\n{f}", changes.join("; ")))
                }
                None if code == 0 => ok += 1,
                None => refused += 1,
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{count} cases: {ok} commands ran, {refused} refused with an error line");
    assert!(
        findings.is_empty(),
        "{} of {count} cases ended without an error line:\n{}",
        findings.len(),
        findings.join("\n\n")
    );
}

//! The `tessel` command: `info`, `list`, `lower` and `run` over the prebuilt
//! kernels. Every error is one line on stderr and a non-zero exit code.

use std::io::Write;

pub mod args;
pub mod bench;
pub mod cache;
pub mod peer;
pub mod plot;
pub mod plugin;
pub mod registry;

use std::collections::BTreeMap;
use std::time::Instant;

use args::{npy, pairs, spec, Args};
use registry::{find, Opts};

const USAGE: &str = "usage: tessel <command> [options]

commands:
  info                       the PJRT plugin, its versions and devices
  list                       the prebuilt kernels with their arguments and options
  lower KERNEL --shape name=2x128x64:f32 ... [--opt key=value ...]
                             print the kernel's StableHLO
  run KERNEL --arg name=file.npy ... [--opt key=value ...] [--out out.npy ...]
                             run the kernel on .npy inputs, write its outputs, print timing
  bench [WORKLOAD ...] [--json FILE] [--plot FILE.svg] [--peer PYTHON]
                             the benchmark suite: each workload against its reference,
                             or (--peer) against JAX run by PYTHON on the same machine
  cache [clear]              the persistent compilation cache: its size, or empty it
  plugin install [WHEEL] | plugin info
                             install the CPU plugin (offline from a wheel), or show where it is looked for

`tessel <command> --help` describes a command; `tessel --version` prints the version. Inputs: .npy files of f32, f64, f16, i8, i16, i32, i64,
u8, u16, u32, u64, bool; bf16 and fp8 as JAX's ml_dtypes arrays are saved, or fp8 as uint8 bit patterns
(--opt q_dtype=fp8 reads them as fp8); a uint16 file is u16 data, not bf16.";

/// Runs the command line `words` (without the program name); `Ok` holds what
/// to print, `Err` the one-line error.
pub fn main_with(words: &[String]) -> Result<String, String> {
    let Some((cmd, rest)) = words.split_first() else {
        return Ok(USAGE.to_string());
    };
    let a = Args::parse(rest)?;
    match cmd.as_str() {
        "-h" | "--help" | "help" => Ok(USAGE.to_string()),
        "-V" | "--version" | "version" => {
            a.at_most(0, "version takes no arguments")?;
            Ok(format!("tessel {}", env!("CARGO_PKG_VERSION")))
        }
        "info" => info(&a),
        "list" => list(&a),
        "lower" => lower(&a),
        "run" => run(&a),
        "bench" => bench(&a),
        "cache" => cache::cache(&a),
        "plugin" => plugin::plugin(&a),
        other => Err(format!(
            "unknown command `{other}`; commands: info, list, lower, run, bench, cache, plugin (tessel --help)"
        )),
    }
}

fn info(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok(format!("usage: tessel info [--device NAME | --plugin PATH]\n\nPrints the PJRT plugin's path, PJRT and StableHLO versions, platform and devices.\n\n{}", plugin::DEVICE_HELP));
    }
    a.only(&plugin::DEVICE_OPTIONS)?;
    a.at_most(0, "info takes no arguments")?;
    let d = plugin::device(a)?;
    let api = d
        .api_version()
        .map_or_else(|| "none".to_string(), |(maj, min)| format!("{maj}.{min}"));
    Ok(format!(
        "plugin:      {}\nplatform:    {}\ndevices:     {}\nPJRT API:    {api}\nStableHLO:   {}\nXLA version: {}",
        d.plugin_path()
            .map_or_else(|| "none (interpreter)".to_string(), |p| p.display().to_string()),
        d.platform_name(),
        d.device_count(),
        d.stablehlo_version().unwrap_or_else(|| "unknown".into()),
        d.xla_version().map(|v| v.to_string()).unwrap_or_else(|| "unknown".into()),
    ))
}

fn list(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok(
            "usage: tessel list\n\nLists the prebuilt kernels, their tensor arguments and options."
                .into(),
        );
    }
    a.only(&[])?;
    a.at_most(0, "list takes no arguments")?;
    let mut s = String::new();
    for e in registry::entries() {
        s.push_str(&format!(
            "{}({})\n    {}\n",
            e.name,
            e.args.join(", "),
            e.about
        ));
        for (k, d, h) in e.options {
            s.push_str(&format!("    --opt {k}=…   {h} (default {d})\n"));
        }
    }
    Ok(s.trim_end().to_string())
}

fn named<T>(
    entry: &registry::Entry,
    given: BTreeMap<String, String>,
    what: &str,
    load: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    for k in given.keys() {
        if !entry.args.contains(&k.as_str()) {
            return Err(format!(
                "kernel {} has no argument `{k}`; arguments: {}",
                entry.name,
                entry.args.join(", ")
            ));
        }
    }
    entry
        .args
        .iter()
        .map(|n| {
            let v = given
                .get(*n)
                .ok_or_else(|| format!("missing --{what} {n}=… for kernel {}", entry.name))?;
            load(v)
        })
        .collect()
}

fn lower(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok("usage: tessel lower KERNEL --shape name=2x128x64:f32 ... [--opt key=value ...]\n\nPrints the StableHLO of KERNEL for arguments of these shapes (dtype after the colon, f32 by default).".into());
    }
    a.only(&["shape", "opt"])?;
    a.at_most(
        1,
        "lower takes one kernel name; shapes go in --shape name=..",
    )?;
    let name = a
        .positional
        .first()
        .ok_or("lower needs a kernel name (tessel list)")?;
    let entry = find(name)?;
    let specs = named(&entry, pairs(a.all("shape"), "shape")?, "shape", spec)?;
    let opts = Opts::new(&entry, pairs(a.all("opt"), "opt")?)?;
    (entry.lower)(&specs, &opts).map_err(|e| e.to_string())
}

fn run(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok(format!("usage: tessel run KERNEL --arg name=file.npy ... [--opt key=value ...] [--out file.npy ...]\n                  [--device NAME | --plugin PATH]\n\nRuns KERNEL on the .npy inputs, writes its outputs to the --out files in order (or prints them when small), and prints the time.\n\n{}", plugin::DEVICE_HELP));
    }
    a.only(&["arg", "opt", "out", "device", "plugin"])?;
    a.at_most(
        1,
        "run takes one kernel name; inputs go in --arg name=file.npy",
    )?;
    let name = a
        .positional
        .first()
        .ok_or("run needs a kernel name (tessel list)")?;
    let entry = find(name)?;
    let inputs = named(&entry, pairs(a.all("arg"), "arg")?, "arg", npy)?;
    let opts = Opts::new(&entry, pairs(a.all("opt"), "opt")?)?;
    let d = plugin::device(a)?;
    let refs: Vec<_> = inputs.iter().collect();
    let hits = tessel::runtime::executable_cache_stats().hits;
    let t0 = Instant::now();
    let outs = (entry.run)(&d, &refs, &opts).map_err(|e| e.to_string())?;
    let first = t0.elapsed();
    let compiled = if tessel::runtime::executable_cache_stats().hits > hits {
        "load from the executable cache"
    } else {
        "compile"
    };
    let t1 = Instant::now();
    (entry.run)(&d, &refs, &opts).map_err(|e| e.to_string())?;
    let cached = t1.elapsed();
    let files = a.all("out");
    if files.len() > outs.len() {
        return Err(format!(
            "{} --out files for {} outputs",
            files.len(),
            outs.len()
        ));
    }
    let mut s = String::new();
    for (i, o) in outs.iter().enumerate() {
        match files.get(i) {
            Some(f) => {
                o.write_npy(f).map_err(|e| e.to_string())?;
                s.push_str(&format!("output {i}: {} -> {f}\n", o.spec()));
            }
            None => s.push_str(&format!("output {i}: {o:?}\n")),
        }
    }
    s.push_str(&format!(
        "time: {:.3} ms first call (trace + {compiled} + run), {:.3} ms cached",
        first.as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3
    ));
    Ok(s)
}

const PEER_HELP: &str = "
--peer PYTHON runs each workload below with tessel and with the JAX a skilled user would write
(benches/jax_peer.py, run by PYTHON, which needs `pip install jax`), alternately on the same machine,
and prints both times and their ratio (tessel / JAX: below 1 is faster). The persistent executable
cache is off for that run, so compile times are real. Peer workloads:
";

/// `tessel bench --peer PYTHON [WORKLOAD ...] [--json FILE]`.
fn bench_peer(a: &Args, python: &str) -> Result<String, String> {
    if a.one("plot").is_some() {
        return Err("--plot does not apply to --peer (use --json)".into());
    }
    for w in &a.positional {
        if !peer::WORKLOADS.iter().any(|(name, _)| name == w) {
            return Err(format!(
                "unknown peer workload `{w}`; workloads: {}",
                peer::WORKLOADS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let json_out = a
        .one("json")
        .map(|f| std::fs::File::create(f).map(|file| (f.to_string(), file)))
        .transpose()
        .map_err(|e| format!("--json: {e}"))?;
    // Compile times must be compiles, not loads from the persistent cache.
    // Nothing has read the environment yet: the device is opened below.
    std::env::set_var("TESSEL_EXECUTABLE_CACHE", "0");
    let d = plugin::device(a)?;
    let (version, rows) = peer::compare(&d, python, &a.positional)?;
    if let Some((f, mut file)) = json_out {
        file.write_all(peer::json(&version, &rows).as_bytes())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(peer::table(&version, &rows))
}

fn bench(a: &Args) -> Result<String, String> {
    let all = bench::workloads();
    if a.help() {
        let mut s = String::from(
            "usage: tessel bench [WORKLOAD ...] [--json FILE] [--plot FILE.svg] [--peer PYTHON] [--device NAME | --plugin PATH]\n\nRuns the benchmark suite (all workloads, or those named), each kernel against its reference in the\nsame run, and prints a table; --json writes the rows, --plot an SVG of time and memory against size.\n\nworkloads:\n",
        );
        let s0 = format!("{}\n", plugin::DEVICE_HELP);
        s.insert_str(
            s.find("\n\nRuns").unwrap_or(0),
            &format!("\n\n{}", s0.trim_end()),
        );
        for w in &all {
            s.push_str(&format!("  {:<8} {}\n", w.name, w.about));
        }
        s.push_str(PEER_HELP);
        for (name, about) in peer::WORKLOADS {
            s.push_str(&format!("  {name:<9} {about}\n"));
        }
        return Ok(s.trim_end().to_string());
    }
    a.only(&["json", "plot", "device", "plugin", "peer"])?;
    if let Some(python) = a.one("peer") {
        return bench_peer(a, python);
    }
    let chosen: Vec<&bench::Workload> = if a.positional.is_empty() {
        all.iter().collect()
    } else {
        a.positional
            .iter()
            .map(|n| {
                all.iter().find(|w| w.name == n).ok_or_else(|| {
                    format!(
                        "unknown workload `{n}`; workloads: {}",
                        all.iter().map(|w| w.name).collect::<Vec<_>>().join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?
    };
    // Open the outputs before the (long) run, so a bad path fails at once.
    let create = |key: &str| -> Result<Option<(String, std::fs::File)>, String> {
        a.one(key)
            .map(|f| {
                std::fs::File::create(f)
                    .map(|file| (f.to_string(), file))
                    .map_err(|e| format!("{f}: {e}"))
            })
            .transpose()
    };
    let json_out = create("json")?;
    let plot_out = create("plot")?;
    let d = plugin::device(a)?;
    let mut rows = Vec::new();
    let n = chosen.len();
    for (i, w) in chosen.iter().enumerate() {
        let done = (i * 20) / n.max(1);
        eprintln!(
            "[{}{}] {}/{n} {} ...",
            "#".repeat(done),
            " ".repeat(20 - done),
            i + 1,
            w.name
        );
        rows.extend((w.run)(&d).map_err(|e| format!("{}: {e}", w.name))?);
    }
    eprintln!("[{}] {n}/{n} done", "#".repeat(20));
    if let Some((f, mut file)) = json_out {
        file.write_all(bench::json(&rows).as_bytes())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    if let Some((f, mut file)) = plot_out {
        let workload = if rows.iter().any(|r| r.workload == "attention") {
            "attention"
        } else {
            rows.first().map(|r| r.workload.as_str()).unwrap_or("")
        };
        file.write_all(plot::svg(&rows, workload).as_bytes())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(bench::table(&rows))
}

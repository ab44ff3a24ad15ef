//! The `tessel` command: `info`, `list`, `lower`, `run`, `bench`, `cache`,
//! `plugin` and `completions`. The grammar is in [`command`]; every error
//! is one line on stderr and exit code 2.

pub mod args;
pub mod bench;
pub mod cache;
pub mod command;
pub mod peer;
pub mod plot;
pub mod plugin;
pub mod progress;
pub mod registry;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

use clap::FromArgMatches;

use args::{npy, pairs, spec};
use command::{Cli, Command, DeviceArgs};
use registry::{find, Opts};

/// What a command line asks for, once parsed.
pub enum Outcome {
    /// Print this on stdout, exit 0.
    Print(String),
    /// Print this one-line error on stderr, exit 2.
    Fail(String),
}

/// Runs the command line `words` (the program name first).
pub fn main_with(words: &[String]) -> Outcome {
    let matches = match command::command().try_get_matches_from(words) {
        Ok(m) => m,
        Err(e) => return clap_outcome(&e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return clap_outcome(&e),
    };
    match cli.command {
        // `arg_required_else_help` leaves only `--version` without a command.
        None => Outcome::Print(version()),
        Some(command) => match dispatch(command) {
            Ok(s) => Outcome::Print(s),
            Err(e) => Outcome::Fail(e),
        },
    }
}

/// Help and version are printed as asked; a usage error becomes one line:
/// clap's message, its tips, and the command's usage.
fn clap_outcome(e: &clap::Error) -> Outcome {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Outcome::Print(text.trim_end().to_string())
        }
        ErrorKind::InvalidValue => {
            Outcome::Fail(short_invalid_value(e).unwrap_or_else(|| one_line(&text)))
        }
        _ => Outcome::Fail(one_line(&text)),
    }
}

/// An invalid value among many valid ones (a kernel name): the suggestion
/// instead of the whole list, which `tessel list` prints.
fn short_invalid_value(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let valid = match e.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(v)) if v.len() > 12 => v,
        _ => return None,
    };
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    let hint = match e.get(ContextKind::SuggestedValue) {
        Some(ContextValue::String(s)) => format!("did you mean '{s}'? "),
        _ => String::new(),
    };
    Some(format!(
        "unknown {} '{value}'; {hint}(`tessel list` shows the {} names)",
        arg.trim_matches(|c| c == '<' || c == '>').to_lowercase(),
        valid.len()
    ))
}

/// clap's multi-line error text as one line.
fn one_line(text: &str) -> String {
    let mut message = String::new();
    let mut usage = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(m) = line.strip_prefix("error: ") {
            message.push_str(m);
        } else if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if line.starts_with("For more information") || line.starts_with("tip: to pass") {
            continue;
        } else if usage.is_none() {
            message.push_str("; ");
            message.push_str(line);
        }
    }
    match usage {
        Some(u) => format!("{message} (usage: {u})"),
        None => message,
    }
}

fn dispatch(command: Command) -> Result<String, String> {
    match command {
        Command::Info { device } => info(&device),
        Command::List => Ok(list()),
        Command::Lower {
            kernel,
            shapes,
            opts,
        } => lower(&kernel, &shapes, &opts),
        Command::Run {
            kernel,
            args,
            opts,
            outs,
            device,
        } => run(&kernel, &args, &opts, &outs, &device),
        Command::Bench {
            workloads,
            json,
            plot,
            peer,
            device,
        } => match peer {
            Some(python) => bench_peer(&workloads, json.as_deref(), &python, &device),
            None => bench(&workloads, json.as_deref(), plot.as_deref(), &device),
        },
        Command::Cache { action } => cache::cache(action),
        Command::Plugin { action } => plugin::plugin(action),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut command::command(), "tessel", &mut out);
            String::from_utf8(out).map_err(|e| e.to_string())
        }
        Command::Version => Ok(version()),
    }
}

fn version() -> String {
    format!("tessel {}", env!("CARGO_PKG_VERSION"))
}

fn info(device: &DeviceArgs) -> Result<String, String> {
    let d = plugin::device(device)?;
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

fn list() -> String {
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
    s.trim_end().to_string()
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

/// A kernel's error as the command reports it: without the line of this
/// command's source that called the kernel, which means nothing to its
/// user.
fn failure(e: tessel::Error) -> String {
    match e {
        tessel::Error::Kernel(mut k) => {
            k.called_at = None;
            k.to_string()
        }
        other => other.to_string(),
    }
}

fn lower(kernel: &str, shapes: &[String], opts: &[String]) -> Result<String, String> {
    let entry = find(kernel)?;
    let specs = named(&entry, pairs(shapes, "shape")?, "shape", spec)?;
    let opts = Opts::new(&entry, pairs(opts, "opt")?)?;
    (entry.lower)(&specs, &opts).map_err(failure)
}

fn run(
    kernel: &str,
    args: &[String],
    opts: &[String],
    files: &[String],
    device: &DeviceArgs,
) -> Result<String, String> {
    let entry = find(kernel)?;
    let inputs = named(&entry, pairs(args, "arg")?, "arg", npy)?;
    let opts = Opts::new(&entry, pairs(opts, "opt")?)?;
    let d = plugin::device(device)?;
    let refs: Vec<_> = inputs.iter().collect();
    let hits = tessel::runtime::executable_cache_stats().hits;
    let t0 = Instant::now();
    let outs = (entry.run)(&d, &refs, &opts).map_err(failure)?;
    let first = t0.elapsed();
    let compiled = if tessel::runtime::executable_cache_stats().hits > hits {
        "load from the executable cache"
    } else {
        "compile"
    };
    if files.len() > outs.len() {
        return Err(format!(
            "{} --out files for {} output{} of {kernel}",
            files.len(),
            outs.len(),
            if outs.len() == 1 { "" } else { "s" }
        ));
    }
    let t1 = Instant::now();
    (entry.run)(&d, &refs, &opts).map_err(failure)?;
    let cached = t1.elapsed();
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

/// Creates `path` before a long run, so that a bad path fails at once.
fn create(path: Option<&str>, what: &str) -> Result<Option<(String, std::fs::File)>, String> {
    path.map(|f| {
        std::fs::File::create(f)
            .map(|file| (f.to_string(), file))
            .map_err(|e| format!("--{what} {f}: {e}"))
    })
    .transpose()
}

/// Writes `text` to a file opened by [`create`].
fn write_to(out: Option<(String, std::fs::File)>, text: &str) -> Result<(), String> {
    if let Some((f, mut file)) = out {
        file.write_all(text.as_bytes())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(())
}

/// The entries of `all` named by `names`, in that order, or the message
/// naming the first unknown one (`what`) and listing the known names.
fn pick<'a, T>(
    names: &[String],
    all: &'a [T],
    name_of: impl Fn(&T) -> &str,
    what: &str,
) -> Result<Vec<&'a T>, String> {
    names
        .iter()
        .map(|n| {
            all.iter().find(|w| name_of(w) == n).ok_or_else(|| {
                let known: Vec<&str> = all.iter().map(&name_of).collect();
                format!("unknown {what} `{n}`; workloads: {}", known.join(", "))
            })
        })
        .collect()
}

/// `tessel bench --peer PYTHON [WORKLOAD ...] [--json FILE]`.
fn bench_peer(
    workloads: &[String],
    json: Option<&str>,
    python: &str,
    device: &DeviceArgs,
) -> Result<String, String> {
    pick(
        workloads,
        peer::WORKLOADS,
        |(name, _)| name,
        "peer workload",
    )?;
    let json_out = create(json, "json")?;
    // Compile times must be compiles, not loads from the persistent cache.
    // Nothing has read the environment yet: the device is opened below.
    std::env::set_var("TESSEL_EXECUTABLE_CACHE", "0");
    let d = plugin::device(device)?;
    let (version, rows) = peer::compare(&d, python, workloads)?;
    write_to(json_out, &peer::json(&version, &rows)?)?;
    Ok(peer::table(&version, &rows))
}

/// `tessel bench [WORKLOAD ...] [--json FILE] [--plot FILE.svg]`.
fn bench(
    workloads: &[String],
    json: Option<&str>,
    plot: Option<&str>,
    device: &DeviceArgs,
) -> Result<String, String> {
    let all = bench::workloads();
    let chosen = if workloads.is_empty() {
        all.iter().collect()
    } else {
        pick(workloads, &all, |w| w.name, "workload")?
    };
    let json_out = create(json, "json")?;
    let plot_out = create(plot, "plot")?;
    let d = plugin::device(device)?;
    let mut rows = Vec::new();
    let progress = progress::Progress::new(chosen.len());
    for w in &chosen {
        progress.start(w.name, "");
        rows.extend((w.run)(&d).map_err(|e| format!("{}: {e}", w.name))?);
        progress.done();
    }
    progress.finish();
    write_to(json_out, &bench::json(&rows)?)?;
    if plot_out.is_some() {
        let workload = if rows.iter().any(|r| r.workload == "attention") {
            "attention"
        } else {
            rows.first().map(|r| r.workload.as_str()).unwrap_or("")
        };
        write_to(plot_out, &plot::svg(&rows, workload))?;
    }
    Ok(bench::table(&rows))
}

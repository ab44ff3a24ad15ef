//! The command line's grammar: commands, their arguments and their help,
//! declared with clap's derive API. The lists that only exist at run time
//! (kernel names, benchmark workloads) are added by [`command`].

use clap::{Args, CommandFactory, Parser, Subcommand};

use super::{bench, peer, registry};

/// What `tessel --help` ends with: the inputs the commands read.
const INPUTS: &str =
    "Inputs are .npy files of f32, f64, f16, bf16, i8, i16, i32, i64, u8, u16, u32, u64, bool and
fp8; bf16 and fp8 as JAX's ml_dtypes saves them (`<V2`, `|V1`). A uint16 file is u16 data, not bf16;
`--opt q_dtype=fp8` also reads uint8 files as fp8 bit patterns. `tessel <command> --help` describes
a command.";

/// The help layout of every command: usage first, as the one-line errors print it.
const TEMPLATE: &str = "usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

/// `tessel`: run, lower and benchmark tessel's prebuilt kernels.
#[derive(Parser, Debug)]
#[command(
    name = "tessel",
    version,
    disable_version_flag = true,
    override_usage = "tessel <COMMAND> [OPTIONS] | tessel --version",
    args_conflicts_with_subcommands = true,
    about = "Run, lower and benchmark tessel's prebuilt kernels on a PJRT plugin.",
    help_template = "usage: {usage}\n\n{about-with-newline}\ncommands:\n{subcommands}\n\noptions:\n{options}\n{after-help}",
    after_help = INPUTS,
    subcommand_help_heading = "commands",
    disable_help_subcommand = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// Print the version.
    #[arg(short = 'V', long, action = clap::ArgAction::SetTrue)]
    pub version: bool,
    /// The command to run.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The PJRT plugin, its versions and devices.
    #[command(help_template = TEMPLATE)]
    Info {
        /// Where to run.
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// The prebuilt kernels with their arguments and options.
    #[command(help_template = TEMPLATE)]
    List,
    /// Print a kernel's StableHLO for arguments of the given shapes.
    #[command(
        help_template = TEMPLATE,
        after_help = "Shapes are extents joined by x and a dtype after a colon (f32 when left out): \
                      --shape q=1x8x128x64:bf16. `tessel list` names each kernel's arguments and options."
    )]
    Lower {
        /// The kernel (`tessel list`).
        #[arg(value_name = "KERNEL")]
        kernel: String,
        /// An argument's shape, `name=2x128x64:f32`; one per tensor argument.
        #[arg(short, long = "shape", value_name = "NAME=SHAPE")]
        shapes: Vec<String>,
        /// A kernel option, `key=value`.
        #[arg(long = "opt", value_name = "KEY=VALUE")]
        opts: Vec<String>,
    },
    /// Run a kernel on .npy inputs, write its outputs and print the time.
    #[command(
        help_template = TEMPLATE,
        after_help = "Outputs go to the --out files in order; the rest are printed. The first call's time \
                      includes tracing and compiling (or loading from the persistent cache); the second is \
                      the cached call."
    )]
    Run {
        /// The kernel (`tessel list`).
        #[arg(value_name = "KERNEL")]
        kernel: String,
        /// An input, `name=file.npy`; one per tensor argument.
        #[arg(short, long = "arg", value_name = "NAME=FILE")]
        args: Vec<String>,
        /// A kernel option, `key=value`.
        #[arg(long = "opt", value_name = "KEY=VALUE")]
        opts: Vec<String>,
        /// Where to write the outputs, in order (repeat for several).
        #[arg(short, long = "out", value_name = "FILE")]
        outs: Vec<String>,
        /// Where to run.
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// The benchmark suite: each workload against its reference, or (--peer) against JAX.
    #[command(help_template = TEMPLATE)]
    Bench {
        /// Workloads to run (all when none is named).
        #[arg(value_name = "WORKLOAD")]
        workloads: Vec<String>,
        /// Write the rows as JSON to this file.
        #[arg(short, long, value_name = "FILE")]
        json: Option<String>,
        /// Write an SVG plot of time and memory against size to this file.
        #[arg(long, value_name = "FILE.svg", conflicts_with = "peer")]
        plot: Option<String>,
        /// Compare with JAX run by this Python interpreter (needs `pip install jax`).
        #[arg(long, value_name = "PYTHON")]
        peer: Option<String>,
        /// Where to run.
        #[command(flatten)]
        device: DeviceArgs,
    },
    /// The persistent compilation cache: its size, or empty it.
    #[command(
        help_template = TEMPLATE,
        after_help = "Compiled programs are written there after each compile and loaded by the next process \
                      that compiles the same program for the same plugin. TESSEL_EXECUTABLE_CACHE=0 turns the \
                      cache off, TESSEL_EXECUTABLE_CACHE_DIR moves it, TESSEL_EXECUTABLE_CACHE_BYTES bounds its \
                      size (default 2 GiB; the least recently used go first)."
    )]
    Cache {
        /// What to do (show the cache when left out).
        #[command(subcommand)]
        action: Option<CacheAction>,
    },
    /// Install the CPU plugin (offline from a wheel), or show where it is looked for.
    #[command(
        help_template = TEMPLATE,
        subcommand_required = true,
        after_help = "TESSEL_OFFLINE=1 turns the implicit download off (a missing plugin is then an error \
                      naming `tessel plugin install WHEEL`); TESSEL_PJRT_PLUGIN names a plugin file to use instead."
    )]
    Plugin {
        /// What to do.
        #[command(subcommand)]
        action: PluginAction,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        help_template = TEMPLATE,
        after_help = "bash: tessel completions bash > ~/.local/share/bash-completion/completions/tessel\n\
                      zsh:  tessel completions zsh > \"${fpath[1]}/_tessel\"\n\
                      fish: tessel completions fish > ~/.config/fish/completions/tessel.fish"
    )]
    Completions {
        /// The shell.
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the version (as --version does).
    #[command(hide = true, help_template = TEMPLATE)]
    Version,
}

/// `tessel cache` actions.
#[derive(Subcommand, Debug)]
pub enum CacheAction {
    /// Remove every cached executable and autotuning choice.
    #[command(help_template = TEMPLATE)]
    Clear,
}

/// `tessel plugin` actions.
#[derive(Subcommand, Debug)]
pub enum PluginAction {
    /// Fetch a pinned PJRT CPU plugin build with pip (the official xla-cpu-pjrt when none is named; `tessel plugin info` lists them), or install one from a wheel you downloaded (offline, after a SHA-256 check).
    #[command(help_template = TEMPLATE)]
    Install {
        /// A pinned build's name (xla-cpu-pjrt, lammps-jax-pjrt-cpu, fastatomstruct-xla-cpu), or a downloaded wheel of one.
        #[arg(value_name = "NAME|WHEEL")]
        target: Option<String>,
    },
    /// Where the CPU plugin is looked for, whether it is installed, and what it is: file, SHA-256, build, PJRT API and platform versions, attributes, extensions and the workarounds that apply.
    #[command(help_template = TEMPLATE)]
    Info,
}

/// Device choice, on every command that runs something.
#[derive(Args, Debug, Default)]
pub struct DeviceArgs {
    /// cpu (the default), cpu:N (N devices), gpu, tpu or interpreter; without it, TESSEL_DEVICE.
    #[arg(short, long, value_name = "NAME", conflicts_with = "plugin")]
    pub device: Option<String>,
    /// A PJRT plugin file to load instead.
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<String>,
}

/// The full grammar, with the kernel names of `lower`/`run` and the
/// workloads of `bench` filled in (for help, completions and did-you-mean).
pub fn command() -> clap::Command {
    let kernels: Vec<&'static str> = registry::entries().iter().map(|e| e.name).collect();
    let mut workloads = String::from("workloads:\n");
    for w in bench::workloads() {
        workloads.push_str(&format!("  {:<9} {}\n", w.name, w.about));
    }
    workloads.push_str(
        "\n--peer PYTHON runs each workload below with tessel and with the JAX a skilled user would write\n\
         (run by PYTHON), alternately on the same machine, and prints both times and their ratio\n\
         (tessel / JAX: below 1 is faster). The persistent executable cache is off for that run, so\n\
         compile times are real. Peer workloads:\n",
    );
    for (name, about) in peer::WORKLOADS {
        workloads.push_str(&format!("  {name:<9} {about}\n"));
    }
    let kernel_names = move |c: clap::Command| {
        c.mut_arg("kernel", |a| {
            a.value_parser(clap::builder::PossibleValuesParser::new(kernels.clone()))
                .hide_possible_values(true)
        })
    };
    Cli::command()
        .mut_subcommand("lower", kernel_names.clone())
        .mut_subcommand("run", kernel_names)
        .mut_subcommand("bench", |c| c.after_help(workloads.trim_end().to_string()))
}

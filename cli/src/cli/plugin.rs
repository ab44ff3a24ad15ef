//! Device choice for the commands that run something (`--device`,
//! `--plugin`), and `tessel plugin install [WHEEL]` / `tessel plugin info`
//! (where plugins are looked for, and what the CPU plugin is: its identity
//! and the workarounds that apply to it).

use super::command::{DeviceArgs, PluginAction};
use tessel::runtime::{
    cache_dir, cached_cpu_plugin, cpu_plugin_path, gpu_plugin_path, install_cpu_plugin_wheel,
    install_plugin, install_plugin_wheel, installed_plugin_path, nvidia_libraries, offline,
    pinned_plugin, Device, KnownPlugin, PINNED_PLUGINS, WORKAROUNDS_VAR,
};

/// The device a command runs on: `--plugin PATH` (a PJRT plugin file),
/// else `--device NAME`, else `TESSEL_DEVICE` (see `Device::from_env`).
/// The grammar lets only one of the two options through.
pub fn device(a: &DeviceArgs) -> Result<Device, String> {
    let r = match (&a.plugin, &a.device) {
        (Some(path), _) => Device::from_plugin(path),
        (None, Some(name)) => Device::from_name(name),
        (None, None) => Device::from_env(),
    };
    r.map_err(|e| e.to_string())
}

/// `tessel plugin install [WHEEL]` and `tessel plugin info`.
pub fn plugin(action: PluginAction) -> Result<String, String> {
    match action {
        PluginAction::Install { target } => install(target.as_deref()),
        PluginAction::Info => Ok(format!("{}\n\n{}\n{}", info(), identity(), pinned())),
    }
}

/// The pinned builds, whether each is installed, and what
/// `TESSEL_WORKAROUNDS` is.
fn pinned() -> String {
    let mut out = String::from("pinned builds (tessel plugin install NAME):");
    for p in PINNED_PLUGINS {
        let state = match installed_plugin_path(&p) {
            Ok(path) if path.is_file() => format!("installed at {}", path.display()),
            _ => "not installed".to_string(),
        };
        out.push_str(&format!(
            "\n  {} {}: {state}\n    {}",
            p.name, p.version, p.provenance
        ));
    }
    let forced = std::env::var(WORKAROUNDS_VAR).unwrap_or_else(|_| "(not set)".into());
    out.push_str(&format!("\n{WORKAROUNDS_VAR}: {forced}"));
    out
}

/// `tessel plugin install [NAME|WHEEL]`: the official build by default, a
/// pinned build by name, or a wheel file of one (matched by its file name;
/// any other wheel is checked against the official build's hash).
fn install(target: Option<&str>) -> Result<String, String> {
    let names: Vec<&str> = PINNED_PLUGINS.iter().map(|p| p.name).collect();
    let (path, build) = match target {
        None => (cpu_plugin_path(), None),
        Some(name) if !name.ends_with(".whl") => {
            let p = pinned_plugin(name).ok_or_else(|| {
                format!(
                    "no pinned plugin build is named `{name}` (pinned: {})",
                    names.join(", ")
                )
            })?;
            (install_plugin(&p), Some(p))
        }
        Some(wheel) => {
            let file = std::path::Path::new(wheel)
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("");
            match PINNED_PLUGINS.iter().find(|p| p.wheel_file() == file) {
                Some(p) => (install_plugin_wheel(p, wheel), Some(*p)),
                None => (install_cpu_plugin_wheel(wheel), None),
            }
        }
    };
    let path = path.map_err(|e| e.to_string())?;
    let usage = match build {
        Some(p) if p != KnownPlugin::XlaCpuPjrt001.pinned() => format!(
            "\nuse it with --plugin {0} or TESSEL_PJRT_PLUGIN={0} ({1})",
            path.display(),
            p.provenance
        ),
        _ => String::new(),
    };
    Ok(format!("installed: {}{usage}", path.display()))
}

/// What the CPU plugin tessel would load is (`TESSEL_PJRT_PLUGIN`, else
/// the cached one): loaded, never fetched.
fn identity() -> String {
    let path = match std::env::var_os("TESSEL_PJRT_PLUGIN").filter(|v| !v.is_empty()) {
        Some(p) => std::path::PathBuf::from(p),
        None => match cached_cpu_plugin() {
            Ok(p) if p.is_file() => p,
            _ => return "CPU plugin identity: not installed (tessel plugin install)".into(),
        },
    };
    match Device::from_plugin(&path) {
        Ok(dev) => match dev.plugin_identity() {
            Some(id) => format!("CPU plugin identity:\n{}", id.to_string().trim_end()),
            None => "CPU plugin identity: none (not a PJRT plugin)".into(),
        },
        Err(e) => format!("CPU plugin identity: {} does not load: {e}", path.display()),
    }
}

fn info() -> String {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| "(not set)".into());
    let cached = match cached_cpu_plugin() {
        Ok(p) if p.is_file() => format!("{} (installed)", p.display()),
        Ok(p) => format!("{} (not installed)", p.display()),
        Err(e) => format!("unknown: {e}"),
    };
    let cache = cache_dir().map_or_else(|e| format!("unknown: {e}"), |d| d.display().to_string());
    let gpu = match gpu_plugin_path() {
        Ok(p) => {
            let libs = nvidia_libraries(&p);
            let nvidia = match libs.first().and_then(|l| l.parent()) {
                Some(dir) => format!(
                    "{} NVIDIA librar{} to preload (first in {})",
                    libs.len(),
                    if libs.len() == 1 { "y" } else { "ies" },
                    dir.display()
                ),
                None => "no NVIDIA libraries beside it: the loader path must find them".into(),
            };
            format!("{}\n                    {nvidia}", p.display())
        }
        Err(_) => "none (pip install \"jax[cuda13]\", or TESSEL_PJRT_GPU_PLUGIN)".into(),
    };
    format!(
        "cache:              {cache}\ncached CPU plugin:  {cached}\nGPU plugin:         {gpu}\nTESSEL_PJRT_PLUGIN: {}\nTESSEL_DEVICE:      {}\noffline:            {}",
        env("TESSEL_PJRT_PLUGIN"),
        env("TESSEL_DEVICE"),
        if offline() {
            "yes (TESSEL_OFFLINE): nothing is downloaded"
        } else {
            "no: a missing CPU plugin is fetched with pip on first use"
        }
    )
}

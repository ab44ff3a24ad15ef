//! Device choice for the commands that run something (`--device`,
//! `--plugin`), and `tessel plugin install [WHEEL]` / `tessel plugin info`.

use super::args::Args;
use tessel::runtime::{
    cache_dir, cached_cpu_plugin, cpu_plugin_path, install_cpu_plugin_wheel, offline, Device,
};

/// The options [`device`] reads.
pub const DEVICE_OPTIONS: [&str; 2] = ["device", "plugin"];

/// The help lines of [`DEVICE_OPTIONS`].
pub const DEVICE_HELP: &str =
    "  --device NAME     cpu (the default), cpu:N (N devices), gpu, tpu or interpreter;
                    without it, TESSEL_DEVICE
  --plugin PATH     a PJRT plugin file to load instead";

/// The device a command runs on: `--plugin PATH` (a PJRT plugin file),
/// else `--device NAME`, else `TESSEL_DEVICE` (see `Device::from_env`).
pub fn device(a: &Args) -> Result<Device, String> {
    let r = match (a.one("plugin"), a.one("device")) {
        (Some(_), Some(_)) => return Err("give --device or --plugin, not both".into()),
        (Some(path), None) => Device::from_plugin(path),
        (None, Some(name)) => Device::from_name(name),
        (None, None) => Device::from_env(),
    };
    r.map_err(|e| e.to_string())
}

const HELP: &str = "usage: tessel plugin install [WHEEL] | tessel plugin info

install         fetches the pinned XLA CPU PJRT plugin (xla-cpu-pjrt 0.0.1) into tessel's cache with pip
install WHEEL   installs it from a wheel you downloaded (offline), after checking its SHA-256
info            where the CPU plugin is looked for and whether it is installed

TESSEL_OFFLINE=1 turns the implicit download off (a missing plugin is then an error naming
`tessel plugin install WHEEL`); TESSEL_PJRT_PLUGIN names a plugin file to use instead.";

/// `tessel plugin ...`.
pub fn plugin(a: &Args) -> Result<String, String> {
    if a.help() {
        return Ok(HELP.into());
    }
    a.only(&[])?;
    match a.positional.first().map(String::as_str) {
        Some("install") => {
            a.at_most(2, "plugin install takes at most one wheel file")?;
            let path = match a.positional.get(1) {
                Some(wheel) => install_cpu_plugin_wheel(wheel),
                None => cpu_plugin_path(),
            }
            .map_err(|e| e.to_string())?;
            Ok(format!("installed: {}", path.display()))
        }
        Some("info") => {
            a.at_most(1, "plugin info takes no arguments")?;
            Ok(info())
        }
        Some(other) => Err(format!(
            "unknown plugin action `{other}`; expected `install` or `info` (tessel plugin --help)"
        )),
        None => {
            Err("plugin needs an action: `install [WHEEL]` or `info` (tessel plugin --help)".into())
        }
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
    format!(
        "cache:              {cache}\ncached CPU plugin:  {cached}\nTESSEL_PJRT_PLUGIN: {}\nTESSEL_DEVICE:      {}\noffline:            {}",
        env("TESSEL_PJRT_PLUGIN"),
        env("TESSEL_DEVICE"),
        if offline() {
            "yes (TESSEL_OFFLINE): nothing is downloaded"
        } else {
            "no: a missing CPU plugin is fetched with pip on first use"
        }
    )
}

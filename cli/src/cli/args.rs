//! The values inside the `tessel` command's arguments: `name=value` items,
//! shape strings and `.npy` inputs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessel::{HostTensor, TensorSpec};

/// `name=value` items of a repeated option.
pub fn pairs(items: &[String], what: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("--{what} takes name=value, got `{item}`"))?;
        if out.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("--{what} {k} is given twice"));
        }
    }
    Ok(out)
}

/// A shape string `2x128x64:f32`.
pub fn spec(s: &str) -> Result<TensorSpec, String> {
    TensorSpec::parse(s).ok_or_else(|| {
        format!("bad shape `{s}`: write extents joined by x and a dtype, e.g. 2x128x64:f32")
    })
}

/// An `.npy` input.
pub fn npy(path: &str) -> Result<HostTensor, String> {
    // A device or pipe (`/dev/zero`) would be read until memory runs out.
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            return Err(format!(
                "{path}: not a regular file (an .npy input must be a file)"
            ))
        }
        _ => {}
    }
    HostTensor::read_npy(PathBuf::from(path)).map_err(|e| e.to_string())
}

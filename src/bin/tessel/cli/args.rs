//! Command-line parsing for the `tessel` command: `--flag value` pairs,
//! `name=value` items, shape strings and `.npy` inputs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessel::{HostTensor, TensorSpec};

/// A command line split into positionals and repeated `--key value` options.
#[derive(Debug, Default)]
pub struct Args {
    /// Words that are not options.
    pub positional: Vec<String>,
    /// `--key value` pairs, in order, per key.
    pub options: BTreeMap<String, Vec<String>>,
    /// `--key` without a value.
    pub flags: Vec<String>,
}

/// Options that take no value.
const FLAGS: &[&str] = &["help", "h"];

impl Args {
    /// Splits `words`.
    pub fn parse(words: &[String]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut it = words.iter();
        while let Some(w) = it.next() {
            if let Some(key) = w
                .strip_prefix("--")
                .or_else(|| w.strip_prefix('-').filter(|k| *k == "h"))
            {
                if FLAGS.contains(&key) {
                    a.flags.push(key.to_string());
                    continue;
                }
                let (k, v) = match key.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => {
                        let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
                        (key.to_string(), v.clone())
                    }
                };
                a.options.entry(k).or_default().push(v);
            } else {
                a.positional.push(w.clone());
            }
        }
        Ok(a)
    }

    /// At most `n` positional words (`what` names them for the message):
    /// a word past them is an error rather than silently ignored.
    pub fn at_most(&self, n: usize, what: &str) -> Result<(), String> {
        match self.positional.get(n) {
            Some(extra) => Err(format!("unexpected argument `{extra}` ({what})")),
            None => Ok(()),
        }
    }

    /// Whether `--help` (or `-h`) was given.
    pub fn help(&self) -> bool {
        self.flags.iter().any(|f| f == "help" || f == "h")
    }

    /// The values of `--key`.
    pub fn all(&self, key: &str) -> &[String] {
        self.options.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The last value of `--key`.
    pub fn one(&self, key: &str) -> Option<&str> {
        self.all(key).last().map(String::as_str)
    }

    /// Fails on options outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<(), String> {
        for k in self.options.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(format!(
                    "unknown option --{k}; expected one of: {}",
                    allowed
                        .iter()
                        .map(|a| format!("--{a}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Ok(())
    }
}

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

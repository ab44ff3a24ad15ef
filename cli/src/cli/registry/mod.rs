//! The prebuilt kernels the `tessel` command can list, lower and run:
//! matrix products ([`matmul`]), attention ([`attention`]), elementwise /
//! per-row kernels ([`pointwise`]), backward kernels ([`grads`]) and
//! serving over KV caches ([`serving`]).

pub mod attention;
pub mod grads;
pub mod matmul;
pub mod pointwise;
pub mod serving;

use std::collections::BTreeMap;

use tessel::runtime::Device;
use tessel::{DType, Error, HostError, HostTensor, Result, TensorSpec};

/// `--opt key=value` settings, checked against an entry's options.
pub struct Opts(BTreeMap<String, String>);

/// The error for a value option `option` does not accept (`message` says
/// what it takes and what it got).
fn bad(option: &str, message: String) -> Error {
    HostError::InvalidOption {
        option: option.to_string(),
        message,
    }
    .into()
}

impl Opts {
    /// Checks `given` against `entry`'s options and fills in defaults.
    pub fn new(
        entry: &Entry,
        given: BTreeMap<String, String>,
    ) -> std::result::Result<Opts, String> {
        let mut all: BTreeMap<String, String> = entry
            .options
            .iter()
            .map(|(k, d, _)| (k.to_string(), d.to_string()))
            .collect();
        for (k, v) in given {
            if !all.contains_key(&k) {
                let known: Vec<&str> = entry.options.iter().map(|o| o.0).collect();
                return Err(format!(
                    "kernel {} has no option `{k}`; options: {}",
                    entry.name,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            }
            all.insert(k, v);
        }
        Ok(Opts(all))
    }

    fn get(&self, k: &str) -> &str {
        self.0.get(k).map(String::as_str).unwrap_or("")
    }

    fn bool(&self, k: &str) -> Result<bool> {
        match self.get(k) {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            v => Err(bad(k, format!("takes true or false, got `{v}`"))),
        }
    }

    fn usize_opt(&self, k: &str) -> Result<Option<usize>> {
        match self.get(k) {
            "" | "none" => Ok(None),
            v => v
                .parse()
                .map(Some)
                .map_err(|_| bad(k, format!("takes a positive integer or none, got `{v}`"))),
        }
    }

    fn f64_opt(&self, k: &str) -> Result<Option<f64>> {
        match self.get(k) {
            "" | "none" => Ok(None),
            v => v
                .parse()
                .map(Some)
                .map_err(|_| bad(k, format!("takes a number or none, got `{v}`"))),
        }
    }

    fn f64(&self, k: &str) -> Result<f64> {
        self.get(k)
            .parse()
            .map_err(|_| bad(k, format!("takes a number, got `{}`", self.get(k))))
    }

    fn isize(&self, k: &str) -> Result<isize> {
        self.get(k)
            .parse()
            .map_err(|_| bad(k, format!("takes an integer, got `{}`", self.get(k))))
    }

    fn u32(&self, k: &str) -> Result<u32> {
        self.get(k).parse().map_err(|_| {
            bad(
                k,
                format!(
                    "takes an integer from 0 to 4294967295, got `{}`",
                    self.get(k)
                ),
            )
        })
    }

    /// An option's text with a `'static` lifetime (the command runs once).
    fn leak(&self, k: &str) -> &'static str {
        Box::leak(self.get(k).to_string().into_boxed_str())
    }

    fn dtype_opt(&self, k: &str) -> Result<Option<DType>> {
        match self.get(k) {
            "" | "none" => Ok(None),
            v => DType::parse(v)
                .map(Some)
                .ok_or_else(|| bad(k, format!("takes a dtype (f32, bf16, ...), got `{v}`"))),
        }
    }
}

/// A kernel the command knows: its argument names, options, and how to run and lower it.
pub struct Entry {
    /// The kernel's name on the command line.
    pub name: &'static str,
    /// One line on what it computes.
    pub about: &'static str,
    /// Its tensor arguments, in order.
    pub args: &'static [&'static str],
    /// (option, default, meaning).
    pub options: &'static [(&'static str, &'static str, &'static str)],
    /// Runs it.
    pub run: fn(&Device, &[&HostTensor], &Opts) -> Result<Vec<HostTensor>>,
    /// Lowers it.
    pub lower: fn(&[TensorSpec], &Opts) -> Result<String>,
}

/// Every prebuilt kernel, by name: the matrix products, then attention,
/// then the elementwise and per-row kernels.
pub fn entries() -> Vec<Entry> {
    let mut all = matmul::entries();
    all.extend(attention::entries());
    all.extend(pointwise::entries());
    all.extend(grads::entries());
    all.extend(serving::entries());
    all
}

/// The entry called `name`.
pub fn find(name: &str) -> std::result::Result<Entry, String> {
    let all = entries();
    let names: Vec<&str> = all.iter().map(|e| e.name).collect();
    let list = names.join(", ");
    all.into_iter()
        .find(|e| e.name == name)
        .ok_or_else(|| format!("unknown kernel `{name}`; kernels: {list}"))
}

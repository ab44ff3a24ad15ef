//! The native functions compiled programs may call (`ffi_call`): a
//! process-wide table from a name to a Rust function over host tensors.
//! The XLA plugin's FFI handler and the interpreter both call through it,
//! so a function behaves the same on every device.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use super::HostTensor;

/// A static attribute of one call of a native function.
#[derive(Clone, Debug, PartialEq)]
pub enum FfiAttr {
    /// A floating-point number.
    F64(f64),
    /// An integer.
    I64(i64),
    /// A string.
    Str(String),
}

/// What a native function receives: its arguments (copied to the host) and
/// the call's attributes by name.
#[derive(Debug)]
pub struct FfiCall<'a> {
    /// The arguments, in order.
    pub args: &'a [HostTensor],
    /// The attributes, sorted by name.
    pub attrs: &'a [(String, FfiAttr)],
}

impl FfiCall<'_> {
    /// The attribute `name`, if the call has it.
    pub fn attr(&self, name: &str) -> Option<&FfiAttr> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// The float attribute `name` (an integer one converted).
    ///
    /// # Errors
    ///
    /// A message naming the attribute when it is missing or a string.
    pub fn f64(&self, name: &str) -> Result<f64, String> {
        match self.attr(name) {
            Some(FfiAttr::F64(v)) => Ok(*v),
            Some(FfiAttr::I64(v)) => Ok(*v as f64),
            Some(FfiAttr::Str(_)) => Err(format!("attribute `{name}` is a string, not a number")),
            None => Err(format!("the call has no attribute `{name}`")),
        }
    }

    /// The integer attribute `name`.
    ///
    /// # Errors
    ///
    /// A message naming the attribute when it is missing or not an integer.
    pub fn i64(&self, name: &str) -> Result<i64, String> {
        match self.attr(name) {
            Some(FfiAttr::I64(v)) => Ok(*v),
            Some(_) => Err(format!("attribute `{name}` is not an integer")),
            None => Err(format!("the call has no attribute `{name}`")),
        }
    }
}

/// A native function: its results, or a message that becomes the call's
/// error.
pub type FfiFn = Arc<dyn Fn(&FfiCall<'_>) -> Result<Vec<HostTensor>, String> + Send + Sync>;

/// The custom-call target every native call lowers to: one handler that
/// reads the function's name from the call's `tessel_fn` attribute.
pub const FFI_TARGET: &str = "tessel_ffi";

/// The attribute that names the called function.
pub const FFI_NAME_ATTR: &str = "tessel_fn";

/// Whether `name` can name a native function or an attribute: ASCII
/// letters, digits, `_`, `.`, `-` and `:` (a module path), starting with a
/// letter or `_`.
pub fn valid_ffi_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | ':'))
}

fn table() -> &'static RwLock<HashMap<String, FfiFn>> {
    static TABLE: OnceLock<RwLock<HashMap<String, FfiFn>>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Registers `f` under `name`, replacing any function registered under it.
pub fn register_ffi(name: &str, f: FfiFn) {
    let mut t = table().write().unwrap_or_else(|e| e.into_inner());
    t.insert(name.to_string(), f);
}

/// The function registered under `name`.
pub fn ffi_function(name: &str) -> Option<FfiFn> {
    let t = table().read().unwrap_or_else(|e| e.into_inner());
    t.get(name).cloned()
}

/// Calls the function registered under `name` and checks its results
/// against `results` (their number and types).
///
/// # Errors
///
/// A message for an unknown name, the function's own error or panic, or
/// results of the wrong number or types.
pub fn call_ffi(
    name: &str,
    call: &FfiCall<'_>,
    results: &[crate::shape::TensorSpec],
) -> Result<Vec<HostTensor>, String> {
    let f =
        ffi_function(name).ok_or_else(|| format!("no native function `{name}` is registered"))?;
    // A panic in the function is its failure, not the process's.
    let outs =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(call))).map_err(|e| {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("panicked: {text}")
        })??;
    if outs.len() != results.len() {
        return Err(format!(
            "returned {} results, the call declares {}",
            outs.len(),
            results.len()
        ));
    }
    for (i, (o, want)) in outs.iter().zip(results).enumerate() {
        if o.spec() != want {
            return Err(format!(
                "result {i} is {} but the call declares {want}",
                o.spec()
            ));
        }
    }
    Ok(outs)
}

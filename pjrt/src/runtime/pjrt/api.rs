//! Loading a PJRT plugin: `dlopen`, `GetPjrtApi`, version checks,
//! `PJRT_Plugin_Initialize` and `PJRT_Plugin_Attributes`.
//!
//! Each plugin file is loaded at most once per process (a global registry
//! keyed by its canonical path) and never unloaded: XLA does not support
//! `dlclose`, so the library handle is leaked on purpose.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::args::Args;
use super::call::pjrt_call;
use super::error::ErrorFns;
use super::ffi;
use crate::error::{DeviceError, Result};

/// Reads the function pointer `PJRT_Api::$name`, checking first that the
/// plugin's `PJRT_Api` is long enough to contain it and that it is non-null.
/// Evaluates to `Result<fn, DeviceError>`.
macro_rules! pjrt_fn {
    ($api:expr, $name:ident) => {{
        let api: &$crate::runtime::pjrt::api::Api = $api;
        let offset = ::std::mem::offset_of!($crate::runtime::pjrt::ffi::PJRT_Api, $name);
        let size = ::std::mem::size_of::<$crate::runtime::pjrt::ffi::$name>();
        let f = if api.covers(offset, size) {
            // Through `pjrt_call!` this block stands inside the call site's
            // `unsafe` block; it keeps its own argument all the same.
            #[allow(unused_unsafe)]
            // SAFETY: `api.raw()` points to the plugin's `PJRT_Api`, which
            // lives as long as the process (the library is never unloaded)
            // and is `struct_size` bytes long; the field lies inside it. Only
            // this field is read, no reference to the whole struct is made.
            let f = unsafe { ::std::ptr::addr_of!((*api.raw()).$name).read() };
            f
        } else {
            None
        };
        f.ok_or_else(|| api.missing(stringify!($name)))
    }};
}
pub(crate) use pjrt_fn;

/// The value of a plugin attribute (`PJRT_Plugin_Attributes`) or a cost
/// analysis property.
#[derive(Clone, Debug, PartialEq)]
pub enum AttributeValue {
    /// A string.
    String(String),
    /// A 64-bit integer.
    Int64(i64),
    /// A list of 64-bit integers (versions such as `[1, 13, 3]`).
    Int64List(Vec<i64>),
    /// A float.
    Float(f32),
    /// A boolean.
    Bool(bool),
}

impl AttributeValue {
    /// The value as a number, when it is one (`Bool` is 0 or 1).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttributeValue::Int64(v) => Some(*v as f64),
            AttributeValue::Float(v) => Some(f64::from(*v)),
            AttributeValue::Bool(v) => Some(f64::from(u8::from(*v))),
            AttributeValue::String(_) | AttributeValue::Int64List(_) => None,
        }
    }
}

impl fmt::Display for AttributeValue {
    /// Strings as they are, integer lists joined with `.` (they are versions).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::String(s) => f.write_str(s),
            AttributeValue::Int64(v) => write!(f, "{v}"),
            AttributeValue::Int64List(v) => {
                let parts: Vec<String> = v.iter().map(i64::to_string).collect();
                f.write_str(&parts.join("."))
            }
            AttributeValue::Float(v) => write!(f, "{v}"),
            AttributeValue::Bool(v) => write!(f, "{v}"),
        }
    }
}

/// A loaded, initialized PJRT plugin. Lives for the rest of the process.
pub(crate) struct Api {
    raw: *const ffi::PJRT_Api,
    struct_size: usize,
    path: PathBuf,
    version: (i32, i32),
    attributes: Vec<(String, AttributeValue)>,
    /// The types, struct sizes and addresses of the extensions in the
    /// plugin's `extension_start` chain.
    extensions: Vec<(
        ffi::PJRT_Extension_Type,
        usize,
        *const ffi::PJRT_Extension_Base,
    )>,
    error_fns: ErrorFns,
}

// SAFETY: `raw` points to the plugin's immutable, process-lifetime function
// table; PJRT requires its functions to be callable from any thread. The
// remaining fields are plain owned data.
unsafe impl Send for Api {}
// SAFETY: as above; nothing in `Api` is mutated after loading.
unsafe impl Sync for Api {}

impl Api {
    /// The plugin's function table.
    pub(crate) fn raw(&self) -> *const ffi::PJRT_Api {
        self.raw
    }

    /// Whether the plugin's `PJRT_Api` contains `size` bytes at `offset`.
    pub(crate) fn covers(&self, offset: usize, size: usize) -> bool {
        offset
            .checked_add(size)
            .is_some_and(|end| end <= self.struct_size)
    }

    /// The error for a function this plugin does not provide.
    pub(crate) fn missing(&self, name: &str) -> DeviceError {
        DeviceError::Incompatible {
            path: self.path.clone(),
            message: format!(
                "the plugin (PJRT API {}.{}) does not provide {name}",
                self.version.0, self.version.1
            ),
        }
    }

    /// The error-handling functions (present in every plugin, checked at load).
    pub(crate) fn error_fns(&self) -> ErrorFns {
        self.error_fns
    }

    /// The plugin file (canonical path).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// PJRT API (major, minor) the plugin implements.
    pub(crate) fn version(&self) -> (i32, i32) {
        self.version
    }

    /// `PJRT_Plugin_Attributes`, copied at load.
    pub(crate) fn attributes(&self) -> &[(String, AttributeValue)] {
        &self.attributes
    }

    /// The types of the plugin's extensions (`PJRT_Extension_Type_*`) with
    /// the `struct_size` each declares (which says how many of its
    /// functions the plugin has), in the order of its chain.
    pub(crate) fn extensions(
        &self,
    ) -> impl Iterator<Item = (ffi::PJRT_Extension_Type, usize)> + '_ {
        self.extensions.iter().map(|&(t, size, _)| (t, size))
    }

    /// The plugin's FFI extension, when its struct holds the three
    /// functions up to handler registration.
    pub(crate) fn ffi_extension(&self) -> Option<*const ffi::PJRT_Extension_Base> {
        let full = std::mem::size_of::<crate::runtime::ffi_calls::xla::PjrtFfiExtension>();
        let &(_, size, base) = self
            .extensions
            .iter()
            .find(|(t, _, _)| *t == ffi::PJRT_Extension_Type_FFI)?;
        (size >= full && !base.is_null()).then_some(base)
    }

    /// The attribute named `name`.
    pub(crate) fn attribute(&self, name: &str) -> Option<&AttributeValue> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// Awaits `event` (if non-null), then destroys it; returns the event's
    /// error as the error of `call`.
    ///
    /// # Safety
    ///
    /// `event` must be null or a live event from this plugin; it is destroyed.
    pub(crate) unsafe fn await_event(
        &self,
        call: &'static str,
        event: *mut ffi::PJRT_Event,
    ) -> Result<(), DeviceError> {
        if event.is_null() {
            return Ok(());
        }
        let mut args = ffi::PJRT_Event_Await_Args::new();
        args.event = event;
        // SAFETY: `event` is a live event of this plugin (caller contract).
        let awaited = unsafe { pjrt_call!(self, PJRT_Event_Await, &mut args, reported_as: call) };
        // SAFETY: `event` is live and destroyed exactly once, here.
        unsafe { self.destroy_event(event) };
        awaited
    }

    /// Destroys `event` (if non-null), ignoring a failure to do so.
    ///
    /// # Safety
    ///
    /// `event` must be null or a live event from this plugin; it is destroyed.
    pub(crate) unsafe fn destroy_event(&self, event: *mut ffi::PJRT_Event) {
        if event.is_null() {
            return;
        }
        let mut args = ffi::PJRT_Event_Destroy_Args::new();
        args.event = event;
        // SAFETY: `event` is a live event of this plugin (caller contract),
        // destroyed here once; a failure to destroy it is ignored.
        let _ = unsafe { pjrt_call!(self, PJRT_Event_Destroy, &mut args) };
    }
}

type Registry = Mutex<HashMap<PathBuf, &'static Api>>;

fn registry() -> &'static Registry {
    static REGISTRY: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Loads and initializes the plugin at `path`, or returns the one already
/// loaded from the same file.
pub(crate) fn load(path: &Path) -> Result<&'static Api> {
    if !path.is_file() {
        return Err(DeviceError::PluginNotFound(format!(
            "{} does not exist or is not a file",
            path.display()
        ))
        .into());
    }
    let canonical = std::fs::canonicalize(path).map_err(|source| crate::Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    // Held while loading, so two threads never initialize the same plugin.
    let mut loaded = registry().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(api) = loaded.get(&canonical) {
        return Ok(api);
    }
    let api: &'static Api = Box::leak(Box::new(open(&canonical)?));
    loaded.insert(canonical, api);
    Ok(api)
}

pub(in crate::runtime) fn load_error(path: &Path, message: impl Into<String>) -> DeviceError {
    DeviceError::PluginLoad {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn incompatible(path: &Path, message: impl Into<String>) -> DeviceError {
    DeviceError::Incompatible {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// An error and its chain of sources, as one line.
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// The variable that, set to anything, lets the plugins' informational
/// log lines through (XLA's `I0000 ... cpu_device_count set via
/// create_options` and absl's warning before them).
pub const PLUGIN_LOGS_VAR: &str = "TESSEL_PLUGIN_LOGS";

/// Keeps XLA's informational log lines off stderr (warnings and errors
/// still show) unless [`PLUGIN_LOGS_VAR`] is set or the process chose a
/// level itself (`TF_CPP_MIN_LOG_LEVEL`). Called before the first plugin
/// is loaded, with the registry's lock held.
fn quiet_plugin_logs() {
    const LEVEL: &str = "TF_CPP_MIN_LOG_LEVEL";
    if std::env::var_os(PLUGIN_LOGS_VAR).is_none() && std::env::var_os(LEVEL).is_none() {
        std::env::set_var(LEVEL, "1");
    }
}

type GetPjrtApi = unsafe extern "C" fn() -> *const ffi::PJRT_Api;

fn open(path: &Path) -> Result<Api> {
    if !cfg!(target_pointer_width = "64") {
        return Err(incompatible(path, "tessel's PJRT bindings need a 64-bit target").into());
    }
    // A file cut short would be mapped anyway and crash the process on
    // first touch of a page past its end.
    super::super::plugin::elf::check_whole(path).map_err(|m| load_error(path, m))?;
    quiet_plugin_logs();
    // SAFETY: loading a shared library runs its initializers. The caller
    // asked for this file as a PJRT plugin; PJRT plugins are ordinary shared
    // libraries whose initializers only register XLA components.
    let library = unsafe { libloading::Library::new(path) }
        .map_err(|e| load_error(path, with_sources(&e)))?;
    // SAFETY: `GetPjrtApi` is the PJRT plugin entry point with this
    // signature; if the symbol is missing we report it instead of calling.
    let get_api = unsafe { library.get::<GetPjrtApi>(b"GetPjrtApi\0") }
        .map(|s| *s)
        .map_err(|_| {
            load_error(
                path,
                "not a PJRT plugin: the library does not export GetPjrtApi",
            )
        });
    // XLA does not support unloading: the library stays mapped for the rest
    // of the process whatever happens next.
    std::mem::forget(library);
    let get_api = get_api?;
    // SAFETY: `get_api` is the plugin's entry point; it takes no arguments
    // and returns a pointer to a static function table (or null).
    let raw = unsafe { get_api() };
    if raw.is_null() {
        return Err(load_error(path, "GetPjrtApi returned NULL").into());
    }
    // SAFETY: every PJRT_Api starts with `size_t struct_size`.
    let struct_size = unsafe { std::ptr::addr_of!((*raw).struct_size).read() };
    let version_end =
        std::mem::offset_of!(ffi::PJRT_Api, pjrt_api_version) + size_of::<ffi::PJRT_Api_Version>();
    if struct_size < version_end {
        return Err(incompatible(
            path,
            format!("PJRT_Api is only {struct_size} bytes long; it has no version"),
        )
        .into());
    }
    // SAFETY: the version struct lies inside the first `struct_size` bytes.
    let version = unsafe { std::ptr::addr_of!((*raw).pjrt_api_version).read() };
    let version = (version.major_version, version.minor_version);
    if i64::from(version.0) != i64::from(ffi::PJRT_API_MAJOR) {
        return Err(incompatible(
            path,
            format!(
                "the plugin implements PJRT API {}.{}, tessel speaks {}.{}",
                version.0,
                version.1,
                ffi::PJRT_API_MAJOR,
                ffi::PJRT_API_MINOR
            ),
        )
        .into());
    }
    let mut api = Api {
        raw,
        struct_size,
        path: path.to_path_buf(),
        version,
        attributes: Vec::new(),
        extensions: Vec::new(),
        // Replaced just below; the placeholder is never called.
        error_fns: placeholder_error_fns(),
    };
    api.error_fns = ErrorFns {
        destroy: pjrt_fn!(&api, PJRT_Error_Destroy)?,
        message: pjrt_fn!(&api, PJRT_Error_Message)?,
        get_code: pjrt_fn!(&api, PJRT_Error_GetCode)?,
    };

    let mut init_args = ffi::PJRT_Plugin_Initialize_Args::new();
    // SAFETY: the first call into the plugin after loading, as PJRT requires;
    // the args struct has no pointers or handles to set.
    unsafe { pjrt_call!(&api, PJRT_Plugin_Initialize, &mut init_args) }.map_err(|e| match e {
        missing @ DeviceError::Incompatible { .. } => missing,
        failed => load_error(path, failed.to_string()),
    })?;

    api.attributes = read_attributes(&api)?;
    // SAFETY: `raw` is the plugin's initialized function table, whose first
    // `struct_size` bytes (checked to cover the version, which follows
    // `extension_start`) are readable for the process's life.
    api.extensions = unsafe { extension_types(raw) };
    Ok(api)
}

/// The types, struct sizes and addresses in the extension chain of `raw`
/// (at most 64 links, so a malformed chain that loops cannot hang the
/// load).
///
/// # Safety
///
/// `raw` must be a loaded plugin's `PJRT_Api` whose `extension_start` is
/// null or the head of a chain of valid `PJRT_Extension_Base`s.
unsafe fn extension_types(
    raw: *const ffi::PJRT_Api,
) -> Vec<(
    ffi::PJRT_Extension_Type,
    usize,
    *const ffi::PJRT_Extension_Base,
)> {
    // SAFETY: caller contract: the field is inside the table.
    let mut next = unsafe { std::ptr::addr_of!((*raw).extension_start).read() };
    let mut types = Vec::new();
    while !next.is_null() && types.len() < 64 {
        // SAFETY: caller contract: each link is a valid extension base,
        // owned by the plugin for the process's life.
        let base = unsafe { next.read() };
        types.push((base.type_, base.struct_size, next as *const _));
        next = base.next;
    }
    types
}

fn placeholder_error_fns() -> ErrorFns {
    unsafe extern "C" fn destroy(_: *mut ffi::PJRT_Error_Destroy_Args) {}
    unsafe extern "C" fn message(_: *mut ffi::PJRT_Error_Message_Args) {}
    unsafe extern "C" fn get_code(_: *mut ffi::PJRT_Error_GetCode_Args) -> *mut ffi::PJRT_Error {
        std::ptr::null_mut()
    }
    ErrorFns {
        destroy,
        message,
        get_code,
    }
}

fn read_attributes(api: &Api) -> Result<Vec<(String, AttributeValue)>> {
    // Older plugins lack the function; they simply have no attributes.
    if pjrt_fn!(api, PJRT_Plugin_Attributes).is_err() {
        return Ok(Vec::new());
    }
    let mut args = ffi::PJRT_Plugin_Attributes_Args::new();
    // SAFETY: the plugin is initialized; the args struct has no inputs, and
    // the call only fills `attributes` and `num_attributes`.
    unsafe { pjrt_call!(api, PJRT_Plugin_Attributes, &mut args) }?;
    // SAFETY: the plugin returned `num_attributes` named values with process
    // lifetime at `attributes`.
    Ok(unsafe { named_values(args.attributes, args.num_attributes) })
}

/// Copies a plugin-owned array of `PJRT_NamedValue`s.
///
/// # Safety
///
/// `values` must be null (with `count == 0`) or point to `count` valid named
/// values whose names and array/string values are valid for reads.
pub(crate) unsafe fn named_values(
    values: *const ffi::PJRT_NamedValue,
    count: usize,
) -> Vec<(String, AttributeValue)> {
    if values.is_null() || count == 0 {
        return Vec::new();
    }
    // SAFETY: caller contract.
    let values = unsafe { std::slice::from_raw_parts(values, count) };
    values
        .iter()
        .map(|v| {
            // SAFETY: caller contract: name and value pointers are valid for
            // `name_size` / `value_size` elements; the union member read is
            // the one `type_` selects.
            unsafe {
                let name = bytes_to_string(v.name.cast(), v.name_size);
                let value = match v.type_ {
                    ffi::PJRT_NamedValue_kString => AttributeValue::String(bytes_to_string(
                        v.__bindgen_anon_1.string_value.cast(),
                        v.value_size,
                    )),
                    ffi::PJRT_NamedValue_kInt64 => {
                        AttributeValue::Int64(v.__bindgen_anon_1.int64_value)
                    }
                    ffi::PJRT_NamedValue_kInt64List => {
                        let p = v.__bindgen_anon_1.int64_array_value;
                        AttributeValue::Int64List(if p.is_null() || v.value_size == 0 {
                            Vec::new()
                        } else {
                            std::slice::from_raw_parts(p, v.value_size).to_vec()
                        })
                    }
                    ffi::PJRT_NamedValue_kFloat => {
                        AttributeValue::Float(v.__bindgen_anon_1.float_value)
                    }
                    ffi::PJRT_NamedValue_kBool => {
                        AttributeValue::Bool(v.__bindgen_anon_1.bool_value)
                    }
                    other => AttributeValue::String(format!("<unknown value type {other}>")),
                };
                (name, value)
            }
        })
        .collect()
}

/// Copies `len` bytes at `ptr` into a `String` (lossy UTF-8).
///
/// # Safety
///
/// `ptr` must be null or valid for reads of `len` bytes.
pub(crate) unsafe fn bytes_to_string(ptr: *const u8, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // SAFETY: caller contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    String::from_utf8_lossy(bytes).into_owned()
}

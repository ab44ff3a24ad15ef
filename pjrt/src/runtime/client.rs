//! A `PJRT_Client`: created from a loaded plugin with create options,
//! destroyed when the last [`Device`](super::Device), executable or buffer
//! using it is dropped.

use std::ffi::c_char;

use super::pjrt::api::Api;
use super::pjrt::args::Args;
use super::pjrt::call::pjrt_call;
use super::pjrt::ffi;
use crate::error::{DeviceError, Result};

/// A value of a client create option (`PJRT_NamedValue`).
///
/// Each plugin has its own option names and types; the CPU plugin's
/// `cpu_device_count` is an [`CreateOption::Int64`] (passing a string aborts
/// the process inside the plugin). Unknown names are ignored by the CPU plugin
/// and rejected by the GPU plugin.
#[derive(Clone, Debug, PartialEq)]
pub enum CreateOption {
    /// A string option.
    String(String),
    /// A 64-bit integer option.
    Int64(i64),
    /// A list of 64-bit integers.
    Int64List(Vec<i64>),
    /// A float option.
    Float(f32),
    /// A boolean option.
    Bool(bool),
}

/// The type of a [`CreateOption`] value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OptionKind {
    String,
    Int64,
    Int64List,
    Float,
    Bool,
}

impl OptionKind {
    /// The type, for messages.
    fn name(self) -> &'static str {
        match self {
            OptionKind::String => "a string",
            OptionKind::Int64 => "an int64",
            OptionKind::Int64List => "a list of int64",
            OptionKind::Float => "a float",
            OptionKind::Bool => "a bool",
        }
    }
}

impl CreateOption {
    fn kind(&self) -> OptionKind {
        match self {
            CreateOption::String(_) => OptionKind::String,
            CreateOption::Int64(_) => OptionKind::Int64,
            CreateOption::Int64List(_) => OptionKind::Int64List,
            CreateOption::Float(_) => OptionKind::Float,
            CreateOption::Bool(_) => OptionKind::Bool,
        }
    }
}

/// The create options the known plugins (CPU, CUDA) take, with their
/// types: a value of another type aborts inside the plugin, so it is
/// refused before the call. Other names pass through unchecked.
const KNOWN_OPTIONS: &[(&str, OptionKind)] = &[
    ("cpu_device_count", OptionKind::Int64),
    ("platform_name", OptionKind::String),
    ("allocator", OptionKind::String),
    ("memory_fraction", OptionKind::Float),
    ("preallocate", OptionKind::Bool),
    ("visible_devices", OptionKind::Int64List),
    ("node_id", OptionKind::Int64),
    ("num_nodes", OptionKind::Int64),
];

/// Checks the types of the known create options, and the CPU plugin's
/// device count (it builds every device up front: 100,000 crashed it).
fn check_options(options: &[(&str, CreateOption)]) -> Result<()> {
    for (name, value) in options {
        if let ("cpu_device_count", CreateOption::Int64(n)) = (*name, value) {
            if !(1..=crate::error::MAX_CPU_DEVICES as i64).contains(n) {
                return Err(DeviceError::DeviceCount {
                    requested: usize::try_from(*n).unwrap_or(0),
                }
                .into());
            }
        }
        if let Some(&(_, expected)) = KNOWN_OPTIONS.iter().find(|(n, _)| n == name) {
            if expected != value.kind() {
                return Err(DeviceError::CreateOptionType {
                    name: name.to_string(),
                    expected: expected.name(),
                    got: value.kind().name(),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The client behind a [`Device`](super::Device).
pub(crate) struct Client {
    api: &'static Api,
    raw: *mut ffi::PJRT_Client,
    devices: Vec<*mut ffi::PJRT_Device>,
    platform_name: String,
    /// What the plugin is, read on first use (hashing an unknown plugin
    /// file takes a moment, once per file).
    identity: std::sync::OnceLock<super::PluginIdentity>,
    /// What higher layers attached to the `Device`s over this client (weak:
    /// attachments such as compile caches hold executables, which hold the client).
    pub(crate) attachments:
        std::sync::Mutex<std::sync::Weak<super::cache::attachments::Attachments>>,
    /// The key-value store a multi-process client's callbacks read, kept
    /// alive as long as the client that may call them.
    _store: Option<std::sync::Arc<super::distributed::kv_store::KvStore>>,
}

impl Client {
    /// Whether this client belongs to a multi-process group (its plugin
    /// meets the other processes through a key-value store).
    pub(crate) fn is_multi_process(&self) -> bool {
        self._store.is_some()
    }
}

// SAFETY: a PJRT_Client is thread-safe: the C API allows calling any client,
// executable and buffer function concurrently from any thread. `devices`
// holds pointers owned by the client, valid until it is destroyed (in Drop,
// when no executable or buffer refers to it any more: they hold an `Arc`).
unsafe impl Send for Client {}
// SAFETY: as above; `Client` is never mutated after creation.
unsafe impl Sync for Client {}

impl Client {
    /// Creates a client with the given create options.
    pub(crate) fn create(api: &'static Api, options: &[(&str, CreateOption)]) -> Result<Client> {
        Client::create_with_store(api, options, None)
    }

    /// Creates a client with the given create options and, for one process
    /// of a multi-process client, the key-value store its plugin meets the
    /// other processes through (see [`distributed`](super::distributed)).
    pub(crate) fn create_with_store(
        api: &'static Api,
        options: &[(&str, CreateOption)],
        store: Option<std::sync::Arc<super::distributed::kv_store::KvStore>>,
    ) -> Result<Client> {
        check_options(options)?;
        // Storage the named values point into; alive until after the call.
        let mut values = Vec::with_capacity(options.len());
        for (name, value) in options {
            let mut v = ffi::PJRT_NamedValue::new();
            v.name = name.as_ptr().cast::<c_char>();
            v.name_size = name.len();
            match value {
                CreateOption::String(s) => {
                    v.type_ = ffi::PJRT_NamedValue_kString;
                    v.__bindgen_anon_1.string_value = s.as_ptr().cast::<c_char>();
                    v.value_size = s.len();
                }
                CreateOption::Int64(i) => {
                    v.type_ = ffi::PJRT_NamedValue_kInt64;
                    v.__bindgen_anon_1.int64_value = *i;
                    v.value_size = 1;
                }
                CreateOption::Int64List(l) => {
                    v.type_ = ffi::PJRT_NamedValue_kInt64List;
                    v.__bindgen_anon_1.int64_array_value = l.as_ptr();
                    v.value_size = l.len();
                }
                CreateOption::Float(f) => {
                    v.type_ = ffi::PJRT_NamedValue_kFloat;
                    v.__bindgen_anon_1.float_value = *f;
                    v.value_size = 1;
                }
                CreateOption::Bool(b) => {
                    v.type_ = ffi::PJRT_NamedValue_kBool;
                    v.__bindgen_anon_1.bool_value = *b;
                    v.value_size = 1;
                }
            }
            values.push(v);
        }
        let mut args = ffi::PJRT_Client_Create_Args::new();
        args.create_options = if values.is_empty() {
            std::ptr::null()
        } else {
            values.as_ptr()
        };
        args.num_options = values.len();
        if let Some(store) = &store {
            super::distributed::set_callbacks(&mut args, store);
        }
        // SAFETY: the options point into `values` and `options` (names,
        // strings, lists), all alive until after the call; the key-value
        // callbacks, if any, read `store`, which the client keeps alive.
        unsafe { pjrt_call!(api, PJRT_Client_Create, &mut args) }?;
        if args.client.is_null() {
            return Err(DeviceError::NoResult {
                call: "PJRT_Client_Create",
                what: "client",
            }
            .into());
        }
        // From here on, Drop destroys the client on any error.
        let mut client = Client {
            api,
            raw: args.client,
            devices: Vec::new(),
            platform_name: String::new(),
            identity: std::sync::OnceLock::new(),
            attachments: std::sync::Mutex::new(std::sync::Weak::new()),
            _store: store,
        };
        client.platform_name = client.query_platform_name()?;
        client.devices = client.query_devices()?;
        Ok(client)
    }

    fn query_platform_name(&self) -> Result<String> {
        let mut args = ffi::PJRT_Client_PlatformName_Args::new();
        args.client = self.raw;
        // SAFETY: `self.raw` is a live client of this plugin.
        unsafe { pjrt_call!(self.api, PJRT_Client_PlatformName, &mut args) }?;
        // SAFETY: the name is owned by the client and valid for `platform_name_size` bytes.
        Ok(unsafe {
            super::pjrt::api::bytes_to_string(args.platform_name.cast(), args.platform_name_size)
        })
    }

    fn query_platform_version(&self) -> Result<String> {
        let mut args = ffi::PJRT_Client_PlatformVersion_Args::new();
        args.client = self.raw;
        // SAFETY: `self.raw` is a live client of this plugin.
        unsafe { pjrt_call!(self.api, PJRT_Client_PlatformVersion, &mut args) }?;
        // SAFETY: the string is owned by the client and valid for
        // `platform_version_size` bytes.
        Ok(unsafe {
            super::pjrt::api::bytes_to_string(
                args.platform_version.cast(),
                args.platform_version_size,
            )
        })
    }

    /// What the plugin is: its file, hash, versions, attributes and
    /// extensions (read once per client).
    pub(crate) fn identity(&self) -> &super::PluginIdentity {
        self.identity.get_or_init(|| {
            let path = self.api.path().to_path_buf();
            let sha256 = super::plugin::identity::plugin_sha256(&path);
            super::PluginIdentity {
                known: sha256.as_deref().and_then(super::KnownPlugin::from_sha256),
                sha256,
                path,
                api_version: self.api.version(),
                platform_name: self.platform_name.clone(),
                platform_version: self.query_platform_version().unwrap_or_default(),
                attributes: self
                    .api
                    .attributes()
                    .iter()
                    .map(|(n, v)| (n.clone(), v.to_string()))
                    .collect(),
                extensions: self
                    .api
                    .extensions()
                    .map(|(t, size)| super::plugin::identity::extension_name(t, size))
                    .collect(),
            }
        })
    }

    fn query_devices(&self) -> Result<Vec<*mut ffi::PJRT_Device>> {
        let mut args = ffi::PJRT_Client_AddressableDevices_Args::new();
        args.client = self.raw;
        // SAFETY: `self.raw` is a live client of this plugin.
        unsafe { pjrt_call!(self.api, PJRT_Client_AddressableDevices, &mut args) }?;
        if args.addressable_devices.is_null() || args.num_addressable_devices == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the client owns an array of `num_addressable_devices` device
        // pointers at `addressable_devices`, valid while it lives; copied here.
        let devices = unsafe {
            std::slice::from_raw_parts(args.addressable_devices, args.num_addressable_devices)
        };
        Ok(devices.to_vec())
    }

    /// The loaded plugin.
    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    /// The raw client.
    pub(crate) fn raw(&self) -> *mut ffi::PJRT_Client {
        self.raw
    }

    /// `cpu`, `cuda`, `tpu`, ...
    pub(crate) fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// The platform family of the plugin's devices, from its platform name
    /// (`None` for a plugin tessel does not know).
    pub(crate) fn platform(&self) -> Option<crate::config::Platform> {
        platform_of(&self.platform_name)
    }

    /// Addressable devices, in PJRT order.
    pub(crate) fn devices(&self) -> &[*mut ffi::PJRT_Device] {
        &self.devices
    }

    /// The index of `device` among the addressable devices.
    pub(crate) fn device_index(&self, device: *mut ffi::PJRT_Device) -> Option<usize> {
        self.devices.iter().position(|d| *d == device)
    }

    /// The addressable device at `index`, or an error naming the count.
    pub(crate) fn device(&self, index: usize) -> Result<*mut ffi::PJRT_Device> {
        self.devices.get(index).copied().ok_or_else(|| {
            DeviceError::DeviceIndex {
                index,
                platform: self.platform_name.clone(),
                count: self.devices.len(),
            }
            .into()
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Client_Destroy_Args::new();
        args.client = self.raw;
        // SAFETY: the client is live and nothing else refers to it: every
        // executable and buffer holds an `Arc<Client>`, so this runs last,
        // once. A failure to destroy it is ignored.
        let _ = unsafe { pjrt_call!(self.api, PJRT_Client_Destroy, &mut args) };
    }
}

/// The platform family a PJRT platform name stands for.
pub(crate) fn platform_of(name: &str) -> Option<crate::config::Platform> {
    use crate::config::Platform;
    match name.to_ascii_lowercase().as_str() {
        "cpu" | "host" => Some(Platform::Cpu),
        "cuda" | "rocm" | "gpu" => Some(Platform::Gpu),
        "tpu" => Some(Platform::Tpu),
        _ => None,
    }
}

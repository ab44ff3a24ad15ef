//! Multi-process clients: one program over the devices of several
//! processes, as `jax.distributed.initialize` sets it up.
//!
//! Process 0 starts a [`Coordinator`](super::Coordinator); every process
//! creates its client with [`Device::distributed`], which gives the plugin
//! its process id and count (`node_id`, `num_nodes`) and the key-value
//! callbacks of `PJRT_Client_Create`, served by the coordinator: the
//! plugins publish their local topology and read the others' through it.
//!
//! Whether the processes then form one client is the plugin's to decide.
//! The CUDA plugin and libtpu do. The CPU plugin (`xla-cpu-pjrt` 0.0.1)
//! reads only `cpu_device_count`: it accepts the callbacks and options,
//! calls none of them, and each process sees only its own devices (see
//! `examples/multi_process.rs`, which shows what it answers).

pub(super) mod kv_frame;
pub(super) mod kv_secret;
pub(super) mod kv_store;

use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use self::kv_store::KvStore;
use super::client::{Client, CreateOption};
use super::device::Device;
use super::pjrt::ffi;
use crate::error::DeviceError;
use crate::Result;

/// How this process joins a multi-process client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistributedOptions {
    /// The coordinator's address (`127.0.0.1:PORT`; process 0 runs it).
    pub coordinator: String,
    /// The coordinator's secret ([`Coordinator::secret`](super::Coordinator::secret)),
    /// which process 0 passes to the others through the environment
    /// ([`SECRET_ENV`](super::SECRET_ENV)).
    pub secret: String,
    /// This process's index, `0 .. num_processes`.
    pub process_id: usize,
    /// How many processes take part.
    pub num_processes: usize,
}

impl Device {
    /// A client of the PJRT plugin at `path` for process
    /// `options.process_id` of `options.num_processes`: the plugin gets
    /// `node_id` and `num_nodes` on top of `create_options`, and key-value
    /// callbacks served by the coordinator at `options.coordinator`, which
    /// the plugin publishes its topology through and reads the other
    /// processes' from. Whether the processes then form one client is the
    /// plugin's to decide: the CUDA plugin and libtpu do; the CPU plugin
    /// (`xla-cpu-pjrt` 0.0.1) reads only `cpu_device_count`, calls no
    /// callback, and each process sees only its own devices.
    ///
    /// Errors: a process id out of range, no coordinator reachable within
    /// 30 s, a coordinator that refuses the secret, and whatever the plugin
    /// answers.
    ///
    /// ```no_run
    /// use tessel_dsl::runtime::{cpu_plugin_path, Coordinator, Device, DistributedOptions};
    /// let coordinator = Coordinator::start("127.0.0.1:0")?; // on process 0
    /// let dev = Device::distributed(
    ///     cpu_plugin_path()?,
    ///     &[],
    ///     &DistributedOptions {
    ///         coordinator: coordinator.address().to_string(),
    ///         secret: coordinator.secret().to_string(),
    ///         process_id: 0,
    ///         num_processes: 2,
    ///     },
    /// )?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn distributed(
        path: impl AsRef<Path>,
        create_options: &[(&str, CreateOption)],
        options: &DistributedOptions,
    ) -> Result<Device> {
        let (id, n) = (options.process_id, options.num_processes);
        if n == 0 || id >= n {
            return Err(DeviceError::Distributed(format!(
                "process {id} of {n}: the id must be below the process count"
            ))
            .into());
        }
        let store = KvStore::connect(options.coordinator.as_str(), &options.secret)
            .map_err(|e| DeviceError::Distributed(e.to_string()))?;
        let mut all: Vec<(&str, CreateOption)> = create_options
            .iter()
            .filter(|(name, _)| *name != "node_id" && *name != "num_nodes")
            .cloned()
            .collect();
        all.push(("node_id", CreateOption::Int64(id as i64)));
        all.push(("num_nodes", CreateOption::Int64(n as i64)));
        let api = super::pjrt::api::load(path.as_ref())?;
        let client = Client::create_with_store(api, &all, Some(Arc::new(store)))?;
        Ok(Device::from_client(Arc::new(client)))
    }
}

/// Sets the key-value callbacks of `args` to read and write `store`.
pub(crate) fn set_callbacks(args: &mut ffi::PJRT_Client_Create_Args, store: &Arc<KvStore>) {
    let user_arg = Arc::as_ptr(store).cast_mut().cast::<c_void>();
    args.kv_get_callback = Some(kv_get);
    args.kv_get_user_arg = user_arg;
    args.kv_try_get_callback = Some(kv_try_get);
    args.kv_try_get_user_arg = user_arg;
    args.kv_put_callback = Some(kv_put);
    args.kv_put_user_arg = user_arg;
}

/// Bytes of the length header in front of a value handed to the plugin.
const HEADER: usize = size_of::<u64>();

/// `value` as a buffer the plugin frees with [`free_value`]: a heap block
/// of its length (8 bytes) then its bytes; the pointer is to the bytes.
/// Returns the three out-fields of a get callback: value, size, deleter.
fn give(
    value: Vec<u8>,
) -> (
    *mut std::os::raw::c_char,
    usize,
    ffi::PJRT_KeyValueGetCallback_ValueDeleter,
) {
    let len = value.len();
    let mut block = Vec::with_capacity(HEADER + len);
    block.extend_from_slice(&(len as u64).to_le_bytes());
    block.extend_from_slice(&value);
    let base = Box::into_raw(block.into_boxed_slice()).cast::<u8>();
    // SAFETY: the block is HEADER + len bytes long, so base + HEADER is in it
    // (one past its end when len is 0).
    (unsafe { base.add(HEADER) }.cast(), len, Some(free_value))
}

/// The deleter of values made by [`give`].
unsafe extern "C" fn free_value(value: *mut std::os::raw::c_char) {
    if value.is_null() {
        return;
    }
    // SAFETY: `value` came from `give`: HEADER bytes before it start a boxed
    // slice of HEADER + len bytes whose first 8 hold len.
    unsafe {
        let base = value.cast::<u8>().sub(HEADER);
        let len = u64::from_le_bytes(std::ptr::read(base.cast::<[u8; HEADER]>())) as usize;
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            base,
            HEADER + len,
        )));
    }
}

/// The error the plugin gets from a failed callback.
///
/// # Safety
///
/// `make` is the `callback_error` pointer of the callback's arguments.
unsafe fn fail(
    make: *mut ffi::PJRT_CallbackError,
    code: ffi::PJRT_Error_Code,
    message: &str,
) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes a valid pointer to its error constructor.
    match unsafe { make.as_ref() }.copied().flatten() {
        // SAFETY: the constructor copies the message, alive during the call.
        Some(make) => unsafe { make(code, message.as_ptr().cast(), message.len()) },
        None => std::ptr::null_mut(),
    }
}

/// Reads a get's value into its arguments, or fails with `code`.
///
/// # Safety
///
/// `key`/`key_size` and `user_arg` are a callback's arguments: the key's
/// bytes, and the `KvStore` given in [`set_callbacks`].
unsafe fn lookup(
    user_arg: *mut c_void,
    key: *const std::os::raw::c_char,
    key_size: usize,
    timeout: Duration,
) -> std::result::Result<Vec<u8>, (ffi::PJRT_Error_Code, String)> {
    // SAFETY: `user_arg` is the store of set_callbacks, kept alive by the client.
    let store = unsafe { &*user_arg.cast::<KvStore>() };
    // SAFETY: the plugin passes `key_size` readable bytes at `key`.
    let key = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), key_size) };
    store.get(key, timeout).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::TimedOut {
            ffi::PJRT_Error_Code_DEADLINE_EXCEEDED
        } else {
            ffi::PJRT_Error_Code_UNAVAILABLE
        };
        (code, e.to_string())
    })
}

/// `PJRT_KeyValueGetCallback`: a blocking get with the plugin's timeout.
unsafe extern "C" fn kv_get(args: *mut ffi::PJRT_KeyValueGetCallback_Args) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid arguments for the duration of the call.
    let a = unsafe { &mut *args };
    let timeout = Duration::from_millis(u64::try_from(a.timeout_in_ms).unwrap_or(0));
    // SAFETY: key and user_arg are this callback's, as `lookup` needs.
    match unsafe { lookup(a.user_arg, a.key, a.key_size, timeout) } {
        Ok(v) => {
            (a.value, a.value_size, a.value_deleter_callback) = give(v);
            std::ptr::null_mut()
        }
        // SAFETY: the callback_error of these arguments.
        Err((code, m)) => unsafe { fail(a.callback_error, code, &m) },
    }
}

/// `PJRT_KeyValueTryGetCallback`: a get that does not wait (`NOT_FOUND`
/// when the key is absent).
unsafe extern "C" fn kv_try_get(
    args: *mut ffi::PJRT_KeyValueTryGetCallback_Args,
) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid arguments for the duration of the call.
    let a = unsafe { &mut *args };
    // SAFETY: key and user_arg are this callback's, as `lookup` needs.
    match unsafe { lookup(a.user_arg, a.key, a.key_size, Duration::ZERO) } {
        Ok(v) => {
            (a.value, a.value_size, a.value_deleter_callback) = give(v);
            std::ptr::null_mut()
        }
        Err((code, m)) => {
            let code = if code == ffi::PJRT_Error_Code_DEADLINE_EXCEEDED {
                ffi::PJRT_Error_Code_NOT_FOUND
            } else {
                code
            };
            // SAFETY: the callback_error of these arguments.
            unsafe { fail(a.callback_error, code, &m) }
        }
    }
}

/// `PJRT_KeyValuePutCallback`.
unsafe extern "C" fn kv_put(args: *mut ffi::PJRT_KeyValuePutCallback_Args) -> *mut ffi::PJRT_Error {
    // SAFETY: the plugin passes valid arguments for the duration of the call.
    let a = unsafe { &*args };
    // SAFETY: `user_arg` is the store of set_callbacks, kept alive by the client.
    let store = unsafe { &*a.user_arg.cast::<KvStore>() };
    // SAFETY: the plugin passes `key_size` and `value_size` readable bytes.
    let (key, value) = unsafe {
        (
            std::slice::from_raw_parts(a.key.cast::<u8>(), a.key_size),
            std::slice::from_raw_parts(a.value.cast::<u8>(), a.value_size),
        )
    };
    match store.put(key, value) {
        Ok(()) => std::ptr::null_mut(),
        // SAFETY: the callback_error of these arguments.
        Err(e) => unsafe {
            fail(
                a.callback_error,
                ffi::PJRT_Error_Code_UNAVAILABLE,
                &e.to_string(),
            )
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Coordinator;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The callbacks as a plugin calls them: a put, a get of it, a get
    /// that times out, and a try-get of a missing key.
    #[test]
    fn the_callbacks_round_trip_through_the_coordinator() {
        let c = Coordinator::start("127.0.0.1:0").unwrap();
        let store = Arc::new(KvStore::connect(c.address(), c.secret()).unwrap());
        let mut create = ffi::PJRT_Client_Create_Args::default();
        set_callbacks(&mut create, &store);
        let (key, value) = (b"topology/1", b"\x00two devices");
        let mut put = ffi::PJRT_KeyValuePutCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            value: value.as_ptr().cast(),
            value_size: value.len(),
            user_arg: create.kv_put_user_arg,
            ..Default::default()
        };
        // SAFETY: the arguments point at live data, as a plugin's would.
        assert!(unsafe { create.kv_put_callback.unwrap()(&mut put) }.is_null());
        let mut get = ffi::PJRT_KeyValueGetCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            timeout_in_ms: 1000,
            user_arg: create.kv_get_user_arg,
            ..Default::default()
        };
        // SAFETY: as above.
        assert!(unsafe { create.kv_get_callback.unwrap()(&mut get) }.is_null());
        // SAFETY: the callback set value/value_size to a buffer it made.
        let got = unsafe { std::slice::from_raw_parts(get.value.cast::<u8>(), get.value_size) };
        assert_eq!(got, value);
        // SAFETY: the deleter the callback gave, on its own value.
        unsafe { get.value_deleter_callback.unwrap()(get.value) };

        // A failure is the error the plugin's constructor makes, with the code.
        static CODE: AtomicU32 = AtomicU32::new(u32::MAX);
        unsafe extern "C" fn record(
            code: ffi::PJRT_Error_Code,
            _message: *const std::os::raw::c_char,
            _size: usize,
        ) -> *mut ffi::PJRT_Error {
            CODE.store(code, Ordering::SeqCst);
            std::ptr::NonNull::dangling().as_ptr()
        }
        let mut make: ffi::PJRT_CallbackError = Some(record);
        let missing = b"absent";
        let mut get = ffi::PJRT_KeyValueGetCallback_Args {
            key: missing.as_ptr().cast(),
            key_size: missing.len(),
            timeout_in_ms: 10,
            callback_error: &mut make,
            user_arg: create.kv_get_user_arg,
            ..Default::default()
        };
        // SAFETY: as above.
        assert!(!unsafe { create.kv_get_callback.unwrap()(&mut get) }.is_null());
        assert_eq!(
            CODE.load(Ordering::SeqCst),
            ffi::PJRT_Error_Code_DEADLINE_EXCEEDED
        );
        assert!(get.value.is_null(), "no value for a missing key");
        let mut try_get = ffi::PJRT_KeyValueTryGetCallback_Args {
            key: missing.as_ptr().cast(),
            key_size: missing.len(),
            callback_error: &mut make,
            user_arg: create.kv_try_get_user_arg,
            ..Default::default()
        };
        // SAFETY: as above.
        assert!(!unsafe { create.kv_try_get_callback.unwrap()(&mut try_get) }.is_null());
        assert_eq!(CODE.load(Ordering::SeqCst), ffi::PJRT_Error_Code_NOT_FOUND);
        // An empty value has a buffer the deleter frees.
        let (ptr, len, _) = give(Vec::new());
        assert_eq!(len, 0);
        // SAFETY: a value made by `give`.
        unsafe { free_value(ptr) };
    }

    #[test]
    fn bad_process_ids_and_a_missing_coordinator_are_errors() {
        let bad = DistributedOptions {
            coordinator: "127.0.0.1:1".into(),
            secret: "s".into(),
            process_id: 2,
            num_processes: 2,
        };
        let e = Device::distributed("unused.so", &[], &bad).unwrap_err();
        assert!(e.to_string().contains("process 2 of 2"), "{e}");
    }
}

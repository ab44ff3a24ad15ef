//! Device buffers: host → device (`PJRT_Client_BufferFromHostBuffer`),
//! device → host (`PJRT_Buffer_ToHostBuffer`), and the dtype mapping; on
//! the interpreter, a buffer is a shared host tensor.

use std::fmt;
use std::sync::Arc;

use super::client::Client;
use super::interpreter_backend::Interpreter;
use super::pjrt::args::Args;
use super::pjrt::call::pjrt_call;
use super::pjrt::ffi;
use super::Device;
use crate::dtype::DType;
use crate::error::{DeviceError, Result};
use crate::host::HostTensor;
use crate::shape::TensorSpec;

/// The PJRT element type of a [`DType`].
pub(crate) fn to_pjrt_type(dtype: DType) -> ffi::PJRT_Buffer_Type {
    match dtype {
        DType::Pred => ffi::PJRT_Buffer_Type_PRED,
        DType::S8 => ffi::PJRT_Buffer_Type_S8,
        DType::S16 => ffi::PJRT_Buffer_Type_S16,
        DType::S32 => ffi::PJRT_Buffer_Type_S32,
        DType::S64 => ffi::PJRT_Buffer_Type_S64,
        DType::U8 => ffi::PJRT_Buffer_Type_U8,
        DType::U16 => ffi::PJRT_Buffer_Type_U16,
        DType::U32 => ffi::PJRT_Buffer_Type_U32,
        DType::U64 => ffi::PJRT_Buffer_Type_U64,
        DType::F16 => ffi::PJRT_Buffer_Type_F16,
        DType::BF16 => ffi::PJRT_Buffer_Type_BF16,
        DType::F32 => ffi::PJRT_Buffer_Type_F32,
        DType::F64 => ffi::PJRT_Buffer_Type_F64,
        DType::F8E4M3FN => ffi::PJRT_Buffer_Type_F8E4M3FN,
        DType::F8E5M2 => ffi::PJRT_Buffer_Type_F8E5M2,
    }
}

/// The [`DType`] of a PJRT element type, if tessel has one.
pub(crate) fn from_pjrt_type(t: ffi::PJRT_Buffer_Type) -> Option<DType> {
    DType::ALL.into_iter().find(|d| to_pjrt_type(*d) == t)
}

/// A name for a PJRT element type, for messages.
pub(crate) fn pjrt_type_name(t: ffi::PJRT_Buffer_Type) -> String {
    match from_pjrt_type(t) {
        Some(d) => d.name().to_string(),
        None => match t {
            ffi::PJRT_Buffer_Type_C64 => "c64".into(),
            ffi::PJRT_Buffer_Type_C128 => "c128".into(),
            ffi::PJRT_Buffer_Type_TOKEN => "token".into(),
            other => format!("PJRT element type {other}"),
        },
    }
}

pub(crate) fn dims_to_i64(spec: &TensorSpec) -> Result<Vec<i64>> {
    spec.shape
        .iter()
        .map(|d| {
            i64::try_from(*d).map_err(|_| {
                DeviceError::ExtentTooLarge {
                    spec: spec.to_string(),
                    extent: *d,
                }
                .into()
            })
        })
        .collect()
}

/// Owns one `PJRT_Buffer`; destroys it on drop.
struct RawBuffer {
    client: Arc<Client>,
    raw: *mut ffi::PJRT_Buffer,
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        let mut args = ffi::PJRT_Buffer_Destroy_Args::new();
        args.buffer = self.raw;
        // SAFETY: this value owns the buffer and destroys it exactly once;
        // the client outlives it (we hold an `Arc`). PJRT keeps the memory
        // alive while an enqueued computation still uses it. A failure to
        // destroy it is ignored.
        let _ = unsafe { pjrt_call!(self.client.api(), PJRT_Buffer_Destroy, &mut args) };
    }
}

/// A tensor in device memory: one PJRT buffer on one addressable device.
///
/// Stays on the device until dropped; pass it to
/// [`Executable::execute`](super::Executable::execute) to avoid host copies.
pub struct DeviceBuffer {
    storage: Storage,
    spec: TensorSpec,
    device: usize,
}

/// Where a buffer's data is.
enum Storage {
    /// In a PJRT buffer.
    Pjrt(RawBuffer),
    /// In host memory, on the interpreter.
    Host {
        data: Arc<HostTensor>,
        interpreter: Arc<Interpreter>,
    },
}

// SAFETY: PJRT buffers may be used and destroyed from any thread (the C API
// is thread-safe); `RawBuffer` has no interior mutability and destroys its
// buffer only in Drop, when no other reference exists.
unsafe impl Send for RawBuffer {}
// SAFETY: as above; `&RawBuffer` (through `&DeviceBuffer`) only permits
// concurrent reads (`to_host`, use as an execute argument), which PJRT allows.
unsafe impl Sync for RawBuffer {}

impl DeviceBuffer {
    /// Copies `host` to the addressable device `device` of `client`.
    pub(crate) fn from_host(
        client: &Arc<Client>,
        host: &HostTensor,
        device: usize,
    ) -> Result<DeviceBuffer> {
        let api = client.api();
        let device_ptr = client.device(device)?;
        let dims = dims_to_i64(host.spec())?;
        let data = host.as_bytes();
        let mut args = ffi::PJRT_Client_BufferFromHostBuffer_Args::new();
        args.client = client.raw();
        args.data = data.as_ptr().cast();
        args.type_ = to_pjrt_type(host.dtype());
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        // byte_strides NULL: dense row-major.
        args.host_buffer_semantics = ffi::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
        args.device = device_ptr;
        // SAFETY: `data` and `dims` are alive and unchanged for the whole call,
        // which is all kImmutableOnlyDuringCall needs; `data` holds exactly
        // `spec.size_in_bytes()` bytes (a HostTensor invariant) for the type
        // and dims given; the client is live and the device is one of its own.
        let created = unsafe { pjrt_call!(api, PJRT_Client_BufferFromHostBuffer, &mut args) };
        let done = args.done_with_host_buffer;
        let buffer = (!args.buffer.is_null()).then(|| RawBuffer {
            client: Arc::clone(client),
            raw: args.buffer,
        });
        // SAFETY: `done` is null or the event this call returned; destroyed here.
        let awaited = unsafe { api.await_event("PJRT_Client_BufferFromHostBuffer", done) };
        created?;
        awaited?;
        let buffer = buffer.ok_or(DeviceError::NoResult {
            call: "PJRT_Client_BufferFromHostBuffer",
            what: "buffer",
        })?;
        Ok(DeviceBuffer {
            storage: Storage::Pjrt(buffer),
            spec: host.spec().clone(),
            device,
        })
    }

    /// `host` as a buffer of the interpreter (device 0 is its only device).
    pub(crate) fn on_interpreter(
        interpreter: &Arc<Interpreter>,
        host: &HostTensor,
        device: usize,
    ) -> Result<DeviceBuffer> {
        if device != 0 {
            return Err(DeviceError::DeviceIndex {
                index: device,
                platform: "interpreter".into(),
                count: 1,
            }
            .into());
        }
        Ok(DeviceBuffer::from_interpreter_result(
            interpreter,
            host.clone(),
        ))
    }

    /// A result of the interpreter, as its buffer.
    pub(crate) fn from_interpreter_result(
        interpreter: &Arc<Interpreter>,
        host: HostTensor,
    ) -> DeviceBuffer {
        DeviceBuffer {
            spec: host.spec().clone(),
            storage: Storage::Host {
                data: Arc::new(host),
                interpreter: Arc::clone(interpreter),
            },
            device: 0,
        }
    }

    /// Takes ownership of a buffer the plugin returned and reads its element
    /// type, dimensions and device.
    ///
    /// # Safety
    ///
    /// `raw` must be a live buffer of `client` that nothing else owns.
    pub(crate) unsafe fn from_raw(
        client: &Arc<Client>,
        raw: *mut ffi::PJRT_Buffer,
    ) -> Result<DeviceBuffer> {
        // Owned from here: dropped (destroyed) on every error below.
        let buffer = RawBuffer {
            client: Arc::clone(client),
            raw,
        };
        let api = client.api();

        let mut ty = ffi::PJRT_Buffer_ElementType_Args::new();
        ty.buffer = raw;
        // SAFETY: `raw` is a live buffer of this plugin (caller contract).
        unsafe { pjrt_call!(api, PJRT_Buffer_ElementType, &mut ty) }?;
        let dtype =
            from_pjrt_type(ty.type_).ok_or_else(|| DeviceError::UnsupportedElementType {
                element_type: pjrt_type_name(ty.type_),
            })?;

        let mut dims = ffi::PJRT_Buffer_Dimensions_Args::new();
        dims.buffer = raw;
        // SAFETY: `raw` is a live buffer of this plugin (caller contract).
        unsafe { pjrt_call!(api, PJRT_Buffer_Dimensions, &mut dims) }?;
        let extents: &[i64] = if dims.dims.is_null() || dims.num_dims == 0 {
            &[]
        } else {
            // SAFETY: the buffer owns `num_dims` extents at `dims`, valid while
            // it lives; copied just below.
            unsafe { std::slice::from_raw_parts(dims.dims, dims.num_dims) }
        };
        let shape = extents
            .iter()
            .map(|d| usize::try_from(*d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| DeviceError::UnexpectedResult {
                call: "PJRT_Buffer_Dimensions",
                message: format!("a buffer of shape {extents:?}"),
            })?;

        let mut dev = ffi::PJRT_Buffer_Device_Args::new();
        dev.buffer = raw;
        // SAFETY: `raw` is a live buffer of this plugin (caller contract).
        unsafe { pjrt_call!(api, PJRT_Buffer_Device, &mut dev) }?;
        let device = client
            .device_index(dev.device)
            .ok_or(DeviceError::UnexpectedResult {
                call: "PJRT_Buffer_Device",
                message: "a buffer on a device this client cannot address".into(),
            })?;

        Ok(DeviceBuffer {
            storage: Storage::Pjrt(buffer),
            spec: TensorSpec::new(shape, dtype),
            device,
        })
    }

    /// The PJRT client and raw buffer (still owned by `self`), or `None`
    /// for an interpreter buffer.
    pub(crate) fn pjrt(&self) -> Option<(&Arc<Client>, *mut ffi::PJRT_Buffer)> {
        match &self.storage {
            Storage::Pjrt(b) => Some((&b.client, b.raw)),
            Storage::Host { .. } => None,
        }
    }

    /// The data of an interpreter buffer and its interpreter.
    pub(crate) fn interpreted(&self) -> Option<(&Arc<HostTensor>, &Arc<Interpreter>)> {
        match &self.storage {
            Storage::Pjrt(_) => None,
            Storage::Host { data, interpreter } => Some((data, interpreter)),
        }
    }

    /// Element type and shape.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The index of the buffer's device among its client's addressable devices.
    pub fn device_index(&self) -> usize {
        self.device
    }

    /// The [`Device`] (client) this buffer lives on.
    pub fn device(&self) -> Device {
        match &self.storage {
            Storage::Pjrt(b) => Device::from_client(Arc::clone(&b.client)),
            Storage::Host { interpreter, .. } => Device::from_interpreter(Arc::clone(interpreter)),
        }
    }

    /// Waits until the computation producing this buffer has finished (for
    /// timing); reports its error if it failed.
    pub fn block_until_ready(&self) -> Result<()> {
        let Storage::Pjrt(buffer) = &self.storage else {
            return Ok(());
        };
        let api = buffer.client.api();
        let mut args = ffi::PJRT_Buffer_ReadyEvent_Args::new();
        args.buffer = buffer.raw;
        // SAFETY: `buffer` is a live buffer owned by `self`; the call only
        // fills `event`.
        unsafe { pjrt_call!(api, PJRT_Buffer_ReadyEvent, &mut args) }?;
        // SAFETY: `args.event` is null or the event this call returned; it is
        // awaited and destroyed here, once.
        unsafe { api.await_event("PJRT_Buffer_ReadyEvent", args.event) }?;
        Ok(())
    }

    /// Whether the buffer's memory is gone: it was donated to a kernel
    /// that reused it for a result (interpreter buffers never are).
    pub fn is_deleted(&self) -> Result<bool> {
        let Storage::Pjrt(buffer) = &self.storage else {
            return Ok(false);
        };
        let api = buffer.client.api();
        let mut args = ffi::PJRT_Buffer_IsDeleted_Args::new();
        args.buffer = buffer.raw;
        // SAFETY: `buffer` is a live `PJRT_Buffer` handle owned by `self`
        // (a donated buffer's handle stays valid, only its memory is
        // gone); the call only fills `is_deleted`.
        unsafe { pjrt_call!(api, PJRT_Buffer_IsDeleted, &mut args) }?;
        Ok(args.is_deleted)
    }

    /// Copies the buffer to host memory (waits for any computation producing it).
    ///
    /// A failed computation that produced this buffer reports its error here.
    pub fn to_host(&self) -> Result<HostTensor> {
        let buffer = match &self.storage {
            Storage::Pjrt(buffer) => buffer,
            Storage::Host { data, .. } => return Ok(HostTensor::clone(data)),
        };
        let api = buffer.client.api();
        // Ask for dense row-major bytes explicitly: the default is the
        // buffer's device layout, which need not be row-major off CPU.
        let rank = self.spec.rank();
        let minor_to_major: Vec<i64> = (0..rank as i64).rev().collect();
        let mut tiled = ffi::PJRT_Buffer_MemoryLayout_Tiled::new();
        tiled.minor_to_major = minor_to_major.as_ptr();
        tiled.minor_to_major_size = minor_to_major.len();
        let mut layout = ffi::PJRT_Buffer_MemoryLayout::new();
        layout.type_ = ffi::PJRT_Buffer_MemoryLayout_Type_Tiled;
        layout.__bindgen_anon_1.tiled = tiled;

        let mut query = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        query.src = buffer.raw;
        query.host_layout = &mut layout;
        // SAFETY: `src` is a live buffer owned by `self`; `dst` is NULL, so
        // this only reports the size; the layout and its `minor_to_major`
        // outlive the call.
        unsafe { pjrt_call!(api, PJRT_Buffer_ToHostBuffer, &mut query) }?;
        // SAFETY: a size query returns no event, but destroy one if it did.
        unsafe { api.destroy_event(query.event) };
        let expected = self.spec.check_size()?;
        if query.dst_size != expected {
            return Err(DeviceError::UnexpectedResult {
                call: "PJRT_Buffer_ToHostBuffer",
                message: format!(
                    "{} bytes for a {} buffer, expected {expected}",
                    query.dst_size, self.spec
                ),
            }
            .into());
        }

        // Fallible: a result larger than host memory is an error, not an abort.
        let mut data: Vec<u8> = Vec::new();
        data.try_reserve_exact(expected)
            .map_err(|_| DeviceError::OutOfMemory {
                call: "to_host",
                message: format!(
                    "cannot allocate {expected} bytes of host memory for a {} result",
                    self.spec
                ),
            })?;
        let mut copy = ffi::PJRT_Buffer_ToHostBuffer_Args::new();
        copy.src = buffer.raw;
        copy.host_layout = &mut layout;
        copy.dst = data.as_mut_ptr().cast();
        copy.dst_size = expected;
        // SAFETY: `data` has `dst_size` bytes of capacity and is neither moved nor
        // dropped until the event below has completed; buffer and layout as
        // above.
        let started = unsafe { pjrt_call!(api, PJRT_Buffer_ToHostBuffer, &mut copy) };
        // SAFETY: `copy.event` is null or the event this call returned; awaited
        // (so the copy into `data` is finished) and destroyed here.
        let finished = unsafe { api.await_event("PJRT_Buffer_ToHostBuffer", copy.event) };
        started?;
        finished?;
        // SAFETY: the capacity is `expected` bytes, and the completed copy
        // (both results checked above) wrote all `dst_size = expected` of them.
        unsafe { data.set_len(expected) };
        HostTensor::from_bytes(self.spec.clone(), data)
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer({} on {}:{})",
            self.spec,
            match &self.storage {
                Storage::Pjrt(b) => b.client.platform_name(),
                Storage::Host { .. } => "interpreter",
            },
            self.device
        )
    }
}

impl crate::ir::tree::Leaf for DeviceBuffer {}

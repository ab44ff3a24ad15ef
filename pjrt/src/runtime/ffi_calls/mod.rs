//! Native Rust functions called from compiled programs: XLA's typed FFI
//! (`stablehlo.custom_call` with `api_version = 4`), registered with the
//! plugin through its PJRT FFI extension.

mod handler;
pub(crate) mod xla;

use std::os::raw::c_void;

use super::pjrt::api::Api;
use super::pjrt::error;
use crate::error::DeviceError;

/// The platform name XLA's CPU compiler looks handlers up under.
const CPU_PLATFORM: &str = "Host";

/// Registers tessel's FFI handler with `api`'s plugin, once per plugin:
/// the outcome of the first registration is kept.
///
/// # Errors
///
/// The registration's error, when the plugin cannot register handlers.
pub(crate) fn ensure_registered(api: &'static Api) -> Result<(), DeviceError> {
    use std::sync::Mutex;
    static DONE: Mutex<Vec<(usize, Result<(), String>)>> = Mutex::new(Vec::new());
    let key = api as *const Api as usize;
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let outcome = match done.iter().find(|(k, _)| *k == key) {
        Some((_, r)) => r.clone(),
        None => {
            let r = register(api, tessel_ir::host::FFI_TARGET, handler::handler)
                .map_err(|e| e.to_string());
            done.push((key, r.clone()));
            r
        }
    };
    outcome.map_err(|message| DeviceError::Incompatible {
        path: api.path().to_path_buf(),
        message,
    })
}

/// Registers `handler` under `target` for the CPU platform of `api`'s
/// plugin. The registration args struct comes in two layouts; the newer one
/// is tried first, and a plugin that expects the other refuses it by its
/// `struct_size` (an error, not a crash), so the other is tried next.
pub(crate) fn register(
    api: &Api,
    target: &'static str,
    handler: xla::Handler,
) -> Result<(), DeviceError> {
    let Some(ext) = api.ffi_extension() else {
        return Err(DeviceError::Incompatible {
            path: api.path().to_path_buf(),
            message: "the plugin has no FFI extension with handler registration".into(),
        });
    };
    // SAFETY: `ext` is the plugin's FFI extension, whose declared size
    // (checked by `ffi_extension`) covers the three function pointers; the
    // plugin keeps it for the process's life.
    let f = unsafe { (*(ext as *const xla::PjrtFfiExtension)).register_handler };
    if f.is_null() {
        return Err(DeviceError::Incompatible {
            path: api.path().to_path_buf(),
            message: "the plugin's FFI extension has no handler registration".into(),
        });
    }
    let mut newer = xla::RegisterArgs {
        struct_size: 52,
        target_name: target.as_ptr().cast(),
        target_name_size: target.len(),
        handler: handler as *mut c_void,
        platform_name: CPU_PLATFORM.as_ptr().cast(),
        platform_name_size: CPU_PLATFORM.len(),
        traits: 0,
    };
    type RegisterFn<A> = unsafe extern "C" fn(*mut A) -> *mut super::pjrt::ffi::PJRT_Error;
    // SAFETY: `f` is `PJRT_FFI_Register_Handler` of this plugin; the args
    // point at live strings for the call; a plugin whose layout is the
    // other one reads only the declared 52 bytes, then refuses them.
    let first = unsafe {
        let f: RegisterFn<xla::RegisterArgs> = std::mem::transmute(f);
        error::check(api, "PJRT_FFI_Register_Handler", f(&mut newer))
    };
    if first.is_ok() {
        return Ok(());
    }
    let mut versioned = xla::RegisterArgsVersioned {
        struct_size: 60,
        target_name: target.as_ptr().cast(),
        target_name_size: target.len(),
        api_version: 1,
        handler: handler as *mut c_void,
        platform_name: CPU_PLATFORM.as_ptr().cast(),
        platform_name_size: CPU_PLATFORM.len(),
        traits: 0,
    };
    // SAFETY: as above, with the versioned layout.
    let second = unsafe {
        let f: RegisterFn<xla::RegisterArgsVersioned> = std::mem::transmute(f);
        error::check(api, "PJRT_FFI_Register_Handler", f(&mut versioned))
    };
    second.map_err(|e| DeviceError::Incompatible {
        path: api.path().to_path_buf(),
        message: format!(
            "registering FFI handler `{target}`: {} / {e}",
            first.err().map(|e| e.to_string()).unwrap_or_default()
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tessel_ir::dtype::DType;
    use tessel_ir::host::{register_ffi, HostTensor, FFI_NAME_ATTR, FFI_TARGET};
    use tessel_ir::shape::TensorSpec;

    /// A hand-written call of a registered function (`y = x * scale + 1`),
    /// compiled and run on the plugin through the registered handler.
    #[test]
    fn a_registered_function_runs_inside_a_compiled_program() {
        register_ffi(
            "pjrt_test_affine",
            Arc::new(|c| {
                let scale = c.f64("scale")? as f32;
                let x = c.args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
                let y: Vec<f32> = x.iter().map(|v| v * scale + 1.0).collect();
                Ok(vec![
                    HostTensor::from_vec(y, [x.len()]).map_err(|e| e.to_string())?
                ])
            }),
        );
        let dev = crate::runtime::Device::cpu().unwrap();
        let client = dev.client().expect("a PJRT device");
        super::ensure_registered(client.api()).unwrap();
        let scale = 3.0f64;
        let text = format!(
            r#"module @native {{
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{
    %0 = "stablehlo.custom_call"(%arg0) {{call_target_name = "{FFI_TARGET}", api_version = 4 : i32, backend_config = {{{FFI_NAME_ATTR} = "pjrt_test_affine", scale = 0x{:016X} : f64}}}} : (tensor<4xf32>) -> tensor<4xf32>
    func.return %0 : tensor<4xf32>
  }}
}}"#,
            scale.to_bits()
        );
        let spec = TensorSpec::new([4], DType::F32);
        let p = crate::runtime::Program::new("native", text, vec![spec.clone()], vec![spec]);
        let exe = dev.compile(&p).unwrap();
        let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4]).unwrap();
        let out = exe.run(&[&x]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![4.0, 7.0, 10.0, 13.0]);
    }
}

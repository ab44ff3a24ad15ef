use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
fn f(x: FfiBuffer<f32>, #[attr] tessel_fn: i64) -> Result<FfiBuffer<f32>, String> {
    let _ = tessel_fn;
    Ok(x)
}

fn main() {}

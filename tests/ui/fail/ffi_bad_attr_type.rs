use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
fn f(x: FfiBuffer<f32>, #[attr] weights: Vec<u8>) -> Result<FfiBuffer<f32>, String> {
    let _ = weights;
    Ok(x)
}

fn main() {}

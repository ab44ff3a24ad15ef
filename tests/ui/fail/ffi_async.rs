use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
async fn f(x: FfiBuffer<f32>) -> Result<FfiBuffer<f32>, String> {
    Ok(x)
}

fn main() {}

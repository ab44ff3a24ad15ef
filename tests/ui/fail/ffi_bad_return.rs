use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
fn f(x: FfiBuffer<f32>) -> Result<usize, String> {
    Ok(x.data.len())
}

fn main() {}

use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
fn f(x: Vec<f32>) -> Result<FfiBuffer<f32>, String> {
    Ok(FfiBuffer::new([x.len()], x))
}

fn main() {}

use tessel::ffi::FfiBuffer;
use tessel::ffi_function;

#[ffi_function]
fn f<T: Copy>(x: FfiBuffer<T>) -> Result<FfiBuffer<T>, String> {
    Ok(x)
}

fn main() {}

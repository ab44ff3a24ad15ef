//! What the attention benchmarks share: command-line values and the inputs.

use std::time::Instant;

use tessel::prelude::*;

/// One timed run of `exe` on `args` (until every result is ready), in
/// seconds.
pub fn time(exe: &Executable, args: &[&DeviceBuffer]) -> tessel::Result<f64> {
    let t = Instant::now();
    for out in exe.execute(args)? {
        out.block_until_ready()?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The value of `--name=value` on the command line, if given and valid.
pub fn arg<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::args().find_map(|a| a.strip_prefix(name).and_then(|v| v.parse().ok()))
}

/// A deterministic `[1, 8, s, 64]` f32 input in [-0.5, 0.5).
pub fn input(s: usize, salt: usize) -> HostTensor {
    HostTensor::from_fn(TensorSpec::new([1, 8, s, 64], F32), |i| {
        ((i * (2 * salt + 7)) % 101) as f64 / 101.0 - 0.5
    })
}

/// `--blocks=BQxBK`, default 256 × 256.
pub fn blocks() -> (usize, usize) {
    arg::<String>("--blocks=")
        .and_then(|b| {
            let (a, c) = b.split_once('x')?;
            Some((a.parse().ok()?, c.parse().ok()?))
        })
        .unwrap_or((256, 256))
}

/// `--lengths=2048,4096`, default 2048 and 8192.
pub fn lengths() -> Vec<usize> {
    arg::<String>("--lengths=")
        .map(|l| l.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![2048, 8192])
}

//! Ring attention (sequence parallelism) per device with `shard_map`: the
//! sequence is split over the mesh axis `seq`; each device keeps its block
//! of queries while the blocks of keys and values travel around the ring
//! with `ppermute` (`tessel::kernels::attention::ring_attention`). Under the
//! causal mask a device skips, with a traced `cond`, the blocks from later
//! in the sequence. The result equals flash attention on one device.
use tessel::kernels::attention::{flash_attention, ring_attention, FlashOptions, Ring};
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, Shardings};

/// One device's part: `q`, `k`, `v` `[B, H, S/n, D]`, `n` devices on the ring.
#[cpu_kernel(precision = "highest")]
fn ring_block(q: Tensor, k: Tensor, v: Tensor, n: usize) -> Tensor {
    let ring = Ring { axis: "seq", devices: n, causal: true };
    ring_attention(q, k, v, None, &ring)
}

fn main() -> tessel::Result<()> {
    let (b, h, s, d, n) = (1, 4, 1024, 64, 4);
    let data = |scale: f64| {
        HostTensor::from_fn(TensorSpec::new([b, h, s, d], F32), move |i| {
            (((i * 7919) % 1999) as f64 / 999.5 - 1.0) * scale
        })
    };
    let (q, k, v) = (data(0.5), data(0.4), data(0.3));
    let dev = Device::cpu_with_devices(n)?;
    let mesh = Mesh::new(&dev, &[("seq", n)])?;
    let seq = PartitionSpec::new([None, None, Some("seq"), None]);
    let shardings = Shardings::new([seq.clone(), seq.clone(), seq.clone()], [seq]);
    let t = std::time::Instant::now();
    let ring = ring_block::run_shard_map(&mesh, &shardings, &q, &k, &v, n)?;
    let t_ring = t.elapsed();
    let one = Device::cpu()?;
    let opts = FlashOptions::new().causal(true);
    let t = std::time::Instant::now();
    let flash = flash_attention::run(&one, &q, &k, &v, opts)?;
    let t_flash = t.elapsed();
    let (a, c) = (ring.to_vec::<f32>()?, flash.to_vec::<f32>()?);
    let diff = a.iter().zip(&c).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    println!(
        "ring attention over {n} devices, B={b} H={h} S={s} D={d} causal: \
         max |ring - flash on one device| = {diff:.2e}"
    );
    println!(
        "first call (trace + compile + run): ring {:.0} ms, flash {:.0} ms",
        t_ring.as_secs_f64() * 1e3,
        t_flash.as_secs_f64() * 1e3
    );
    Ok(())
}

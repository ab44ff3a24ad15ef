//! Ring attention (sequence parallelism) written per device with
//! `shard_map`: the sequence is split over the mesh axis `seq`; each device
//! keeps its block of queries and passes its block of keys and values around
//! the ring with `ppermute`, folding each arriving block into an online
//! softmax. Under the causal mask a device skips (with a traced `cond`) the
//! blocks that come from later in the sequence. The result equals the
//! library's flash attention on one device.
use tessel::kernels::attention::{flash_attention, FlashOptions};
use tessel::prelude::*;
use tessel::shard::{Mesh, PartitionSpec, Shardings};

/// One device's part: `q`, `k`, `v` `[B, H, S/n, D]`, `n` devices on the ring.
#[cpu_kernel(precision = "highest")]
fn ring_attention(q: Tensor, k: Tensor, v: Tensor, n: usize) -> Tensor {
    let (b, h, s, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
    let me = axis_index("seq");
    let qs = q * (1.0 / (d as f64).sqrt());
    let rows = Tensor::iota([s, 1], 0, S32) + me * s as i32;
    let ring: Vec<(usize, usize)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
    let init = (
        Tensor::full([b, h, s, 1], -1e30, F32),
        Tensor::full([b, h, s, 1], 0.0, F32),
        Tensor::full([b, h, s, d], 0.0, F32),
        k,
        v,
    );
    let (_, l, acc, _, _) = fori_loop(0, n as i32, init, |step, (m, l, acc, kb, vb)| {
        // The block held now started on device `me - step` (mod n).
        let src = (me - step + n as i32) % n as i32;
        let (m, l, acc) = cond(
            src.le(me),
            || {
                let cols = Tensor::iota([1, s], 1, S32) + src * s as i32;
                let logits = qs.matmul(kb.transpose(&[0, 1, 3, 2]));
                let logits = cols.le(rows).select(logits, f64::NEG_INFINITY);
                let m_new = m.maximum(logits.max_keepdims(&[-1]));
                let p = (logits - m_new).exp();
                let alpha = (m - m_new).exp();
                (
                    m_new,
                    l * alpha + p.sum_keepdims(&[-1]),
                    acc * alpha + p.matmul(vb),
                )
            },
            || (m, l, acc),
        );
        (
            m,
            l,
            acc,
            kb.ppermute("seq", &ring),
            vb.ppermute("seq", &ring),
        )
    });
    acc / l
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
    let ring = ring_attention::run_shard_map(&mesh, &shardings, &q, &k, &v, n)?;
    let t_ring = t.elapsed();
    let one = Device::cpu()?;
    let opts = FlashOptions::new().causal(true);
    let t = std::time::Instant::now();
    let flash = flash_attention::run(&one, &q, &k, &v, opts)?;
    let t_flash = t.elapsed();
    let (a, c) = (ring.to_vec::<f32>()?, flash.to_vec::<f32>()?);
    let diff = a
        .iter()
        .zip(&c)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
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

//! `RaggedBatch`: the metadata built on the host, and the next decode
//! step's built on the device, equal what a host-side decode loop builds.

extern crate tessel_dsl as tessel;

use tessel::prelude::*;
use tessel::tree;
use tessel_kernels::serving::RaggedBatch;
use tessel_testing::dev;

fn ints(t: &HostTensor) -> Vec<i32> {
    t.to_vec::<i32>().unwrap()
}

fn fields(b: &RaggedBatch<HostTensor>) -> [Vec<i32>; 4] {
    [
        ints(&b.tokens),
        ints(&b.positions),
        ints(&b.kv_lens),
        ints(&b.cu_q_lens),
    ]
}

#[test]
fn host_batches_pack_sequences_in_order() {
    let b = RaggedBatch::extend(&[(0, &[5, 6, 7][..]), (4, &[9][..]), (2, &[1, 2][..])]).unwrap();
    assert_eq!(
        fields(&b),
        [
            vec![5, 6, 7, 9, 1, 2],
            vec![0, 1, 2, 4, 2, 3],
            vec![3, 5, 4],
            vec![0, 3, 4, 6]
        ]
    );
    assert_eq!(b.num_seqs(), 3);
    let p = RaggedBatch::prefill(&[vec![3, 4], vec![8]]).unwrap();
    assert_eq!(
        fields(&p),
        [vec![3, 4, 8], vec![0, 1, 0], vec![2, 1], vec![0, 2, 3]]
    );
    // An empty batch is valid (no sequence); an empty sequence is not.
    let empty = RaggedBatch::prefill::<Vec<i32>>(&[]).unwrap();
    assert_eq!(empty.num_seqs(), 0);
    assert_eq!(ints(&empty.cu_q_lens), [0]);
    let e = RaggedBatch::prefill(&[vec![1], vec![]]).unwrap_err();
    assert!(e.to_string().contains("sequence 1 has no new token"), "{e}");
    let e = RaggedBatch::extend(&[(i32::MAX as usize, &[1][..])]).unwrap_err();
    assert!(e.to_string().contains("sequence 0"), "{e}");
}

/// Each sequence's last row, and the greedy next batch, as a decode loop
/// on the device makes them.
#[cpu_kernel]
fn next_batch(batch: RaggedBatch, scores: Tensor) -> (Tensor, RaggedBatch) {
    let last = batch.last_rows(scores);
    (last, batch.decode_next(last.argmax(-1)))
}

#[test]
fn the_device_builds_the_next_decode_step() {
    let d = dev();
    let prompts = [vec![1, 2, 3], vec![4], vec![5, 6]];
    let batch = RaggedBatch::prefill(&prompts).unwrap();
    // Scores [T = 6, V = 4]: row r's largest entry at column (r * 3) % 4.
    let scores = HostTensor::from_fn(TensorSpec::new([6, 4], F32), |i| {
        let (r, c) = (i / 4, i % 4);
        if c == (r * 3) % 4 {
            1.0 + r as f64
        } else {
            -(c as f64)
        }
    });
    let (last, next) = next_batch::run(&d, &batch, &scores).unwrap();
    // The last rows are 2, 3 and 5.
    let want_last: Vec<f32> = [2usize, 3, 5]
        .iter()
        .flat_map(|&r| {
            (0..4).map(move |c| {
                if c == (r * 3) % 4 {
                    1.0 + r as f32
                } else {
                    -(c as f32)
                }
            })
        })
        .collect();
    assert_eq!(last.to_vec::<f32>().unwrap(), want_last);
    let tokens: Vec<i32> = [2usize, 3, 5]
        .iter()
        .map(|r| ((r * 3) % 4) as i32)
        .collect();
    let host =
        RaggedBatch::extend(&[(3, &tokens[0..1]), (1, &tokens[1..2]), (2, &tokens[2..3])]).unwrap();
    assert_eq!(fields(&next), fields(&host));

    // Device-resident: a second step from the first's buffers, with no
    // upload in between, continues each sequence by one.
    let buffers = tree::to_device(&d, &next).unwrap();
    let scores = d
        .to_device(&HostTensor::zeros(TensorSpec::new([3, 4], F32)))
        .unwrap();
    let (_, again) = next_batch::call(&d, &buffers, &scores).unwrap();
    let again = tree::to_host(&again).unwrap();
    assert_eq!(
        fields(&again),
        [
            vec![0, 0, 0],
            vec![4, 2, 3],
            vec![5, 3, 4],
            vec![0, 1, 2, 3]
        ]
    );
}

#[cpu_kernel]
fn prefill_step(q: Tensor, k: Tensor, v: Tensor, batch: RaggedBatch, window: usize) -> Tensor {
    let mut opts = tessel_kernels::serving::ServeOptions::new();
    if window > 0 {
        opts.window = Some(window);
    }
    tessel_kernels::serving::prefill_attention(q, k, v, &batch, opts)
}

/// Causal attention within each sequence, in f64: `q [T, Hq, D]`, `k, v
/// [T, Hkv, D]`, sequences of `lens` packed in order, keys at most
/// `window` before the query (0: unbounded).
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: &[usize],
    heads: (usize, usize, usize),
    window: usize,
) -> Vec<f64> {
    let (hq, hkv, d) = heads;
    let t: usize = lens.iter().sum();
    let mut out = vec![0.0; t * hq * d];
    let scale = 1.0 / (d as f64).sqrt();
    let mut start = 0;
    for &n in lens {
        for i in 0..n {
            for h in 0..hq {
                let g = h / (hq / hkv);
                let row = |x: &[f32], r: usize, heads: usize, hh: usize| -> Vec<f64> {
                    (0..d)
                        .map(|c| f64::from(x[((start + r) * heads + hh) * d + c]))
                        .collect()
                };
                let qi = row(q, i, hq, h);
                let lo = if window > 0 {
                    i.saturating_sub(window)
                } else {
                    0
                };
                let logits: Vec<f64> = (lo..=i)
                    .map(|j| {
                        row(k, j, hkv, g)
                            .iter()
                            .zip(&qi)
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for (jj, j) in (lo..=i).enumerate() {
                    let vj = row(v, j, hkv, g);
                    for c in 0..d {
                        out[((start + i) * hq + h) * d + c] += w[jj] / z * vj[c];
                    }
                }
            }
        }
        start += n;
    }
    out
}

/// A fresh prefill's attention equals per-sequence causal attention
/// (grouped heads, odd lengths, with and without a window); a batch with
/// cached keys is refused after the call.
#[test]
fn prefill_attention_is_causal_attention_per_sequence() {
    let d = dev();
    let (hq, hkv, dim) = (4, 2, 8);
    let lens = [5usize, 1, 7, 3];
    let t: usize = lens.iter().sum();
    let prompts: Vec<Vec<i32>> = lens.iter().map(|&n| vec![1; n]).collect();
    let batch = RaggedBatch::prefill(&prompts).unwrap();
    let make = |heads: usize, seed: f64| {
        HostTensor::from_fn(TensorSpec::new([t, heads, dim], F32), move |i| {
            ((i as f64 + seed) * 0.37).sin()
        })
    };
    let (q, k, v) = (make(hq, 0.0), make(hkv, 1.0), make(hkv, 2.0));
    let (qs, ks, vs) = (
        q.to_vec::<f32>().unwrap(),
        k.to_vec::<f32>().unwrap(),
        v.to_vec::<f32>().unwrap(),
    );
    for window in [0usize, 2] {
        let out = prefill_step::run(&d, &q, &k, &v, &batch, window).unwrap();
        let want = reference(&qs, &ks, &vs, &lens, (hq, hkv, dim), window);
        let got = out.to_vec::<f32>().unwrap();
        let err = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .fold(0.0, f64::max);
        // f32 inputs, f32 accumulation: a few ulps of values below 1.
        assert!(err < 2e-6, "window {window}: max error {err}");
    }
    let cached = RaggedBatch::extend(&[(0, &[1, 1][..]), (3, &[1][..])]).unwrap();
    let (q2, k2, v2) = (make(hq, 0.0), make(hkv, 1.0), make(hkv, 2.0));
    let small = |x: &HostTensor, heads: usize| {
        HostTensor::from_vec(
            x.to_vec::<f32>().unwrap()[..3 * heads * dim].to_vec(),
            [3, heads, dim],
        )
        .unwrap()
    };
    let e = prefill_step::run(
        &d,
        &small(&q2, hq),
        &small(&k2, hkv),
        &small(&v2, hkv),
        &cached,
        0,
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs a fresh prefill"), "{e}");
    // Sequence 1 has 3 keys cached before its 1 new token.
    assert!(
        e.to_string()
            .contains("sequence 1 has kv_lens 4 but 1 new tokens"),
        "{e}"
    );
}

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

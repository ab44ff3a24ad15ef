//! Sorting along an axis and `top_k`.

use crate::dtype::DType;
use crate::error::Location;
use crate::ops::Op;
use crate::shape::TensorSpec;
use crate::trace::build;
use crate::trace::tensor::{normalize_axis, Tensor};

fn sort_at(operands: &[Tensor], axis: isize, descending: bool, loc: Location) -> Vec<Tensor> {
    let n = operands.len();
    build("sort", operands, loc, n, move |s| {
        let Some(first) = s.first() else {
            return Err("sort needs at least one tensor".into());
        };
        let dim = normalize_axis(axis, first.rank())
            .ok_or_else(|| format!("axis {axis} is out of range for {first}"))?;
        if first.dtype.is_pred() {
            return Err("sort keys cannot be pred".into());
        }
        if s.iter().any(|t| t.shape != first.shape) {
            return Err("all tensors sorted together must have one shape".into());
        }
        Ok((Op::Sort { dim, descending }, s.to_vec()))
    })
}

impl Tensor {
    /// Sorted along `axis` (stable; NaNs last when ascending).
    #[track_caller]
    pub fn sort(self, axis: isize, descending: bool) -> Tensor {
        sort_at(&[self], axis, descending, Location::caller())[0]
    }

    /// The s32 indices that sort `self` along `axis` (stable).
    #[track_caller]
    pub fn argsort(self, axis: isize, descending: bool) -> Tensor {
        let loc = Location::caller();
        let spec = self.spec();
        let a = normalize_axis(axis, spec.rank()).unwrap_or(0);
        let idx = build("iota", &[], loc.clone(), 1, {
            let spec = TensorSpec::new(spec.shape.clone(), DType::S32);
            move |_| Ok((Op::Iota { dim: a }, vec![spec]))
        })[0];
        sort_at(&[self, idx], axis, descending, loc)[1]
    }

    /// Sorts `self` (the keys) along `axis` and permutes `values` the same way;
    /// returns (sorted keys, permuted values).
    #[track_caller]
    pub fn sort_with(self, values: Tensor, axis: isize, descending: bool) -> (Tensor, Tensor) {
        let r = sort_at(&[self, values], axis, descending, Location::caller());
        (r[0], r[1])
    }

    /// The `k` largest elements along the last axis, in descending order,
    /// and their s32 indices.
    #[track_caller]
    pub fn top_k(self, k: usize) -> (Tensor, Tensor) {
        let r = build("top_k", &[self], Location::caller(), 2, move |s| {
            let x = &s[0];
            let Some(&last) = x.shape.last() else {
                return Err("top_k needs a tensor of rank 1 or more".into());
            };
            if k == 0 || k > last {
                return Err(format!(
                    "k = {k} must be in 1..={last} (the last axis of {x})"
                ));
            }
            if x.dtype.is_pred() {
                return Err("top_k is not defined for pred".into());
            }
            let mut shape = x.shape.clone();
            *shape.last_mut().unwrap_or(&mut 0) = k;
            Ok((
                Op::TopK { k },
                vec![
                    TensorSpec::new(shape.clone(), x.dtype),
                    TensorSpec::new(shape, DType::S32),
                ],
            ))
        });
        (r[0], r[1])
    }
}

//! [`Carry`]: the values a traced loop carries, a branch returns, or a
//! gradient takes: a [`Tensor`], or a tuple, array or `Vec` of them.

use crate::trace::tensor::Tensor;

/// A value carried through a loop or returned by a branch: a [`Tensor`], or a
/// tuple, array or `Vec` of carries.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be carried through a traced loop or merged by a branch on a tensor",
    label = "not made of `Tensor`s",
    note = "a `for` over a range, a `while` on a tensor condition and an `if` on a tensor condition carry \
            every outer variable they assign as traced values; a Rust value assigned there must be a \
            `Tensor` (or a tuple/array/Vec of them). To run a loop while tracing instead, write `#[unroll] for ...`"
)]
pub trait Carry: Sized {
    /// Appends the tensors, in order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// A value of the same structure as `self` made of the next tensors of `it`.
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self;
}

impl Carry for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(*self);
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        it.next().unwrap_or(Tensor::INERT)
    }
}

impl<T: Carry> Carry for Vec<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|c| c.flatten(out));
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        self.iter().map(|c| c.rebuild(it)).collect()
    }
}

impl<T: Carry, const N: usize> Carry for [T; N] {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|c| c.flatten(out));
    }
    fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
        std::array::from_fn(|i| self[i].rebuild(it))
    }
}

impl Carry for () {
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn rebuild(&self, _it: &mut dyn Iterator<Item = Tensor>) -> Self {}
}

macro_rules! carry_tuple {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Carry),+> Carry for ($($t,)+) {
            fn flatten(&self, out: &mut Vec<Tensor>) {
                $(self.$i.flatten(out);)+
            }
            fn rebuild(&self, it: &mut dyn Iterator<Item = Tensor>) -> Self {
                ($(self.$i.rebuild(it),)+)
            }
        }
    };
}
carry_tuple!(A 0);
carry_tuple!(A 0, B 1);
carry_tuple!(A 0, B 1, C 2);
carry_tuple!(A 0, B 1, C 2, D 3);
carry_tuple!(A 0, B 1, C 2, D 3, E 4);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
carry_tuple!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// The tensors of a carry, in order.
pub fn flat<C: Carry>(c: &C) -> Vec<Tensor> {
    let mut v = Vec::new();
    c.flatten(&mut v);
    v
}

//! `ndarray` conversions (cargo feature `ndarray`): any array or view into
//! a [`HostTensor`], and a tensor back into an owned array, by method or by
//! `TryFrom`.

use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};

use crate::dtype::Element;
use crate::error::{Error, HostError, Result};
use crate::host::HostTensor;

impl HostTensor {
    /// A tensor from an `ndarray` array, view or shared array (any layout,
    /// copied in row-major order).
    ///
    /// ```
    /// use ndarray::array;
    /// use tessel_ir::HostTensor;
    /// let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    /// let t = HostTensor::from_ndarray(&a.t())?; // a transposed view
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// let same: HostTensor = (&a).try_into()?;
    /// assert_eq!(same.shape(), &[2, 3]);
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn from_ndarray<S, T, D>(a: &ArrayBase<S, D>) -> Result<HostTensor>
    where
        S: Data<Elem = T>,
        T: Element,
        D: Dimension,
    {
        let shape = a.shape().to_vec();
        let data: Vec<T> = a.iter().copied().collect();
        HostTensor::from_vec(data, shape)
    }

    /// This tensor as a dynamic-rank `ndarray` array of `T` (which must be its dtype).
    ///
    /// ```
    /// use ndarray::ArrayD;
    /// use tessel_ir::HostTensor;
    /// let t = HostTensor::from_vec(vec![1i32, 2, 3, 4], [2, 2])?;
    /// let a: ArrayD<i32> = (&t).try_into()?;
    /// assert_eq!(a[[1, 0]], 3);
    /// assert!(t.to_ndarray::<f32>().is_err()); // not its dtype
    /// # Ok::<(), tessel_ir::Error>(())
    /// ```
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(self.shape()), v).map_err(|e| {
            HostError::Conversion {
                target: "ndarray::ArrayD",
                message: e.to_string(),
            }
            .into()
        })
    }
}

impl<S, T, D> TryFrom<&ArrayBase<S, D>> for HostTensor
where
    S: Data<Elem = T>,
    T: Element,
    D: Dimension,
{
    type Error = Error;
    fn try_from(a: &ArrayBase<S, D>) -> Result<HostTensor> {
        HostTensor::from_ndarray(a)
    }
}

impl<S, T, D> TryFrom<ArrayBase<S, D>> for HostTensor
where
    S: Data<Elem = T>,
    T: Element,
    D: Dimension,
{
    type Error = Error;
    fn try_from(a: ArrayBase<S, D>) -> Result<HostTensor> {
        HostTensor::from_ndarray(&a)
    }
}

impl<T: Element> TryFrom<&HostTensor> for ArrayD<T> {
    type Error = Error;
    fn try_from(t: &HostTensor) -> Result<ArrayD<T>> {
        t.to_ndarray()
    }
}

//! `ndarray` conversions (cargo feature `ndarray`).

use ndarray::{ArrayD, IxDyn};

use crate::dtype::Element;
use crate::error::{HostError, Result};
use crate::host::HostTensor;

impl HostTensor {
    /// A tensor from an `ndarray` array (any layout; copied in row-major order).
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        a: &ndarray::Array<T, D>,
    ) -> Result<HostTensor> {
        let shape = a.shape().to_vec();
        let data: Vec<T> = a.iter().copied().collect();
        HostTensor::from_vec(data, shape)
    }

    /// This tensor as a dynamic-rank `ndarray` array of `T` (which must be its dtype).
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

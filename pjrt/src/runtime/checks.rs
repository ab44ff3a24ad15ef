//! Reading a program's checks after a run: the results past the body's
//! are the checks' code and values (see
//! [`CheckSite`](crate::ir::CheckSite)); a nonzero code is
//! [`Error::Check`](crate::Error::Check), and the caller gets the body's
//! results only.

use super::buffer::DeviceBuffer;
use super::Executable;
use crate::error::{CheckError, Result};
use crate::host::HostTensor;
use crate::ir::{check_slots, CheckSlot};

/// At most this many elements of a reported value are shown.
const SHOWN: usize = 16;

impl Executable {
    /// The body's results of one run on device buffers, or the error of
    /// its first failed check (reading the code is a sync with the run).
    pub(crate) fn checked_buffers(&self, outs: Vec<DeviceBuffer>) -> Result<Vec<DeviceBuffer>> {
        self.split_checks(outs, DeviceBuffer::to_host)
    }

    /// [`checked_buffers`](Self::checked_buffers) on host results.
    pub(crate) fn checked_hosts(&self, outs: Vec<HostTensor>) -> Result<Vec<HostTensor>> {
        self.split_checks(outs, |h| Ok(h.clone()))
    }

    fn split_checks<T>(
        &self,
        mut outs: Vec<T>,
        read: impl Fn(&T) -> Result<HostTensor>,
    ) -> Result<Vec<T>> {
        let sites = self.check_sites();
        let body = self.outputs().len();
        if sites.is_empty() || outs.len() <= body {
            return Ok(outs);
        }
        let checks = outs.split_off(body);
        // The code, then the reported s32 scalars (see `CheckSite`).
        let packed = read(&checks[0])?.to_f64_vec();
        let code = packed.first().copied().unwrap_or(0.0);
        if code == 0.0 {
            return Ok(outs);
        }
        let k = code as usize - 1;
        let Some(site) = sites.get(k) else {
            return Ok(outs);
        };
        let values = check_slots(sites, k)
            .into_iter()
            .map(|slot| match slot {
                CheckSlot::Packed(i) => Ok(packed
                    .get(i)
                    .map_or_else(String::new, |&x| number(x, false))),
                CheckSlot::Result(i) => match checks.get(i) {
                    Some(v) => read(v).map(|h| show(&h)),
                    None => Ok(String::new()),
                },
            })
            .collect::<Result<Vec<_>>>()?;
        Err(CheckError {
            kernel: self.name().to_string(),
            message: fill(&site.message, &values),
            location: site.location.clone(),
            values,
        }
        .into())
    }
}

/// `message` with each `{}` replaced by the next of `values`.
fn fill(message: &str, values: &[String]) -> String {
    let mut out = String::with_capacity(message.len());
    let mut parts = message.split("{}");
    out.push_str(parts.next().unwrap_or(""));
    for (part, value) in parts.zip(values.iter().chain(std::iter::repeat(&String::new()))) {
        out.push_str(value);
        out.push_str(part);
    }
    out
}

/// One element as a check's message shows it: as read for a float, whole
/// for an integer.
fn number(x: f64, float: bool) -> String {
    if float {
        format!("{x}")
    } else {
        format!("{}", x as i128)
    }
}

/// A value as a check's message shows it: a number for a scalar, else its
/// elements in row-major order (the first [`SHOWN`]).
fn show(h: &HostTensor) -> String {
    let v = h.to_f64_vec();
    let num = |x: f64| number(x, h.dtype().is_float());
    if h.spec().rank() == 0 {
        return v.first().map_or_else(String::new, |&x| num(x));
    }
    let mut items: Vec<String> = v.iter().take(SHOWN).map(|&x| num(x)).collect();
    if v.len() > SHOWN {
        items.push(format!("... ({} in all)", v.len()));
    }
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_holes_in_order() {
        let v = ["1".to_string(), "[2, 3]".to_string()];
        assert_eq!(fill("a {} b {} c", &v), "a 1 b [2, 3] c");
        assert_eq!(fill("none", &[]), "none");
    }

    #[test]
    fn show_scalars_and_vectors() {
        let s = HostTensor::from_vec(vec![7i32], [1]).unwrap();
        assert_eq!(show(&s), "[7]");
        let f = HostTensor::from_vec(vec![0.5f32], Vec::<usize>::new()).unwrap();
        assert_eq!(show(&f), "0.5");
        let long = HostTensor::from_vec((0..20).collect::<Vec<i32>>(), [20]).unwrap();
        assert!(show(&long).ends_with("... (20 in all)]"));
    }
}

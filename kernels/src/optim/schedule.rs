//! Learning-rate schedules, computed inside the program from the step
//! count (so a changing rate never recompiles): constant, linear, cosine
//! decay and linear warmup into either.

use tessel::prelude::*;

/// A learning rate as a function of the 1-based step `t` (optax's
/// schedules). Evaluated in the program, in f32 (f64 when the parameters
/// are f64).
///
/// ```
/// use tessel_kernels::optim::Schedule;
/// let s = Schedule::warmup_cosine(1e-3, 100, 1000, 1e-5);
/// assert!((s.at(50) - 5e-4).abs() < 1e-12);
/// assert!((s.at(100) - 1e-3).abs() < 1e-12);
/// assert!((s.at(1000) - 1e-5).abs() < 1e-12);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Schedule {
    /// The same rate at every step.
    Constant(f64),
    /// From `init` to `end` linearly over `steps` steps, then `end`.
    Linear {
        /// The rate at step 0.
        init: f64,
        /// The rate from step `steps` on.
        end: f64,
        /// How many steps the change takes.
        steps: u64,
    },
    /// Cosine decay from `init` to `end` over `steps` steps, then `end`.
    Cosine {
        /// The rate at step 0.
        init: f64,
        /// The rate from step `steps` on.
        end: f64,
        /// How many steps the decay takes.
        steps: u64,
    },
    /// Linear warmup from 0 to `peak` over `warmup` steps, then `then`
    /// (a constant, linear or cosine schedule whose step count starts at
    /// the end of the warmup).
    Warmup {
        /// The rate reached at the end of the warmup.
        peak: f64,
        /// Steps of warmup.
        warmup: u64,
        /// What follows: its `init` is `peak`.
        then: After,
    },
}

/// What follows a [`Schedule::Warmup`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum After {
    /// Stay at the peak.
    Constant,
    /// Linear decay to `end` over `steps` steps.
    Linear {
        /// The final rate.
        end: f64,
        /// Steps of decay.
        steps: u64,
    },
    /// Cosine decay to `end` over `steps` steps.
    Cosine {
        /// The final rate.
        end: f64,
        /// Steps of decay.
        steps: u64,
    },
}

impl Schedule {
    /// Linear warmup to `peak` over `warmup` steps, then cosine decay to
    /// `end` at step `total` (optax's `warmup_cosine_decay_schedule`).
    pub fn warmup_cosine(peak: f64, warmup: u64, total: u64, end: f64) -> Self {
        Schedule::Warmup {
            peak,
            warmup,
            then: After::Cosine {
                end,
                steps: total.saturating_sub(warmup),
            },
        }
    }

    /// Linear warmup to `peak` over `warmup` steps, then constant.
    pub fn warmup_constant(peak: f64, warmup: u64) -> Self {
        Schedule::Warmup {
            peak,
            warmup,
            then: After::Constant,
        }
    }

    /// The rate at step `t`, on the host (the reference the program's
    /// rate is tested against).
    pub fn at(&self, t: u64) -> f64 {
        let t = t as f64;
        match *self {
            Schedule::Constant(lr) => lr,
            Schedule::Linear { init, end, steps } => linear(init, end, steps as f64, t),
            Schedule::Cosine { init, end, steps } => cosine(init, end, steps as f64, t),
            Schedule::Warmup { peak, warmup, then } => {
                let w = warmup as f64;
                if t < w {
                    peak * t / w
                } else {
                    match then {
                        After::Constant => peak,
                        After::Linear { end, steps } => linear(peak, end, steps as f64, t - w),
                        After::Cosine { end, steps } => cosine(peak, end, steps as f64, t - w),
                    }
                }
            }
        }
    }

    /// The rate at the traced step `t` (a float scalar).
    pub fn traced(&self, t: Tensor) -> Tensor {
        match *self {
            Schedule::Constant(lr) => Tensor::scalar(lr, t.dtype()),
            Schedule::Linear { init, end, steps } => linear_traced(init, end, steps as f64, t),
            Schedule::Cosine { init, end, steps } => cosine_traced(init, end, steps as f64, t),
            Schedule::Warmup { peak, warmup, then } => {
                let w = warmup as f64;
                let ramp = t * (peak / w.max(1.0));
                let after = t - w;
                let rest = match then {
                    After::Constant => Tensor::scalar(peak, t.dtype()),
                    After::Linear { end, steps } => linear_traced(peak, end, steps as f64, after),
                    After::Cosine { end, steps } => cosine_traced(peak, end, steps as f64, after),
                };
                t.lt(w).select(ramp, rest)
            }
        }
    }

    /// Writes the schedule into a compile key.
    pub(crate) fn write_key(&self, key: &mut StaticKey) {
        let (tag, a, b, c, d): (u8, f64, f64, u64, (u8, f64, u64)) = match *self {
            Schedule::Constant(lr) => (0, lr, 0.0, 0, (0, 0.0, 0)),
            Schedule::Linear { init, end, steps } => (1, init, end, steps, (0, 0.0, 0)),
            Schedule::Cosine { init, end, steps } => (2, init, end, steps, (0, 0.0, 0)),
            Schedule::Warmup { peak, warmup, then } => {
                let after = match then {
                    After::Constant => (0, 0.0, 0),
                    After::Linear { end, steps } => (1, end, steps),
                    After::Cosine { end, steps } => (2, end, steps),
                };
                (3, peak, 0.0, warmup, after)
            }
        };
        key.push(&tag).push(&a).push(&b).push(&c);
        key.push(&d.0).push(&d.1).push(&d.2);
    }
}

fn frac(steps: f64, t: f64) -> f64 {
    if steps <= 0.0 {
        1.0
    } else {
        (t / steps).clamp(0.0, 1.0)
    }
}

fn linear(init: f64, end: f64, steps: f64, t: f64) -> f64 {
    init + (end - init) * frac(steps, t)
}

fn cosine(init: f64, end: f64, steps: f64, t: f64) -> f64 {
    end + (init - end) * 0.5 * (1.0 + (std::f64::consts::PI * frac(steps, t)).cos())
}

/// `t / steps` clamped to `[0, 1]`, traced.
fn frac_traced(steps: f64, t: Tensor) -> Tensor {
    if steps <= 0.0 {
        Tensor::scalar(1.0, t.dtype())
    } else {
        (t / steps).clamp(0.0, 1.0)
    }
}

fn linear_traced(init: f64, end: f64, steps: f64, t: Tensor) -> Tensor {
    frac_traced(steps, t) * (end - init) + init
}

fn cosine_traced(init: f64, end: f64, steps: f64, t: Tensor) -> Tensor {
    ((frac_traced(steps, t) * std::f64::consts::PI).cos() + 1.0) * (0.5 * (init - end)) + end
}

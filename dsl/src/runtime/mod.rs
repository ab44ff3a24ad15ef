//! The PJRT runtime.

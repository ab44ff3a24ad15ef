//! tessel-kernels

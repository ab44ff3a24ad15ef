//! tessel-macros

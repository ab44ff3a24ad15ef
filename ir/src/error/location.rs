//! Where in a user's code something happened.

use std::fmt;

/// A source location inside a user's kernel (recorded with `#[track_caller]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The source file, as the compiler names it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Location {
    /// The caller's location (call this from a `#[track_caller]` function).
    #[track_caller]
    pub fn caller() -> Location {
        let l = std::panic::Location::caller();
        Location {
            file: l.file().to_string(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

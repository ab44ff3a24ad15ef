//! The `tessel` command; see `tessel --help`.
#![forbid(unsafe_code)]

mod cli;

use std::io::{ErrorKind, Write};

fn main() {
    let mut words = vec!["tessel".to_string()];
    for (i, word) in std::env::args_os().skip(1).enumerate() {
        match word.into_string() {
            Ok(w) => words.push(w),
            Err(raw) => {
                eprintln!(
                    "tessel: argument {} is not valid UTF-8: {}",
                    i + 1,
                    raw.to_string_lossy()
                );
                std::process::exit(2);
            }
        }
    }
    match cli::main_with(&words) {
        // A reader that stops early (`tessel lower .. | head`) is not an error.
        cli::Outcome::Print(out) => match writeln!(std::io::stdout().lock(), "{out}") {
            Err(e) if e.kind() != ErrorKind::BrokenPipe => {
                eprintln!("tessel: writing the output: {e}");
                std::process::exit(2);
            }
            _ => {}
        },
        cli::Outcome::Fail(e) => {
            eprintln!("tessel: {e}");
            std::process::exit(2);
        }
    }
}

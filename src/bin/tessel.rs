//! The `tessel` command; see `tessel --help`.
#![forbid(unsafe_code)]

use std::io::{ErrorKind, Write};

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    match tessel::cli::main_with(&words) {
        // A reader that stops early (`tessel lower .. | head`) is not an error.
        Ok(out) => match writeln!(std::io::stdout().lock(), "{out}") {
            Err(e) if e.kind() != ErrorKind::BrokenPipe => {
                eprintln!("tessel: writing the output: {e}");
                std::process::exit(2);
            }
            _ => {}
        },
        Err(e) => {
            eprintln!("tessel: {e}");
            std::process::exit(2);
        }
    }
}

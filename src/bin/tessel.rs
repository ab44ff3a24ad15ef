//! The `tessel` command; see `tessel --help`.

fn main() {
    let words: Vec<String> = std::env::args().skip(1).collect();
    match tessel::cli::main_with(&words) {
        Ok(out) => println!("{out}"),
        Err(e) => {
            eprintln!("tessel: {e}");
            std::process::exit(2);
        }
    }
}

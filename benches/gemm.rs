//! `cargo bench --bench gemm`: the `gemm` workload of the benchmark suite
//! (`tessel bench gemm`), each kernel timed against its reference in the same
//! run on the CPU plugin; see `cli/src/cli/bench.rs` for the sizes.

// The suite's workloads, shared with the `tessel bench` command.
#[allow(dead_code)]
#[path = "../cli/src/cli/bench.rs"]
mod bench;

fn main() -> tessel::Result<()> {
    let dev = tessel::runtime::Device::cpu()?;
    for w in bench::workloads().into_iter().filter(|w| w.name == "gemm") {
        println!("{}", w.about);
        print!("{}", bench::table(&(w.run)(&dev)?));
    }
    Ok(())
}

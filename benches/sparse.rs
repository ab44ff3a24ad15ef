//! `cargo bench --bench sparse`: the `sparse` workload of the benchmark suite
//! (`tessel bench sparse`), each kernel timed against its reference in the same
//! run on the CPU plugin; see `src/cli/bench.rs` for the sizes.

fn main() -> tessel::Result<()> {
    let dev = tessel::runtime::Device::cpu()?;
    for w in tessel::cli::bench::workloads()
        .into_iter()
        .filter(|w| w.name == "sparse")
    {
        println!("{}", w.about);
        print!("{}", tessel::cli::bench::table(&(w.run)(&dev)?));
    }
    Ok(())
}

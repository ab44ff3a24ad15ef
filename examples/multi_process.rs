//! One program over two processes on this machine, the way
//! `jax.distributed.initialize` sets it up: this process starts a
//! coordinator on 127.0.0.1, then runs itself twice as processes 0 and 1
//! (two CPU devices each). Each creates its client with
//! `Device::distributed` (process id and count, key-value callbacks served
//! by the coordinator), meets the other through the coordinator, and runs a
//! `psum` over its devices.
//!
//! On a plugin that implements multi-process clients (CUDA, libtpu) the two
//! clients would be one client of 4 devices. The CPU plugin reads only
//! `cpu_device_count`: each process prints what it answers — its own 2
//! devices.
use std::process::Command;
use std::time::Duration;

use tessel::prelude::*;
use tessel::runtime::{cpu_plugin_path, Coordinator, CreateOption, DistributedOptions, KvStore, SECRET_ENV};
use tessel::shard::{Mesh, PartitionSpec, Shardings};

#[cpu_kernel]
fn total(x: Tensor) -> Tensor {
    x.sum(&[0]).psum(&["d"])
}

fn process(id: usize, coordinator: &str) -> Result<(), Box<dyn std::error::Error>> {
    // The secret comes through the environment (a command line is visible
    // to every local user).
    let secret = std::env::var(SECRET_ENV)?;
    let options = DistributedOptions {
        coordinator: coordinator.to_string(),
        secret: secret.clone(),
        process_id: id,
        num_processes: 2,
    };
    let dev = Device::distributed(cpu_plugin_path()?, &[("cpu_device_count", CreateOption::Int64(2))], &options)?;
    // Meet the other process through the coordinator.
    let store = KvStore::connect(coordinator, &secret)?;
    store.put(format!("hello/{id}"), format!("process {id} is up").as_bytes())?;
    let peer = store.get(format!("hello/{}", 1 - id), Duration::from_secs(30))?;
    // A psum over this process's devices.
    let mesh = Mesh::new(&dev, &[("d", dev.device_count())])?;
    let x = HostTensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [4])?;
    let split = PartitionSpec::new(vec![Some("d")]);
    let sum = total::run_shard_map(&mesh, &Shardings::new([split], [PartitionSpec::replicated()]), &x)?;
    println!(
        "process {id}: platform {}, {} devices visible (4 if the plugin joined the processes); \
         heard \"{}\"; psum over its devices: {}",
        dev.platform_name(),
        dev.device_count(),
        String::from_utf8_lossy(&peer),
        sum.to_vec::<f32>()?[0]
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, id, coordinator] = &args[..] {
        if flag == "--process" {
            process(id.parse()?, coordinator)?;
            return Ok(());
        }
    }
    let coordinator = Coordinator::start("127.0.0.1:0")?;
    let address = coordinator.address().to_string();
    println!("coordinator on {address}");
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(std::env::current_exe()?)
                .args(["--process", &id.to_string(), &address])
                .env(SECRET_ENV, coordinator.secret())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    for (id, mut child) in children.into_iter().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("process {id} failed: {status}").into());
        }
    }
    Ok(())
}

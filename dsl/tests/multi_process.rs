//! Two processes meet at a coordinator on loopback and each creates its
//! client with `Device::distributed`. The test binary runs itself as the
//! two processes (`TESSEL_TEST_PROCESS=id:address`, the coordinator's
//! secret in `TESSEL_COORDINATOR_SECRET`). What the CPU plugin
//! answers is checked: it accepts the process id, count and key-value
//! callbacks, each process sees only its own devices, and programs run on
//! such a client (with launch ids counted per program, which the processes
//! agree on).

use std::process::Command;
use std::time::Duration;

use tessel_dsl::kernel::Kernel;
use tessel_dsl::runtime::{
    cpu_plugin_path, Coordinator, CreateOption, Device, DistributedOptions, KvStore, SECRET_ENV,
};
use tessel_dsl::{HostTensor, Tensor};

const NAME: &str = "two_processes_meet_and_each_gets_its_client";

/// One process: its client, a message to the other through the
/// coordinator, and the other's message back.
fn child(id: usize, address: &str) {
    let secret = std::env::var(SECRET_ENV).expect("the coordinator's secret");
    let dev = Device::distributed(
        cpu_plugin_path().unwrap(),
        &[("cpu_device_count", CreateOption::Int64(2))],
        &DistributedOptions {
            coordinator: address.to_string(),
            secret: secret.clone(),
            process_id: id,
            num_processes: 2,
        },
    )
    .unwrap();
    // Two programs, each run twice: the ids the processes pass count per
    // program from a start taken from its text.
    let x = HostTensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let add = Kernel::new("add_one", |a: &[Tensor]| a[0] + 1.0);
    let double = Kernel::new("double", |a: &[Tensor]| a[0] * 2.0);
    for _ in 0..2 {
        let sum = add.run(&dev, &[&x]).unwrap();
        let twice = double.run(&dev, &[&x]).unwrap();
        assert_eq!(sum[0].to_vec::<f32>().unwrap(), [2.0, 3.0]);
        assert_eq!(twice[0].to_vec::<f32>().unwrap(), [2.0, 4.0]);
    }
    let store = KvStore::connect(address, &secret).unwrap();
    store.put(format!("hello/{id}"), &[id as u8]).unwrap();
    let peer = store
        .get(format!("hello/{}", 1 - id), Duration::from_secs(60))
        .unwrap();
    println!(
        "PROCESS {id} devices={} platform={} peer={}",
        dev.device_count(),
        dev.platform_name(),
        peer[0]
    );
}

#[test]
fn two_processes_meet_and_each_gets_its_client() {
    if let Ok(role) = std::env::var("TESSEL_TEST_PROCESS") {
        let (id, address) = role.split_once(':').expect("id:address");
        child(id.parse().unwrap(), address);
        return;
    }
    let coordinator = Coordinator::start("127.0.0.1:0").unwrap();
    let address = coordinator.address().to_string();
    // Both at once: each waits for the other's message.
    let children: Vec<_> = (0..2)
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
                .env("TESSEL_TEST_PROCESS", format!("{id}:{address}"))
                .env(SECRET_ENV, coordinator.secret())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (id, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "process {id}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The CPU plugin's answer: its own two devices, not the four of a
        // joined client; and the other process's message arrived.
        let want = format!("PROCESS {id} devices=2 platform=cpu peer={}", 1 - id);
        assert!(stdout.contains(&want), "process {id}: {stdout}");
    }
}

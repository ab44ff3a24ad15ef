//! The CPU device: its description, clients with several devices, and an SPMD program.

use tessel_dsl::runtime::{Device, Program};
use tessel_dsl::{DeviceError, Error, F32};

use super::{cpu, f32_tensor, read, spec};

#[test]
fn cpu_device_describes_itself() {
    let dev = cpu();
    assert_eq!(dev.platform_name(), "cpu");
    assert_eq!(dev.device_count(), 1);
    assert!(dev.plugin_path().unwrap().is_file());
    let (major, minor) = dev.api_version().unwrap();
    assert_eq!(major, 0);
    assert!(minor >= 1, "PJRT minor version {minor}");
    let stablehlo = dev.stablehlo_version().expect("stablehlo_current_version");
    assert_eq!(stablehlo.split('.').count(), 3, "{stablehlo}");
    assert!(dev.stablehlo_minimum_version().is_some());
    assert!(!dev.plugin_attributes().is_empty());
    // The default device is shared; other clients are distinct.
    assert_eq!(dev, cpu());
    assert!(format!("{dev:?}").contains("cpu"));
}

#[test]
fn spmd_program_runs_sharded_on_two_devices() {
    let dev = Device::cpu_with_devices(2).unwrap();
    let sharding = "{mhlo.sharding = \"{devices=[2,1]<=[2]}\"}";
    let ty = "tensor<4x2xf32>";
    let program = Program {
        name: "sharded_add".into(),
        mlir: format!(
            "module {{\n  func.func @main(%a: {ty} {sharding}, %b: {ty} {sharding}) -> ({ty} {sharding}) {{\n    \
             %0 = stablehlo.add %a, %b : {ty}\n    return %0 : {ty}\n  }}\n}}\n"
        ),
        inputs: vec![spec(&[4, 2], F32); 2],
        outputs: vec![spec(&[4, 2], F32)],
        num_partitions: 2,
        num_replicas: 1,
        hints: Default::default(),
        graph: None,
    };
    let exe = dev.compile(&program).unwrap();
    assert_eq!(exe.devices().len(), 2);
    let shard = |d: usize, v: f32| {
        dev.to_device_on(&f32_tensor(&[v; 4], &[2, 2]), exe.devices()[d])
            .unwrap()
    };
    let (a0, a1, b0, b1) = (shard(0, 1.0), shard(1, 2.0), shard(0, 10.0), shard(1, 20.0));
    // The single-device entry points refuse a multi-device program.
    assert!(exe.execute(&[&a0, &b0]).is_err());
    let out = exe
        .execute_sharded(&[vec![&a0, &b0], vec![&a1, &b1]])
        .unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(read::<f32>(&out[0][0]), vec![11.0; 4]);
    assert_eq!(read::<f32>(&out[1][0]), vec![22.0; 4]);
    assert_eq!(out[1][0].device_index(), exe.devices()[1]);
    // Shards on the wrong devices are refused.
    assert!(matches!(
        exe.execute_sharded(&[vec![&a1, &b1], vec![&a0, &b0]])
            .unwrap_err(),
        Error::Device(DeviceError::Arguments { .. })
    ));
}

#[test]
fn cpu_clients_with_several_devices() {
    let none = Device::cpu_with_devices(0).unwrap_err();
    assert!(
        matches!(
            none,
            Error::Device(DeviceError::DeviceCount { requested: 0 })
        ),
        "{none:?}"
    );
    assert!(none.to_string().ends_with("got 0"), "{none}");
    // A create option of the wrong type: refused before the plugin aborts.
    let path = cpu().plugin_path().unwrap().to_path_buf();
    let bad = Device::from_plugin_with_options(
        &path,
        &[(
            "cpu_device_count",
            tessel_dsl::runtime::CreateOption::String("4".into()),
        )],
    )
    .unwrap_err();
    assert!(
        matches!(bad, Error::Device(DeviceError::CreateOptionType { .. })),
        "{bad:?}"
    );
    assert!(
        bad.to_string().contains("takes an int64, got a string"),
        "{bad}"
    );
    // Too many devices: an error before the plugin builds them.
    let many = Device::cpu_with_devices(100_000).unwrap_err();
    assert!(
        matches!(
            many,
            Error::Device(DeviceError::DeviceCount { requested: 100_000 })
        ),
        "{many:?}"
    );
    // The same through the plugin's create options (it crashed after 73 s).
    for n in [100_000, 0, -3] {
        let many = Device::from_plugin_with_options(
            &path,
            &[(
                "cpu_device_count",
                tessel_dsl::runtime::CreateOption::Int64(n),
            )],
        )
        .unwrap_err();
        assert!(
            matches!(many, Error::Device(DeviceError::DeviceCount { .. })),
            "{many:?}"
        );
    }
    let dev = Device::cpu_with_devices(4).unwrap();
    assert_eq!(dev.device_count(), 4);
    assert_eq!(dev.plugin_path(), cpu().plugin_path());
    let x = f32_tensor(&[1.0, 2.0], &[2]);
    let buf = dev.to_device_on(&x, 3).unwrap();
    assert_eq!(buf.device_index(), 3);
    assert_eq!(buf.to_host().unwrap(), x);
    let beyond = dev.to_device_on(&x, 4).unwrap_err();
    match &beyond {
        Error::Device(DeviceError::DeviceIndex {
            index: 4,
            platform,
            count: 4,
        }) => assert_eq!(platform, "cpu"),
        other => panic!("expected a device index error, got {other:?}"),
    }
    assert_eq!(
        beyond.to_string(),
        "device index 4 is out of range: the cpu client has 4 addressable devices"
    );
    // The same plugin (loaded once) with its default options: 4 CPU devices.
    assert_eq!(
        Device::from_plugin(dev.plugin_path().unwrap())
            .unwrap()
            .device_count(),
        4
    );
}

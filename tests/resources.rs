//! Running out of memory is an error, not an abort: a program asking for
//! more than the process may map (here `ulimit -v`) fails with
//! `ResourceExhausted`, interpreted and compiled.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use std::process::Command;

/// A 4 GiB result (2^30 f32) from a 4-byte input.
const BIG: &str = "graph @big {
  %x = parameter 0 : f32[1]
  %y = broadcast_in_dim(%x) {shape=[1073741824], dims=[0]} : f32[1073741824]
  return %y as \"y\"
}
";

#[test]
fn a_tensor_larger_than_the_address_space_limit_is_resource_exhausted() {
    let dir = std::env::temp_dir().join(format!("tl_resources_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("big.tlir");
    std::fs::write(&prog, BIG).unwrap();
    let x = dir.join("x.npy");
    tensorlift::npy::save(
        &tensorlift::Tensor::from(ndarray::arr1(&[1.0f32]).into_dyn()),
        &x,
    )
    .unwrap();
    for mode in ["interp", "jit"] {
        // 2 GiB of address space: the binary starts, a 4 GiB tensor cannot exist.
        let script = format!(
            "ulimit -v 2097152; exec \"$0\" run {} --input x={} --output-dir {} --mode {mode}",
            prog.display(),
            x.display(),
            dir.join("out").display()
        );
        let o = Command::new("bash")
            .args(["-c", &script, env!("CARGO_BIN_EXE_tensorlift")])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{mode}: {:?}\n{stderr}", o.status);
        assert!(
            stderr.contains("ResourceExhausted") && stderr.contains("4294967296"),
            "{mode}: {stderr}"
        );
    }
}

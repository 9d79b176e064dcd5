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

use tensorlift::{Sym, Tensor, function};

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

/// The child's part of the next test: 40 outputs of 32 MiB held, then
/// dropped (the buffer cache keeps part of them mapped), then one 1.75 GiB
/// output, which fits the address space only if the cache gives its
/// buffers back first.
fn held_outputs_then_one_large() {
    let double = function(|x: Sym| &x * 2.0).jit_compile(true);
    let x = Tensor::from(ndarray::Array1::<f32>::ones(8 << 20).into_dyn());
    let held: Vec<Vec<Tensor>> = (0..40)
        .map(|_| double.call(std::slice::from_ref(&x)).unwrap())
        .collect();
    drop(held);
    let spread = function(|x: Sym| x.broadcast_to(&[7 << 26])).jit_compile(true);
    let one = Tensor::from(ndarray::arr1(&[3.0f32]).into_dyn());
    match spread.call(&[one]) {
        Ok(y) => println!("large output of {} bytes", y[0].bytes().len()),
        Err(e) => println!("failed: {e}"),
    }
}

#[test]
fn buffers_kept_for_reuse_are_given_back_before_a_large_allocation_fails() {
    if std::env::var_os("TL_RESOURCES_CHILD").is_some() {
        held_outputs_then_one_large();
        return;
    }
    // 2.5 GiB of address space: the held batch (1.25 GiB) fits, and so
    // does the large output once the batch is gone, but not beside what
    // the cache kept of it.
    let script = "ulimit -v 2621440; exec \"$0\" --exact \
                  buffers_kept_for_reuse_are_given_back_before_a_large_allocation_fails --nocapture";
    let o = Command::new("bash")
        .args([
            "-c",
            script,
            &std::env::current_exe().unwrap().display().to_string(),
        ])
        .env("TL_RESOURCES_CHILD", "1")
        .env("RAYON_NUM_THREADS", "2")
        .env("MALLOC_ARENA_MAX", "2")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains(&format!("large output of {} bytes", 7usize << 28)),
        "{:?}\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

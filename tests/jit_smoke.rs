#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]
mod common;
use tensorlift::{DType, IrStage, Sym, Tensor, TensorSpec, function};

#[test]
fn smoke() {
    let f = function(|x: Sym| ((&x * 1.5 + 0.25) * &x - 0.75) * 0.5 + &x).jit_compile(true);
    let xs: Vec<f32> = (0..37).map(|i| i as f32 * 0.1 - 1.0).collect();
    let y = f.call(&[common::f32s(&xs, &[37])]).unwrap();
    let want: Vec<f32> = xs
        .iter()
        .map(|x| ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x)
        .collect();
    assert_eq!(common::to_vec::<f32>(&y[0]), want);
    println!(
        "{}",
        f.compiler_ir(&[TensorSpec::known(DType::F32, &[37])], IrStage::Fused)
            .unwrap()
    );
    println!(
        "{}",
        f.compiler_ir(&[TensorSpec::known(DType::F32, &[37])], IrStage::Cranelift)
            .unwrap()
    );
    let sm = function(|x: Sym| {
        let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    })
    .jit_compile(true);
    let x = common::f32s(
        &(0..24).map(|i| (i as f32).sin()).collect::<Vec<_>>(),
        &[4, 6],
    );
    let a = sm.call(&[x.clone()]).unwrap();
    println!(
        "{}",
        sm.compiler_ir(&[TensorSpec::known(DType::F32, &[4, 6])], IrStage::Fused)
            .unwrap()
    );
    let interp = function(|x: Sym| {
        let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    });
    let b = interp.call(&[x]).unwrap();
    common::assert_close(&a[0], &b[0], 1e-6, 1e-7, "softmax");
}

//! Matrix-vector products (`dot_general` with one output column): a fused
//! reduction in the default mode, the GEMM (bit-identical to the
//! interpreter) in exact mode.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;
use tensorlift::runtime::interp;
use tensorlift::{DType, Tensor};

fn data(n: usize, dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..n)
        .map(|i| ((i * 37 % 101) as f64 - 50.0) / 16.0)
        .collect();
    let lit = tensorlift::ir::Literal::from_scalars(
        dtype,
        &[n],
        &v.iter()
            .map(|x| tensorlift::ir::Scalar::Float(*x, None))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    Tensor::from_literal(&lit).unwrap()
}

#[test]
fn matrix_vector_products_are_reductions_and_agree_with_the_interpreter() {
    // (m, k) @ (k, 1), and a batched (b, m, k) @ (b, k, 1).
    let cases = [
        ("f32", 33, 70, None),
        ("f64", 64, 129, None),
        ("f32", 5, 17, Some(3)),
    ];
    for (dt, m, k, batch) in cases {
        let dtype = if dt == "f32" { DType::F32 } else { DType::F64 };
        let src = match batch {
            None => format!(
                "graph @mv {{\n  %a = parameter 0 : {dt}[{m},{k}]\n  %v = parameter 1 : {dt}[{k},1]\n  %y = dot_general(%a, %v) {{lhs_batch=[], rhs_batch=[], lhs_contract=[1], rhs_contract=[0]}} : {dt}[{m},1]\n  return %y as \"y\"\n}}\n"
            ),
            Some(b) => format!(
                "graph @mv {{\n  %a = parameter 0 : {dt}[{b},{m},{k}]\n  %v = parameter 1 : {dt}[{b},{k},1]\n  %y = dot_general(%a, %v) {{lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[1]}} : {dt}[{b},{m},1]\n  return %y as \"y\"\n}}\n"
            ),
        };
        let g = text::parse(&src, "mv.tlir").unwrap();
        let b = batch.unwrap_or(1);
        let a = data(b * m * k, dtype);
        let v = data(b * k, dtype);
        let a_dims: Vec<usize> = batch.map_or(vec![m, k], |b| vec![b, m, k]);
        let v_dims: Vec<usize> = batch.map_or(vec![k, 1], |b| vec![b, k, 1]);
        let inputs = [
            Tensor::from_bytes(dtype, &a_dims, a.bytes()).unwrap(),
            Tensor::from_bytes(dtype, &v_dims, v.bytes()).unwrap(),
        ];
        let want = interp::run(&g, &inputs).unwrap();
        let fast = compiler::compile(&g, &JitOptions::default()).unwrap();
        assert!(
            fast.fused_ir().contains("as a fused reduction"),
            "{}",
            fast.fused_ir()
        );
        let got = fast.run(&inputs).unwrap();
        common::assert_close(
            &got[0],
            &want[0],
            1e-5,
            1e-5,
            &format!("{dt} {m}x{k} b={b}"),
        );
        let exact = JitOptions {
            exact: true,
            ..Default::default()
        };
        let exe = compiler::compile(&g, &exact).unwrap();
        assert!(exe.fused_ir().contains("GEMM call"), "{}", exe.fused_ir());
        assert!(common::same_bits(&exe.run(&inputs).unwrap()[0], &want[0]));
    }
}

#[test]
fn sums_of_matrix_vector_products_keep_every_product() {
    // `a @ x + b @ y` with one output column (an RNN cell `W·x + U·h` of
    // column vectors): the add may not be fused into the second product
    // as an accumulating GEMM, since outside exact mode that product
    // becomes a reduction, which writes its sums (the compiled result was
    // `b @ y` alone). Also 1×1 and batched.
    use tensorlift::{Sym, function};
    let vals = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed * 11) % 23) as f32 / 8.0 - 1.0)
            .collect()
    };
    for (a_dims, x_dims, b_dims, y_dims) in [
        (vec![4, 3], vec![3, 1], vec![4, 2], vec![2, 1]),
        (vec![1, 1], vec![1, 1], vec![1, 1], vec![1, 1]),
        (vec![2, 4, 3], vec![2, 3, 1], vec![2, 4, 5], vec![2, 5, 1]),
    ] {
        let t = |d: &Vec<usize>, seed| common::f32s(&vals(d.iter().product(), seed), d);
        let inputs = [t(&a_dims, 1), t(&x_dims, 2), t(&b_dims, 3), t(&y_dims, 4)];
        let body = |a: Sym, x: Sym, b: Sym, y: Sym| a.matmul(&x) + b.matmul(&y);
        let want = function(body).call(&inputs).unwrap();
        let got = function(body).jit_compile(true).call(&inputs).unwrap();
        let (w, g) = (
            common::to_vec::<f32>(&want[0]),
            common::to_vec::<f32>(&got[0]),
        );
        assert!(
            w.iter()
                .zip(&g)
                .all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + a.abs())),
            "{a_dims:?}@{x_dims:?} + {b_dims:?}@{y_dims:?}: compiled {g:?}, interpreted {w:?}"
        );
    }
}

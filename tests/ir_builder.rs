//! The IR builder's loops and gradient helper, used from outside the
//! crates as a gradient rule or a Python front would: `fori_loop`, `scan`
//! (forward and reverse, stacked outputs) and `sum_to_shape`, run by the
//! interpreter and compiled, against values computed here; and their
//! errors, which name the op and the creation site.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use tensorlift::Tensor;
use tensorlift::ir::builder::{self, Elementwise};
use tensorlift::ir::{BinaryOp, DType, Graph, Op, Site, TensorType, ValueId};

fn arr(v: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
}

fn values(t: &Tensor) -> (Vec<usize>, Vec<f32>) {
    let a = t.to_ndarray::<f32>().unwrap();
    (a.shape().to_vec(), a.iter().copied().collect())
}

/// The graph's results interpreted and compiled, which must agree bit for
/// bit (these graphs add and multiply only, in the same order).
fn run_both(g: &Graph, inputs: &[Tensor]) -> Vec<(Vec<usize>, Vec<f32>)> {
    let interp = tensorlift::runtime::interp::run(g, inputs).unwrap();
    let exe = tensorlift::compiler::compile(g, &Default::default()).unwrap();
    let jit = exe.run(inputs).unwrap();
    assert_eq!(interp.len(), jit.len());
    for (a, b) in interp.iter().zip(&jit) {
        assert_eq!(values(a), values(b), "interpreter vs JIT");
    }
    interp.iter().map(values).collect()
}

fn param(g: &mut Graph, i: usize, dims: &[usize]) -> ValueId {
    let t = TensorType::known(DType::F32, dims);
    g.add_parameter(i, t, None, Site::caller()).unwrap()
}

fn add(g: &mut Graph, x: ValueId, y: ValueId) -> ValueId {
    builder::binary(g, Elementwise::Binary(BinaryOp::Add), x, y, &Site::caller()).unwrap()
}

#[test]
fn fori_loop_runs_upper_minus_lower_steps_with_the_counter() {
    for (lo, hi) in [(0, 0), (0, 1), (2, 7), (5, 3)] {
        let mut g = Graph::new("fori");
        let site = Site::caller();
        let x = param(&mut g, 0, &[3]);
        let lower = builder::constant(&mut g, DType::I32, f64::from(lo), &site).unwrap();
        let upper = builder::constant(&mut g, DType::I32, f64::from(hi), &site).unwrap();
        let out = builder::fori_loop(&mut g, lower, upper, &[x], &site, |r, i, c| {
            // x + float(i)
            let f = r.add(Op::Convert(DType::F32), &[i], site.clone())?;
            Ok(vec![builder::binary(
                r,
                Elementwise::Binary(BinaryOp::Add),
                c[0],
                f,
                &site,
            )?])
        })
        .unwrap();
        assert_eq!(out.len(), 1);
        g.add_output(out[0], "y").unwrap();
        let got = run_both(&g, &[arr(vec![1.0, 2.0, 3.0], &[3])]);
        let s: i32 = (lo..hi).sum();
        let want: Vec<f32> = [1.0, 2.0, 3.0].iter().map(|v| v + s as f32).collect();
        assert_eq!(got[0], (vec![3], want), "fori_loop({lo}, {hi})");
    }
}

#[test]
fn scan_carries_and_stacks_forward_and_reverse() {
    for reverse in [false, true] {
        let mut g = Graph::new("scan");
        let site = Site::caller();
        let init = param(&mut g, 0, &[2]);
        let xs = param(&mut g, 1, &[4, 2]);
        let out = builder::scan(&mut g, &[init], &[xs], None, reverse, &site, |r, c, x| {
            // carry' = carry + x_t; y_t = carry' * 2 (as carry' + carry').
            let next = builder::binary(r, Elementwise::Binary(BinaryOp::Add), c[0], x[0], &site)?;
            let y = builder::binary(r, Elementwise::Binary(BinaryOp::Add), next, next, &site)?;
            Ok((vec![next], vec![y]))
        })
        .unwrap();
        assert_eq!(out.len(), 2, "the carry, then one stacked y");
        g.add_output(out[0], "carry").unwrap();
        g.add_output(out[1], "ys").unwrap();
        let xs_v: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let got = run_both(
            &g,
            &[arr(vec![10.0, 20.0], &[2]), arr(xs_v.clone(), &[4, 2])],
        );
        // The same scan in plain Rust.
        let mut carry = [10.0f32, 20.0];
        let mut ys = vec![0.0f32; 8];
        let order: Vec<usize> = if reverse {
            (0..4).rev().collect()
        } else {
            (0..4).collect()
        };
        for t in order {
            for k in 0..2 {
                carry[k] += xs_v[t * 2 + k];
                ys[t * 2 + k] = carry[k] + carry[k];
            }
        }
        assert_eq!(
            got[0],
            (vec![2], carry.to_vec()),
            "carry, reverse={reverse}"
        );
        assert_eq!(got[1], (vec![4, 2], ys), "ys, reverse={reverse}");
    }
}

#[test]
fn a_scan_of_zero_steps_returns_its_init_and_empty_ys() {
    for reverse in [false, true] {
        let mut g = Graph::new("scan0");
        let site = Site::caller();
        let init = param(&mut g, 0, &[2]);
        let xs = param(&mut g, 1, &[0, 2]);
        let out = builder::scan(&mut g, &[init], &[xs], None, reverse, &site, |r, c, x| {
            let next = builder::binary(r, Elementwise::Binary(BinaryOp::Add), c[0], x[0], &site)?;
            Ok((vec![next], vec![next, x[0]]))
        })
        .unwrap();
        g.add_output(out[0], "carry").unwrap();
        g.add_output(out[1], "ys0").unwrap();
        g.add_output(out[2], "ys1").unwrap();
        let got = run_both(&g, &[arr(vec![10.0, 20.0], &[2]), arr(vec![], &[0, 2])]);
        assert_eq!(got[0], (vec![2], vec![10.0, 20.0]), "reverse={reverse}");
        assert_eq!(got[1], (vec![0, 2], vec![]), "reverse={reverse}");
        assert_eq!(got[2], (vec![0, 2], vec![]), "reverse={reverse}");
    }
}

#[test]
fn scan_with_a_length_and_no_xs() {
    let mut g = Graph::new("scan_len");
    let site = Site::caller();
    let init = param(&mut g, 0, &[]);
    let out = builder::scan(&mut g, &[init], &[], Some(3), false, &site, |r, c, _| {
        let next = add(r, c[0], c[0]);
        Ok((vec![next], vec![c[0]]))
    })
    .unwrap();
    g.add_output(out[0], "carry").unwrap();
    g.add_output(out[1], "ys").unwrap();
    let got = run_both(&g, &[arr(vec![1.5], &[])]);
    assert_eq!(got[0], (vec![], vec![12.0]));
    assert_eq!(got[1], (vec![3], vec![1.5, 3.0, 6.0]));
}

#[test]
fn sum_to_shape_undoes_broadcasting() {
    let cases: [(&[usize], &[usize]); 4] = [
        (&[2, 3, 4], &[3, 4]),
        (&[2, 3, 4], &[3, 1]),
        (&[2, 3, 4], &[]),
        (&[3, 4], &[3, 4]),
    ];
    for (from, to) in cases {
        let mut g = Graph::new("sum_to");
        let x = param(&mut g, 0, from);
        let y = builder::sum_to_shape(&mut g, x, to, &Site::caller()).unwrap();
        g.add_output(y, "y").unwrap();
        let n: usize = from.iter().product();
        let xs: Vec<f32> = (0..n).map(|v| v as f32).collect();
        let got = run_both(&g, &[arr(xs.clone(), from)]);
        // Reference: every element added to the target element it
        // broadcasts from.
        let m: usize = to.iter().product();
        let mut want = vec![0.0f32; m];
        let lead = from.len() - to.len();
        for (flat, v) in xs.iter().enumerate() {
            let mut rem = flat;
            let mut idx = vec![0; from.len()];
            for d in (0..from.len()).rev() {
                idx[d] = rem % from[d];
                rem /= from[d];
            }
            let mut t = 0;
            for (d, &s) in to.iter().enumerate() {
                t = t * s + if s == 1 { 0 } else { idx[lead + d] };
            }
            want[t] += v;
        }
        assert_eq!(got[0], (to.to_vec(), want), "{from:?} -> {to:?}");
    }
}

#[test]
fn builder_errors_name_the_op_and_the_site() {
    let mut g = Graph::new("bad");
    let site = Site::caller();
    let x = param(&mut g, 0, &[2, 3]);
    let e = builder::sum_to_shape(&mut g, x, &[4], &site).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("sum_to_shape") && msg.contains("f32[2,3]"),
        "{msg}"
    );
    assert!(msg.contains("ir_builder.rs"), "the site: {msg}");

    let f = builder::constant(&mut g, DType::F32, 0.0, &site).unwrap();
    let i = builder::constant(&mut g, DType::I32, 3.0, &site).unwrap();
    let e = builder::fori_loop(&mut g, f, i, &[x], &site, |_, _, c| Ok(c.to_vec())).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("fori_loop") && msg.contains("lower bound must be int32[]"),
        "{msg}"
    );

    let s = param(&mut g, 1, &[]);
    let e = builder::scan(&mut g, &[x], &[s], None, false, &site, |_, c, _| {
        Ok((c.to_vec(), vec![]))
    })
    .unwrap_err();
    assert!(e.to_string().contains("xs[0] is f32[]"), "{e}");
    let e = builder::scan(&mut g, &[x], &[], None, false, &site, |_, c, _| {
        Ok((c.to_vec(), vec![]))
    })
    .unwrap_err();
    assert!(e.to_string().contains("needs xs or a length"), "{e}");
    // A body whose carry changes type is the while op's error, naming it.
    let e = builder::scan(&mut g, &[x], &[], Some(2), false, &site, |r, c, _| {
        let t = r.add(Op::Convert(DType::F64), &[c[0]], Site::caller())?;
        Ok((vec![t], vec![]))
    })
    .unwrap_err();
    assert!(e.to_string().contains("f64"), "{e}");
}

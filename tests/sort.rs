//! `argsort`, `sort`, `top_k` and `take_along_axis` from the Rust API,
//! interpreted and compiled, against orders computed here in Rust; their
//! gradients against finite differences; their errors. (Every dtype is in
//! the NumPy fixtures, tests/fixtures/gen_ops.py.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{Code, DType, GradCheck, Sym, Tensor, check_grads, function};

fn i32s(v: &[i32], dims: &[usize]) -> Tensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    Tensor::from_bytes(DType::I32, dims, &b).unwrap()
}

fn f64s(v: &[f64], dims: &[usize]) -> Tensor {
    let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    Tensor::from_bytes(DType::F64, dims, &b).unwrap()
}

/// A stable order of `row`: NaN above every number, -0.0 equal to 0.0.
fn order(row: &[f32], descending: bool) -> Vec<i32> {
    let key = |v: f32| if v.is_nan() { (1, 0.0) } else { (0, v + 0.0) };
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| {
        let (ka, kb) = (key(row[a]), key(row[b]));
        let o = ka.0.cmp(&kb.0).then(ka.1.partial_cmp(&kb.1).unwrap());
        if descending { o.reverse() } else { o }
    });
    idx.into_iter().map(|i| i as i32).collect()
}

/// Rows of values with many ties, NaNs, infinities and signed zeros.
fn awkward(rows: usize, n: usize) -> Vec<f32> {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0];
    (0..rows * n)
        .map(|i| {
            let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            if h.is_multiple_of(7) {
                special[(h / 7) as usize % special.len()]
            } else {
                (h % 23) as f32 - 11.0
            }
        })
        .collect()
}

#[test]
fn argsort_sort_and_top_k_agree_with_a_stable_sort_in_both_modes() {
    // 300 rows of 517: several parts on the pool's threads; 3 rows; one
    // row of 300,000 (split into runs over the threads, then merged).
    for (rows, n) in [(3, 9), (300, 517), (1, 300_000)] {
        let x = awkward(rows, n);
        let want_asc: Vec<i32> = x.chunks(n).flat_map(|r| order(r, false)).collect();
        let want_desc: Vec<i32> = x.chunks(n).flat_map(|r| order(r, true)).collect();
        for jit in [false, true] {
            let f = function(|x: Sym| {
                let (v, i) = x.top_k(3);
                vec![
                    x.argsort(-1, false),
                    x.argsort(1, true),
                    x.sort(1, false),
                    v,
                    i,
                ]
            })
            .jit_compile(jit);
            let out = f.call(&[common::f32s(&x, &[rows, n])]).unwrap();
            assert_eq!(common::to_vec::<i32>(&out[0]), want_asc, "jit {jit}");
            assert_eq!(common::to_vec::<i32>(&out[1]), want_desc, "jit {jit}");
            let sorted = common::to_vec::<f32>(&out[2]);
            let top_v = common::to_vec::<f32>(&out[3]);
            let top_i = common::to_vec::<i32>(&out[4]);
            for r in 0..rows {
                let row = &x[r * n..(r + 1) * n];
                for j in 0..n {
                    let w = row[want_asc[r * n + j] as usize];
                    assert_eq!(sorted[r * n + j].to_bits(), w.to_bits(), "jit {jit}");
                }
                assert_eq!(&top_i[r * 3..r * 3 + 3], &want_desc[r * n..r * n + 3]);
                for j in 0..3 {
                    let w = row[want_desc[r * n + j] as usize];
                    assert_eq!(top_v[r * 3 + j].to_bits(), w.to_bits(), "jit {jit}");
                }
            }
        }
    }
}

#[test]
fn argsort_along_a_leading_axis_and_of_integers() {
    // Columns of a [5, 4] int32 tensor with ties; i32::MIN and MAX.
    let x = [
        3,
        i32::MIN,
        7,
        0, //
        -1,
        5,
        7,
        i32::MAX, //
        3,
        5,
        -7,
        0, //
        i32::MIN,
        2,
        7,
        -3, //
        -1,
        5,
        0,
        0,
    ];
    let col = |c: usize| -> Vec<i32> { (0..5).map(|r| x[r * 4 + c]).collect() };
    for jit in [false, true] {
        let f = function(|x: Sym| vec![x.argsort(0, false), x.argsort(-2, true)]).jit_compile(jit);
        let out = f.call(&[i32s(&x, &[5, 4])]).unwrap();
        let (asc, desc) = (
            common::to_vec::<i32>(&out[0]),
            common::to_vec::<i32>(&out[1]),
        );
        for c in 0..4 {
            let values = col(c);
            let mut a: Vec<usize> = (0..5).collect();
            a.sort_by_key(|&r| values[r]);
            let mut d: Vec<usize> = (0..5).collect();
            d.sort_by_key(|&r| std::cmp::Reverse(values[r]));
            for r in 0..5 {
                assert_eq!(asc[r * 4 + c] as usize, a[r], "jit {jit} column {c}");
                assert_eq!(desc[r * 4 + c] as usize, d[r], "jit {jit} column {c}");
            }
        }
    }
}

#[test]
fn gradients_of_sort_and_top_k_go_back_to_where_each_element_came_from() {
    // Distinct values: sort is differentiable there.
    let x: Vec<f64> = (0..24)
        .map(|i| ((i * 7) % 24) as f64 * 0.37 - 3.0)
        .collect();
    let w: Vec<f64> = (0..24).map(|i| (i as f64 * 0.11).sin()).collect();
    let wk: Vec<f64> = w[..8].to_vec();
    for jit in [false, true] {
        let f = function(|x: Sym, w: Sym, wk: Sym| {
            let (top, _) = x.top_k(2);
            (x.sort(0, true) * &w).reduce_sum(None, false)
                + (top * wk.reshape(&[4, 2])).reduce_sum(None, false)
        })
        .jit_compile(jit);
        let inputs = [f64s(&x, &[4, 6]), f64s(&w, &[4, 6]), f64s(&wk, &[8])];
        check_grads(&f, &inputs, &[0], &GradCheck::default()).unwrap();
        // Analytically: d/dx[i] of Σ w·sort(x) is the w at x[i]'s place.
        let g = f.grad(&[0]).call(&inputs).unwrap();
        let g = common::to_vec::<f64>(&g[0]);
        for c in 0..6 {
            let mut rows: Vec<usize> = (0..4).collect();
            rows.sort_by(|&a, &b| x[b * 6 + c].partial_cmp(&x[a * 6 + c]).unwrap());
            for (k, &r) in rows.iter().enumerate() {
                let mut want = w[k * 6 + c];
                let row = &x[r * 6..r * 6 + 6];
                let rank = row.iter().filter(|&&v| v > row[c]).count();
                if rank < 2 {
                    want += wk[r * 2 + rank];
                }
                assert!((g[r * 6 + c] - want).abs() < 1e-12, "jit {jit}");
            }
        }
    }
}

#[test]
fn take_along_axis_gathers_per_row() {
    let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let idx = [2, 0, 0, 1, 3, 3];
    for jit in [false, true] {
        let f = function(|x: Sym, i: Sym| x.take_along_axis(&i, 1)).jit_compile(jit);
        let y = f
            .call(&[common::f32s(&x, &[3, 4]), i32s(&idx, &[3, 2])])
            .unwrap();
        assert_eq!(y[0].shape(), &[3, 2]);
        assert_eq!(
            common::to_vec::<f32>(&y[0]),
            vec![2.0, 0.0, 4.0, 5.0, 11.0, 11.0]
        );
    }
}

#[test]
fn bad_sorts_name_the_op_and_the_line() {
    let message = |f: tensorlift::Function, inputs: &[Tensor]| {
        let e = f.call(inputs).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        e.to_string()
    };
    let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
    let e = message(function(|x: Sym| x.top_k(4).0), std::slice::from_ref(&x));
    assert!(
        e.contains("top_k")
            && e.contains("k = 4 is more than the 3 elements")
            && e.contains("sort.rs"),
        "{e}"
    );
    let e = message(
        function(|x: Sym| x.argsort(1, false)),
        std::slice::from_ref(&x),
    );
    assert!(e.contains("argsort") && e.contains("axis 1"), "{e}");
    let e = message(
        function(|x: Sym, i: Sym| x.take_along_axis(&i, 0)),
        &[x.clone(), common::f32s(&[0.0], &[1])],
    );
    assert!(e.contains("must be integers"), "{e}");
    let c = Tensor::from_bytes(DType::C64, &[1], &[0; 8]).unwrap();
    let e = message(function(|x: Sym| x.argsort(0, false)), &[c]);
    assert!(
        e.contains("argsort needs a bool, integer or real float operand, got complex64"),
        "{e}"
    );
}

#[test]
fn sorting_empty_rows_and_single_elements() {
    for jit in [false, true] {
        let f = function(|x: Sym| vec![x.argsort(1, false), x.sort(0, true)]).jit_compile(jit);
        let out = f.call(&[common::f32s(&[], &[2, 0])]).unwrap();
        assert_eq!(out[0].shape(), &[2, 0]);
        assert_eq!(out[1].shape(), &[2, 0]);
        let out = f.call(&[common::f32s(&[5.0], &[1, 1])]).unwrap();
        assert_eq!(common::to_vec::<i32>(&out[0]), vec![0]);
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![5.0]);
    }
}

#[test]
fn take_along_a_middle_axis() {
    // (2, 3, 4) along axis 1: the positions of the dims before the axis
    // were multiplied by its stride too ("indices[4] = 52 is not in [0, 24)").
    let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let idx: Vec<i32> = (0..24i32).map(|i| i * 7 % 3).collect();
    for jit in [false, true] {
        let f = function(|x: Sym, i: Sym| x.take_along_axis(&i, 1)).jit_compile(jit);
        let y = f
            .call(&[common::f32s(&x, &[2, 3, 4]), i32s(&idx, &[2, 3, 4])])
            .unwrap();
        let got = common::to_vec::<f32>(&y[0]);
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..4 {
                    let k = (a * 3 + b) * 4 + c;
                    let want = x[(a * 3 + idx[k] as usize) * 4 + c];
                    assert_eq!(got[k], want, "jit {jit} at {a},{b},{c}");
                }
            }
        }
        let f = function(|x: Sym| x.sort(1, true)).jit_compile(jit);
        let y = f.call(&[common::f32s(&x, &[2, 3, 4])]).unwrap();
        let got = common::to_vec::<f32>(&y[0]);
        assert_eq!(&got[..4], &[8.0, 9.0, 10.0, 11.0], "jit {jit}");
    }
}

#[test]
fn the_gradient_of_a_set_scatter_reaches_only_the_updates_that_land() {
    // Updates 0 and 2 both write row 1: the later one lands, the earlier
    // is overwritten and gets no gradient (it got the row's cotangent);
    // update 3 is out of range and gets none.
    let x = common::f32s(&[0.0; 8], &[4, 2]);
    let upd: Vec<f32> = (0..8).map(|i| i as f32).collect();
    for jit in [false, true] {
        let f = function(|x: Sym, u: Sym, i: Sym, w: Sym| {
            (x.scatter(&i, &u, 0, tensorlift::ir::Combiner::Set) * &w).reduce_sum(None, false)
        })
        .jit_compile(jit);
        let w: Vec<f32> = (0..8).map(|i| 1.0 + i as f32).collect();
        let g = f
            .grad(&[0, 1])
            .call(&[
                x.clone(),
                common::f32s(&upd, &[4, 2]),
                i32s(&[1, 3, 1, 7], &[4]),
                common::f32s(&w, &[4, 2]),
            ])
            .unwrap();
        assert_eq!(
            common::to_vec::<f32>(&g[0]),
            vec![1.0, 2.0, 0.0, 0.0, 5.0, 6.0, 0.0, 0.0],
            "jit {jit}: x"
        );
        assert_eq!(
            common::to_vec::<f32>(&g[1]),
            vec![0.0, 0.0, 7.0, 8.0, 3.0, 4.0, 0.0, 0.0],
            "jit {jit}: updates"
        );
    }
}

#[test]
fn a_compiled_sort_gathers_from_its_input_without_copies() {
    // The gather's table was a reshape of the input copied into a buffer
    // of its own, and the take a runtime kernel copying element by
    // element: now a kernel gathers straight from the input's buffer.
    let f = function(|x: Sym| x.sort(-1, false)).jit_compile(true);
    let fused = f
        .compiler_ir(
            &[tensorlift::TensorSpec::known(DType::F32, &[64, 32])],
            tensorlift::IrStage::Fused,
        )
        .unwrap();
    assert!(
        fused.contains("kernel 'take'")
            && fused.contains("gather slot 0 f32")
            && !fused.contains("kernel 'reshape'"),
        "{fused}"
    );
}

#[test]
fn take_along_axis_refuses_an_index_outside_its_line() {
    // An index past the line (or negative, or an i64 that wrapped in the
    // conversion to i32) read an element of another row without error.
    let x = common::f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    let i64s = |v: &[i64]| {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        Tensor::from_bytes(DType::I64, &[2, 1], &b).unwrap()
    };
    for jit in [false, true] {
        let f = function(|x: Sym, i: Sym| x.take_along_axis(&i, 1)).jit_compile(jit);
        for bad in [i32s(&[3, 0], &[2, 1]), i32s(&[0, -1], &[2, 1])] {
            let e = f.call(&[x.clone(), bad]).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "jit {jit}: {e}");
            assert!(e.to_string().contains("is not in [0, 6)"), "jit {jit}: {e}");
        }
        let e = f.call(&[x.clone(), i64s(&[(1 << 32) + 1, 0])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "jit {jit}: {e}");
        let y = f.call(&[x.clone(), i32s(&[2, 0], &[2, 1])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&y[0]), vec![2.0, 3.0], "jit {jit}");
    }
}

#[test]
fn sort_and_top_k_of_dims_known_only_when_the_function_runs() {
    // [None, 4] (a batch of any size): sort and top_k needed every dim
    // static ("top_k needs a static shape"), where argsort took any.
    for jit in [false, true] {
        let f = function(|x: Sym| {
            let (v, i) = x.top_k(2);
            vec![x.sort(1, false), v, i]
        })
        .input_signature(vec![tensorlift::TensorSpec::new(
            DType::F32,
            &[None, Some(4)],
        )])
        .jit_compile(jit);
        for rows in [1usize, 3] {
            let x: Vec<f32> = (0..rows * 4).map(|i| ((i * 5) % 7) as f32).collect();
            let out = f.call(&[common::f32s(&x, &[rows, 4])]).unwrap();
            let (sorted, top_v, top_i) = (
                common::to_vec::<f32>(&out[0]),
                common::to_vec::<f32>(&out[1]),
                common::to_vec::<i32>(&out[2]),
            );
            for r in 0..rows {
                let row = &x[r * 4..r * 4 + 4];
                let mut want = row.to_vec();
                want.sort_by(|a, b| a.partial_cmp(b).unwrap());
                assert_eq!(&sorted[r * 4..r * 4 + 4], &want[..], "jit {jit}");
                let desc = order(row, true);
                assert_eq!(&top_i[r * 2..r * 2 + 2], &desc[..2], "jit {jit}");
                assert_eq!(top_v[r * 2], row[desc[0] as usize], "jit {jit}");
            }
        }
    }
}

//! Defects a new user of the Rust API found porting models from a
//! separate crate (2026-11-28): errors that named internal ops or pointed
//! the wrong way. Each test failed before its fix.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::{
    Code, DType, Sym, Tensor, TensorSpec, cond, custom_vjp, fori_loop, function, switch,
};

fn f32s(v: &[f32]) -> Tensor {
    common::f32s(v, &[v.len()])
}

fn scalar_i64(v: i64) -> Tensor {
    Tensor::from_bytes(DType::I64, &[], &v.to_ne_bytes()).unwrap()
}

#[test]
fn fori_loop_bounds_take_a_traced_bounds_dtype_or_say_what_is_wrong() {
    // A traced i64 bound beside a Rust literal: the index is i64 (it was an
    // error about an internal compare_lt of i32 and i64).
    for jit in [false, true] {
        let f =
            function(|x: Sym, n: Sym| fori_loop(0, &n, |_, c| vec![&c[0] + 1.0], &[x]).remove(0))
                .jit_compile(jit);
        let y = f.call(&[f32s(&[0.5]), scalar_i64(3)]).unwrap();
        assert_eq!(common::to_vec::<f32>(&y[0]), vec![3.5], "jit {jit}");
    }
    let message = |f: tensorlift::Function, inputs: &[Tensor]| {
        let e = f.call(inputs).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        e.to_string()
    };
    let e = message(
        function(|x: Sym, n: Sym| fori_loop(0, &n, |_, c| vec![&c[0] + 1.0], &[x]).remove(0)),
        &[f32s(&[0.5]), common::f32s(&[3.0], &[])],
    );
    assert!(
        e.contains("fori_loop 'fori_loop'")
            && e.contains("the upper bound is f32[], but the bounds are integer scalars")
            && e.contains("api_reports.rs"),
        "{e}"
    );
    let e = message(
        function(|x: Sym| fori_loop(2.5, 5, |_, c| vec![&c[0] + 1.0], &[x]).remove(0)),
        &[f32s(&[0.5])],
    );
    assert!(e.contains("the lower bound 2.5 is not an integer"), "{e}");
    let e = message(
        function(|x: Sym| fori_loop(0, 3_000_000_000i64, |_, c| vec![&c[0] + 1.0], &[x]).remove(0)),
        &[f32s(&[0.5])],
    );
    assert!(
        e.contains("the upper bound 3000000000 does not fit the loop index's dtype int32"),
        "{e}"
    );
}

#[test]
fn cond_errors_name_its_branches_as_written() {
    let f = function(|x: Sym| {
        cond(
            &x.reduce_sum(None, false)
                .greater(x.graph().scalar(DType::F32, 0.0)),
            |a| vec![&a[0] * 2.0],
            |a| vec![a[0].cast(DType::I32)],
            &[x],
        )
        .remove(0)
    });
    let e = f.call(&[f32s(&[1.0])]).unwrap_err().to_string();
    assert!(
        e.contains("cond 'case")
            && e.contains("true_fn returns [f32[1]], but false_fn returns [i32[1]]"),
        "{e}"
    );
    let g = function(|x: Sym| {
        let i = x.graph().scalar(DType::I32, 1.0);
        switch(
            &i,
            &[&|a: &[Sym]| vec![&a[0] * 2.0], &|a: &[Sym]| {
                vec![a[0].cast(DType::I32)]
            }],
            &[x],
        )
        .remove(0)
    });
    let e = g.call(&[f32s(&[1.0])]).unwrap_err().to_string();
    assert!(
        e.contains("branch 1 returns [i32[1]], but branch 0 returns [f32[1]]"),
        "{e}"
    );
}

#[test]
fn compiled_function_input_errors_name_the_function() {
    let c = function(|x: Sym, y: Sym| &x + &y)
        .jit_compile(true)
        .compile(&[
            TensorSpec::known(DType::F32, &[2]),
            TensorSpec::known(DType::F32, &[2]),
        ])
        .unwrap();
    let e = c.call(&[f32s(&[1.0, 2.0])]).unwrap_err().to_string();
    assert!(
        e.contains("compiled function 'function' (defined at") && e.contains("api_reports.rs"),
        "{e}"
    );
    let y64 = Tensor::from_bytes(DType::F64, &[2], &[0u8; 16]).unwrap();
    let e = c.call(&[f32s(&[1.0, 2.0]), y64]).unwrap_err().to_string();
    assert!(e.contains("input 1 of compiled function 'function'"), "{e}");
}

#[test]
fn an_undeclared_callback_shape_in_a_compiled_loop_says_to_declare_it() {
    let f = function(|x: Sym| {
        fori_loop(
            0,
            3,
            |_, c| {
                let y = c[0].graph().host_fn(
                    |ins: &[Tensor]| Ok(vec![ins[0].clone()]),
                    &[&c[0]],
                    &[DType::F32],
                    false,
                );
                vec![(&y[0] + 1.0).reshape(&[2])]
            },
            &[x],
        )
        .remove(0)
    });
    let x = f32s(&[1.0, 2.0]);
    let y = f.call(std::slice::from_ref(&x)).unwrap();
    assert_eq!(common::to_vec::<f32>(&y[0]), vec![4.0, 5.0]);
    let e = f.jit_compile(true).call(&[x]).unwrap_err().to_string();
    assert!(
        e.contains("a callback's result needs a declared shape (set_shape, host_fn_with"),
        "{e}"
    );
}

#[test]
fn forward_mode_of_a_callback_taking_the_cotangent_says_why() {
    let f = function(|x: Sym| {
        custom_vjp(
            |a| vec![a[0].sin()],
            |a, _o, ct| {
                let d = a[0].graph().host_fn(
                    |ins: &[Tensor]| Ok(vec![ins[1].clone()]),
                    &[&a[0], &ct[0]],
                    &[DType::F32],
                    false,
                );
                vec![d[0].set_shape(&[Some(3)])]
            },
            &[x],
        )
        .remove(0)
    });
    let e = f
        .jvp(&[0])
        .call(&[f32s(&[1.0, 2.0, 3.0]), f32s(&[1.0; 3])])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("forward mode (jvp) transposes the reverse mode"),
        "{e}"
    );
    // Reverse mode works.
    assert!(
        f.vjp(&[0])
            .call(&[f32s(&[1.0, 2.0, 3.0]), f32s(&[1.0; 3])])
            .is_ok()
    );
}

#[test]
fn a_body_returns_tuples_of_up_to_eight_values() {
    let f = function(|x: Sym| (&x + 1.0, &x + 2.0, &x + 3.0, &x + 4.0));
    let y = f.call(&[f32s(&[1.0])]).unwrap();
    let got: Vec<f32> = y.iter().flat_map(common::to_vec::<f32>).collect();
    assert_eq!(got, vec![2.0, 3.0, 4.0, 5.0]);
    let g = function(|x: Sym| {
        (
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            &x * 8.0,
        )
    });
    let y = g.call(&[f32s(&[1.0])]).unwrap();
    assert_eq!(common::to_vec::<f32>(&y[7]), vec![8.0]);
}

#[test]
fn matmul_broadcasts_batch_dims_as_numpy_does() {
    // `[B, S, E] @ [E, E]` was "batch ranks must match" (the Python
    // package had its own broadcasting; now the builder's).
    let data = |n: usize, seed: f32| -> Vec<f32> {
        (0..n).map(|i| ((i as f32) * 0.37 + seed).sin()).collect()
    };
    let (xa, ya) = (data(2 * 5 * 4, 0.1), data(3 * 4 * 6, 0.7));
    for jit in [false, true] {
        let f = function(|x: Sym, y: Sym| x.matmul(&y)).jit_compile(jit);
        // [2, 1, 5, 4] @ [3, 4, 6] -> [2, 3, 5, 6].
        let y = f
            .call(&[
                common::f32s(&xa, &[2, 1, 5, 4]),
                common::f32s(&ya, &[3, 4, 6]),
            ])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 3, 5, 6]);
        let got = common::to_vec::<f32>(&y[0]);
        for (bi, bj, r, c) in [(0, 0, 0, 0), (1, 2, 4, 5), (1, 1, 2, 3)] {
            let want: f32 = (0..4)
                .map(|k| xa[bi * 20 + r * 4 + k] * ya[bj * 24 + k * 6 + c])
                .sum();
            let at = ((bi * 3 + bj) * 5 + r) * 6 + c;
            assert!(
                (got[at] - want).abs() < 1e-5,
                "jit {jit}: {} vs {want}",
                got[at]
            );
        }
        // [2, 5, 4] @ [4, 6] contracts without a batch.
        let y = f
            .call(&[
                common::f32s(&xa, &[2, 5, 4]),
                common::f32s(&ya[..24], &[4, 6]),
            ])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 5, 6]);
    }
    let f = function(|x: Sym, y: Sym| x.matmul(&y));
    let e = f
        .call(&[
            common::f32s(&xa[..32], &[2, 4, 4]),
            common::f32s(&ya[..48], &[3, 4, 4]),
        ])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the batch dims do not broadcast") && e.contains("api_reports.rs"),
        "{e}"
    );
}

#[test]
fn buffers_too_large_for_the_machine_name_the_op_that_needs_them() {
    // 2^46 f32s: more than any machine this runs on. The interpreter named
    // the op; the JIT said only "this program's buffers needs N bytes".
    for jit in [false, true] {
        let f = function(|x: Sym| {
            x.broadcast_to(&[1 << 20, 1 << 20, 16])
                .reduce_sum(None, false)
        })
        .jit_compile(jit);
        let e = f.call(&[f32s(&[1.0])]).unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e}");
        let e = e.to_string();
        assert!(
            e.contains("broadcast_in_dim") && e.contains("api_reports.rs"),
            "jit {jit}: {e}"
        );
        if jit {
            assert!(
                e.contains("the largest buffer, f32[1048576,1048576,16]"),
                "{e}"
            );
        }
    }
}

#[test]
fn a_pad_whose_size_overflows_says_so() {
    // low + high + size wrapped around and read "a negative size".
    for jit in [false, true] {
        let f = function(|x: Sym| x.pad(&[i64::MAX], &[1], &[0], 0.0)).jit_compile(jit);
        let e = f.call(&[f32s(&[1.0])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        let e = e.to_string();
        assert!(
            e.contains("overflows a 64-bit size") && e.contains("api_reports.rs"),
            "{e}"
        );
    }
}

#[test]
fn a_bad_wrt_names_the_line_that_asked_for_the_gradient() {
    let f = function(|x: Sym| x.reduce_sum(None, false));
    let g = f.grad(&[3]);
    let line = line!() - 1;
    let e = g.call(&[f32s(&[1.0])]).unwrap_err().to_string();
    assert!(
        e.contains(&format!("taken at tests/api_reports.rs:{line}:"))
            && e.contains("wrt[0] is 3, but the function has 1 input(s)"),
        "{e}"
    );
    let e = f
        .vjp(&[0, 0])
        .call(&[f32s(&[1.0]), f32s(&[1.0])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("vjp of function 'function'"), "{e}");
}

#[test]
fn strided_slices_follow_python_on_dims_of_unknown_size() {
    // x[-5:], x[::-2], x[1:-1] of a dim whose size is known only when the
    // function runs: clamped as Python (and TensorFlow's strided_slice) do.
    let cases: [(Option<i64>, Option<i64>, i64); 4] = [
        (Some(-5), None, 1),
        (None, None, -2),
        (Some(1), Some(-1), 1),
        (Some(10), None, 1),
    ];
    for jit in [false, true] {
        for (b, e, s) in cases {
            let f = function(move |x: Sym| x.strided_slice(&[b], &[e], &[s]))
                .input_signature(vec![TensorSpec::new(DType::F32, &[None])])
                .jit_compile(jit);
            for n in [0usize, 1, 3, 7] {
                let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
                let got = common::to_vec::<f32>(&f.call(&[f32s(&x)]).unwrap()[0]);
                // Python's slice, by hand.
                let n = n as i64;
                let norm = |v: i64| if v < 0 { v + n } else { v };
                let want: Vec<f32> = if s > 0 {
                    let lo = b.map_or(0, norm).clamp(0, n);
                    let hi = e.map_or(n, norm).clamp(0, n);
                    (lo..hi).step_by(s as usize).map(|i| i as f32).collect()
                } else {
                    let lo = b.map_or(n - 1, norm).clamp(-1, n - 1);
                    let hi = e.map_or(-1, norm).clamp(-1, n - 1);
                    let mut v = vec![];
                    let mut i = lo;
                    while i > hi {
                        v.push(i as f32);
                        i += s;
                    }
                    v
                };
                assert_eq!(got, want, "jit {jit}, [{b:?}:{e:?}:{s}] of {n}");
            }
        }
    }
    // The traced op prints and parses back.
    let f = function(|x: Sym| x.strided_slice(&[Some(-5)], &[None], &[2]));
    let text = f
        .compiler_ir(
            &[TensorSpec::new(DType::F32, &[None])],
            tensorlift::IrStage::Traced,
        )
        .unwrap();
    assert!(
        text.contains("unranked_strided_slice") && text.contains("begin=[-5], end=[?], step=[2]"),
        "{text}"
    );
    let g = tensorlift::ir::text::parse(&text, "traced").unwrap();
    assert_eq!(tensorlift::ir::text::print(&g), text);
}

#[test]
fn a_scan_that_fails_before_its_body_gives_poisoned_ys_not_a_panic() {
    // The body never traced, so scan returned no ys and the caller's
    // ys[0] panicked (the call's Err came from the caught panic).
    let g = function(|c: Sym, xs: Sym| {
        let (carry, ys) = tensorlift::scan(
            |c, x| (vec![&c[0] + &x[0]], vec![x[0].clone()]),
            &[c],
            &[xs],
            None,
            false,
        );
        assert_eq!(ys.len(), 1);
        vec![carry[0].clone(), ys[0].clone()]
    })
    .input_signature(vec![
        TensorSpec::known(DType::F32, &[5]),
        TensorSpec::new(DType::F32, &[None, Some(5)]),
    ]);
    let e = g
        .call(&[f32s(&[0.0; 5]), common::f32s(&[1.0; 10], &[2, 5])])
        .unwrap_err();
    assert!(e.to_string().contains("scan needs the leading dim"), "{e}");
    assert!(!e.to_string().contains("panicked"), "{e}");
}

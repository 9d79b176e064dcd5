//! Control flow through the public API, interpreted and compiled: loops
//! with data-dependent trip counts (0, 1, many iterations), branches,
//! captured values, nesting, callbacks inside bodies, trace errors, and
//! the text format with regions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::sync::{Arc, Mutex};

use tensorlift::ir::text;
use tensorlift::{
    Code, Combiner, DType, DotDims, Error, Function, IrStage, Sym, Tensor, TensorSpec, cond,
    fori_loop, function, switch, while_loop,
};

fn both(f: impl Fn() -> Function) -> [Function; 2] {
    [f(), f().jit_compile(true)]
}

fn i32s(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from_bytes(
        DType::I32,
        shape,
        &v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<_>>(),
    )
    .unwrap()
}

fn scalar_i32(v: i32) -> Tensor {
    i32s(&[v], &[])
}

/// `acc = acc * 2 + x` while `i < n`: `x` and `n` are captured inputs.
fn doubling_loop() -> impl Fn(Sym, Sym) -> Vec<Sym> + Send + Sync + 'static {
    |x: Sym, n: Sym| {
        let g = x.graph();
        let i0 = g.scalar(DType::I32, 0.0);
        let acc0 = x.clone();
        while_loop(
            |c| c[0].less(&n),
            |c| vec![&c[0] + 1, &c[1] * 2.0 + &x],
            &[i0, acc0],
        )
    }
}

fn doubling_expected(x: &[f32], n: i32) -> (i32, Vec<f32>) {
    let mut acc = x.to_vec();
    let mut i = 0;
    while i < n {
        for (a, v) in acc.iter_mut().zip(x) {
            *a = *a * 2.0 + v;
        }
        i += 1;
    }
    (i, acc)
}

#[test]
fn a_while_loop_runs_zero_one_and_many_iterations() {
    let x = [1.0f32, -2.0, 0.5];
    for f in both(|| function(doubling_loop())) {
        for n in [0, 1, 7, -3] {
            let out = f.call(&[common::f32s(&x, &[3]), scalar_i32(n)]).unwrap();
            let (i, acc) = doubling_expected(&x, n);
            assert_eq!(common::to_vec::<i32>(&out[0]), vec![i], "n = {n}");
            assert_eq!(common::to_vec::<f32>(&out[1]), acc, "n = {n}");
        }
    }
}

#[test]
fn fori_loop_counts_with_captured_bounds_and_values() {
    // sum_{i=lo}^{hi-1} i * x
    for f in both(|| {
        function(|x: Sym, hi: Sym| {
            let zero = &x * 0.0;
            fori_loop(
                2,
                &hi,
                |i, c| vec![&c[0] + &x * i.cast(DType::F32)],
                &[zero],
            )
        })
    }) {
        for hi in [0, 2, 3, 10] {
            let out = f
                .call(&[common::f32s(&[1.0, 0.5], &[2]), scalar_i32(hi)])
                .unwrap();
            let s: f32 = (2..hi.max(2)).map(|i| i as f32).sum();
            assert_eq!(
                common::to_vec::<f32>(&out[0]),
                vec![s, s * 0.5],
                "hi = {hi}"
            );
        }
    }
}

#[test]
fn nested_loops_capture_the_outer_carry() {
    // for i in 0..n: for j in 0..i: acc += 1  →  n(n-1)/2
    for f in both(|| {
        function(|n: Sym| {
            let acc = n.graph().scalar(DType::F32, 0.0);
            fori_loop(
                0,
                &n,
                |i, c| fori_loop(0, i, |_, d| vec![&d[0] + 1.0], &[c[0].clone()]),
                &[acc],
            )
        })
    }) {
        for n in [0, 1, 5] {
            let out = f.call(&[scalar_i32(n)]).unwrap();
            assert_eq!(
                common::to_vec::<f32>(&out[0]),
                vec![(n * (n - 1) / 2) as f32],
                "n = {n}"
            );
        }
    }
}

#[test]
fn cond_runs_only_the_branch_taken() {
    let calls: Arc<Mutex<Vec<&'static str>>> = Arc::new(Mutex::new(Vec::new()));
    let make = |calls: Arc<Mutex<Vec<&'static str>>>| {
        function(move |x: Sym, p: Sym| {
            let (ct, cf) = (calls.clone(), calls.clone());
            cond(
                &p,
                move |a| {
                    let ct = ct.clone();
                    a[0].graph()
                        .host_fn(
                            move |ins: &[Tensor]| {
                                ct.lock().unwrap().push("true");
                                Ok(vec![ins[0].clone()])
                            },
                            &[&(&a[0] + 1.0)],
                            &[DType::F32],
                            true,
                        )
                        .iter()
                        .map(|s| s.set_shape(&[Some(2)]))
                        .collect()
                },
                move |a| {
                    let cf = cf.clone();
                    a[0].graph()
                        .host_fn(
                            move |ins: &[Tensor]| {
                                cf.lock().unwrap().push("false");
                                Ok(vec![ins[0].clone()])
                            },
                            &[&(&a[0] - 1.0)],
                            &[DType::F32],
                            true,
                        )
                        .iter()
                        .map(|s| s.set_shape(&[Some(2)]))
                        .collect()
                },
                &[x],
            )
        })
    };
    for f in [make(calls.clone()), make(calls.clone()).jit_compile(true)] {
        calls.lock().unwrap().clear();
        let x = common::f32s(&[1.0, 2.0], &[2]);
        let t = f
            .call(&[
                x.clone(),
                Tensor::from_bytes(DType::Bool, &[], &[1]).unwrap(),
            ])
            .unwrap();
        let e = f
            .call(&[x, Tensor::from_bytes(DType::Bool, &[], &[0]).unwrap()])
            .unwrap();
        assert_eq!(common::to_vec::<f32>(&t[0]), vec![2.0, 3.0]);
        assert_eq!(common::to_vec::<f32>(&e[0]), vec![0.0, 1.0]);
        assert_eq!(*calls.lock().unwrap(), vec!["true", "false"]);
    }
}

#[test]
fn switch_clamps_its_index_to_the_last_branch() {
    for f in both(|| {
        function(|x: Sym, k: Sym| {
            let y = &x * 10.0;
            switch(
                &k,
                &[
                    &|a: &[Sym]| vec![&a[0] + 1.0],
                    &|a: &[Sym]| vec![&a[0] * 2.0],
                    // Captures a value of the enclosing function.
                    &|a: &[Sym]| vec![&a[0] - &y],
                ],
                std::slice::from_ref(&x),
            )
        })
    }) {
        let x = common::f32s(&[1.0, 2.0], &[2]);
        let want = |k: i32| match k {
            0 => vec![2.0, 3.0],
            1 => vec![2.0, 4.0],
            _ => vec![-9.0, -18.0],
        };
        for k in [0, 1, 2, 3, -1, i32::MIN] {
            let out = f.call(&[x.clone(), scalar_i32(k)]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want(k), "k = {k}");
        }
    }
}

#[test]
fn a_stateful_callback_in_a_loop_runs_once_per_iteration_in_order() {
    let seen: Arc<Mutex<Vec<i32>>> = Arc::new(Mutex::new(Vec::new()));
    let make = |seen: Arc<Mutex<Vec<i32>>>| {
        function(move |n: Sym| {
            let seen = seen.clone();
            let zero = n.graph().scalar(DType::I32, 0.0);
            fori_loop(
                0,
                &n,
                move |i, c| {
                    let seen = seen.clone();
                    let r = i.graph().host_fn(
                        move |ins: &[Tensor]| {
                            let v = common::to_vec::<i32>(&ins[0])[0];
                            seen.lock().unwrap().push(v);
                            Ok(vec![ins[0].clone()])
                        },
                        &[i],
                        &[DType::I32],
                        true,
                    );
                    vec![&c[0] + &r[0].set_shape(&[])]
                },
                &[zero],
            )
        })
    };
    for f in [make(seen.clone()), make(seen.clone()).jit_compile(true)] {
        seen.lock().unwrap().clear();
        let out = f.call(&[scalar_i32(5)]).unwrap();
        assert_eq!(common::to_vec::<i32>(&out[0]), vec![10]);
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        // A stateful body is never folded or merged away.
        let ir = f
            .compiler_ir(&[TensorSpec::known(DType::I32, &[])], IrStage::Optimized)
            .unwrap();
        assert!(ir.contains("= while("), "{ir}");
    }
    // Compiled, the loop is in `main`: the regions' steps between labels,
    // the callback a step of the body.
    let f = make(seen.clone()).jit_compile(true);
    let spec = [TensorSpec::known(DType::I32, &[])];
    let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
    assert!(fused.contains("while in main"), "{fused}");
    assert!(fused.contains("unless slot"), "{fused}");
    assert!(fused.contains("in @while_body"), "{fused}");
    let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
    let main = &clif[clif.find("; main").unwrap()..];
    assert!(main.contains("brif"), "{main}");
}

#[test]
fn a_body_returning_the_wrong_type_names_the_carry_and_the_site() {
    let line = line!() + 3;
    let f = function(|x: Sym| {
        let i = x.graph().scalar(DType::I32, 0.0);
        while_loop(
            |c| c[0].less(3),
            |c| vec![&c[0] + 1, c[1].cast(DType::F64)],
            &[i, x],
        )
    });
    let e = f.call(&[common::f32s(&[1.0], &[1])]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("carry 1"), "{msg}");
    assert!(msg.contains("f64[1]") && msg.contains("f32[1]"), "{msg}");
    assert!(
        msg.contains(&format!("control_flow.rs:{line}")),
        "{msg} (expected line {line})"
    );
}

#[test]
fn a_value_from_an_ended_body_cannot_be_used_outside_it() {
    let f = function(|x: Sym| {
        let escaped = std::rc::Rc::new(std::cell::RefCell::new(None));
        let e2 = escaped.clone();
        let out = while_loop(
            |c| c[0].reduce_sum(None, false).less(0.0),
            move |c| {
                let inner = &c[0] + 1.0;
                *e2.borrow_mut() = Some(inner.clone());
                vec![inner]
            },
            std::slice::from_ref(&x),
        );
        let leaked = escaped.borrow_mut().take().unwrap();
        vec![&out[0] + &leaked]
    });
    let e = f.call(&[common::f32s(&[1.0], &[1])]).unwrap_err();
    assert!(e.to_string().contains("has ended"), "{e}");
}

#[test]
fn loops_traced_with_unknown_dims_are_specialized() {
    for f in both(|| function(doubling_loop())).map(|f| {
        f.input_signature(vec![
            TensorSpec::new(DType::F32, &[None]),
            TensorSpec::known(DType::I32, &[]),
        ])
    }) {
        for len in [1usize, 4] {
            let x: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let out = f.call(&[common::f32s(&x, &[len]), scalar_i32(3)]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[1]), doubling_expected(&x, 3).1);
        }
    }
}

#[test]
fn regions_round_trip_through_the_text_format() {
    let f = function(|x: Sym, k: Sym| {
        let inner = doubling_loop()(x.clone(), k.clone());
        switch(
            &k,
            &[&|a: &[Sym]| vec![&a[0] + 1.0], &|a: &[Sym]| {
                vec![a[0].exp()]
            }],
            &[inner[1].clone()],
        )
    });
    let specs = [
        TensorSpec::known(DType::F32, &[3]),
        TensorSpec::known(DType::I32, &[]),
    ];
    for stage in [IrStage::Traced, IrStage::Optimized] {
        let printed = f.compiler_ir(&specs, stage).unwrap();
        assert!(printed.contains("= while(") && printed.contains("= case("));
        let g = text::parse(&printed, "regions.tlir").unwrap();
        assert_eq!(text::print(&g), printed);
        let dot = tensorlift::ir::to_dot(&g);
        assert!(dot.contains("subgraph cluster_"), "{dot}");
    }
}

#[test]
fn malformed_regions_in_text_are_errors_with_positions() {
    let cases: [(&str, &str); 4] = [
        (
            "graph @g {\n  %x = parameter 0 : f32[]\n  %w = while(%x) : (f32[]) {\n    graph @c {\n      %a = parameter 0 : f32[]\n      return %a as \"p\"\n    }\n    graph @b {\n      %a = parameter 0 : f32[]\n      return %a as \"a\"\n    }\n  }\n  return %w as \"y\"\n}\n",
            "must return one bool[]",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[]\n  %w = while(%x) : (f32[]) {\n    graph @b {\n      %a = parameter 0 : f32[]\n      return %a as \"a\"\n    }\n  }\n  return %w as \"y\"\n}\n",
            "two regions",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[]\n  %i = constant 0 : i32[]\n  %c = case(%i, %x) : (f32[]) {\n    graph @b0 {\n      %a = parameter 0 : f32[]\n      return %a as \"a\"\n    }\n    graph @b1 {\n      %a = parameter 0 : f32[]\n      %b = convert(%a) : f64[]\n      return %b as \"a\"\n    }\n  }\n  return %c as \"y\"\n}\n",
            "every branch must return the same types",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[]\n  %w = while(%x) : (f32[]) {\n    graph @c {\n      %a = parameter 0 : f32[]\n      return %x as \"p\"\n    }\n  }\n  return %w as \"y\"\n}\n",
            "undefined value '%x'",
        ),
    ];
    for (src, want) in cases {
        let e = text::parse(src, "bad.tlir").unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
        assert!(
            e.detail().and_then(|d| d.pos).is_some(),
            "{want}: no position in {e:?}"
        );
    }
}

#[test]
fn deeply_nested_regions_are_an_error_not_a_stack_overflow() {
    let depth = 200;
    let mut src = String::new();
    for _ in 0..depth {
        src.push_str("graph @g {\n %x = parameter 0 : f32[]\n %w = case(%x, %x) : (f32[]) {\n");
    }
    let e = text::parse(&src, "deep.tlir").unwrap_err();
    assert!(e.to_string().contains("nest deeper than"), "{e}");
}

#[test]
fn errors_inside_a_body_at_run_time_name_the_iteration() {
    let f = function(|x: Sym| {
        let i = x.graph().scalar(DType::I32, 0.0);
        while_loop(
            |c| c[0].less(3),
            |c| {
                let y = c[1].graph().host_fn(
                    |ins: &[Tensor]| {
                        if common::to_vec::<f32>(&ins[0])[0] > 2.0 {
                            Err(Error::invalid("too big"))
                        } else {
                            Ok(vec![ins[0].clone()])
                        }
                    },
                    &[&c[1]],
                    &[DType::F32],
                    false,
                );
                vec![&c[0] + 1, &y[0].set_shape(&[Some(1)]) * 2.0]
            },
            &[i, x],
        )
    });
    let e = f.call(&[common::f32s(&[1.0], &[1])]).unwrap_err();
    assert!(e.to_string().contains("too big"), "{e}");
    // Iterations 0 and 1 pass (1 → 2 → 4); iteration 2 sees 4.
    assert!(e.to_string().contains("iteration 2"), "{e}");
}

#[test]
fn carries_swapped_by_the_body_are_not_clobbered() {
    // (i, a, b) -> (i + 1, b, a + b): Fibonacci, which reads the carries in
    // another order than it writes them.
    for f in both(|| {
        function(|n: Sym| {
            let g = n.graph();
            let (i, a, b) = (
                g.scalar(DType::I32, 0.0),
                g.scalar(DType::F64, 0.0),
                g.scalar(DType::F64, 1.0),
            );
            while_loop(
                |c| c[0].less(&n),
                |c| vec![&c[0] + 1, c[2].clone(), &c[1] + &c[2]],
                &[i, a, b],
            )
        })
    }) {
        for (n, want) in [
            (0, 0.0),
            (1, 1.0),
            (2, 1.0),
            (10, 55.0),
            (40, 102_334_155.0),
        ] {
            let out = f.call(&[scalar_i32(n)]).unwrap();
            assert_eq!(common::to_vec::<f64>(&out[1]), vec![want], "n = {n}");
        }
    }
    // A plain swap: (a, b) -> (b, a).
    for f in both(|| {
        function(|a: Sym, b: Sym, n: Sym| {
            let i = n.graph().scalar(DType::I32, 0.0);
            let out = while_loop(
                |c| c[0].less(&n),
                |c| vec![&c[0] + 1, c[2].clone(), c[1].clone()],
                &[i, a, b],
            );
            vec![out[1].clone(), out[2].clone()]
        })
    }) {
        for n in [0, 1, 2, 3] {
            let a = common::f32s(&[1.0, 2.0], &[2]);
            let b = common::f32s(&[3.0, 4.0], &[2]);
            let out = f.call(&[a, b, scalar_i32(n)]).unwrap();
            let (x, y) = if n % 2 == 0 {
                (vec![1.0, 2.0], vec![3.0, 4.0])
            } else {
                (vec![3.0, 4.0], vec![1.0, 2.0])
            };
            assert_eq!(common::to_vec::<f32>(&out[0]), x, "n = {n}");
            assert_eq!(common::to_vec::<f32>(&out[1]), y, "n = {n}");
        }
    }
}

#[test]
fn fused_and_parallel_kernels_inside_a_loop_body_agree_with_the_interpreter() {
    // A row softmax (reductions, row groups, threads) applied 3 times.
    let make = || {
        function(|x: Sym| {
            fori_loop(
                0,
                3,
                |_, c| {
                    let m = c[0].reduce_max(Some(&[1]), true);
                    let e = (&c[0] - &m).exp();
                    let s = e.reduce_sum(Some(&[1]), true);
                    vec![&e / &s * 3.0]
                },
                &[x],
            )
        })
    };
    let (rows, cols) = (64usize, 300usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37) % 101) as f32 / 17.0)
        .collect();
    let x = common::f32s(&x, &[rows, cols]);
    let want = make().call(std::slice::from_ref(&x)).unwrap();
    let got = make()
        .jit_compile(true)
        .call(std::slice::from_ref(&x))
        .unwrap();
    common::assert_close(&got[0], &want[0], 1e-5, 1e-6, "softmax loop");
}

#[test]
fn scan_stacks_per_step_outputs_forward_and_reverse() {
    let xs: Vec<f32> = (0..15).map(|i| i as f32 * 0.5 - 2.0).collect();
    for reverse in [false, true] {
        for f in both(|| {
            function(move |x: Sym| {
                let zero = &x.slice(&[0, 0], &[1, 3], &[1, 1]).reshape(&[3]) * 0.0;
                // carry = running sum; ys = (the running sum, the step's x doubled)
                let (c, ys) = tensorlift::scan(
                    |c, x| {
                        let s = &c[0] + &x[0];
                        (vec![s.clone()], vec![s, &x[0] * 2.0])
                    },
                    &[zero],
                    &[x],
                    None,
                    reverse,
                );
                vec![c[0].clone(), ys[0].clone(), ys[1].clone()]
            })
        }) {
            let out = f.call(&[common::f32s(&xs, &[5, 3])]).unwrap();
            let mut acc = [0.0f32; 3];
            let mut sums = [[0.0f32; 3]; 5];
            let order: Vec<usize> = if reverse {
                (0..5).rev().collect()
            } else {
                (0..5).collect()
            };
            for t in order {
                for j in 0..3 {
                    acc[j] += xs[t * 3 + j];
                }
                sums[t] = acc;
            }
            assert_eq!(
                common::to_vec::<f32>(&out[0]),
                acc.to_vec(),
                "reverse {reverse}"
            );
            assert_eq!(
                common::to_vec::<f32>(&out[1]),
                sums.concat(),
                "reverse {reverse}"
            );
            assert_eq!(
                common::to_vec::<f32>(&out[2]),
                xs.iter().map(|v| v * 2.0).collect::<Vec<_>>()
            );
            assert_eq!(out[1].shape(), &[5, 3]);
        }
    }
}

#[test]
fn scan_with_a_length_and_no_xs() {
    for f in both(|| {
        function(|x: Sym| {
            let (c, ys) = tensorlift::scan(
                |c, _| (vec![&c[0] * 2.0], vec![c[0].clone()]),
                &[x],
                &[],
                Some(4),
                false,
            );
            vec![c[0].clone(), ys[0].clone()]
        })
    }) {
        let out = f.call(&[common::f32s(&[1.0], &[])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![16.0]);
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![1.0, 2.0, 4.0, 8.0]);
    }
}

#[test]
fn loop_invariant_code_is_hoisted_out_of_the_body() {
    // exp(x) * 2 does not change between iterations; the carry update does.
    let make = || {
        function(|x: Sym, n: Sym| {
            let zero = &x * 0.0;
            fori_loop(
                0,
                &n,
                |_, c| {
                    let inv = x.exp() * 2.0;
                    vec![&c[0] + &inv + &x.broadcast_to(&[3])]
                },
                &[zero],
            )
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[3]),
        TensorSpec::known(DType::I32, &[]),
    ];
    let ir = make().compiler_ir(&specs, IrStage::Optimized).unwrap();
    let body_start = ir.find("graph @while_body").unwrap();
    let (outer, body) = ir.split_at(body_start);
    assert!(
        outer.contains("= exp("),
        "exp is computed before the loop:\n{ir}"
    );
    assert!(!body.contains("= exp("), "and not in the body:\n{ir}");
    let x = [0.5f32, -1.0, 2.0];
    for f in [make(), make().jit_compile(true)] {
        for n in [0, 1, 4] {
            let out = f.call(&[common::f32s(&x, &[3]), scalar_i32(n)]).unwrap();
            let want: Vec<f32> = x
                .iter()
                .map(|v| {
                    let inv = v.exp() * 2.0;
                    (0..n).fold(0.0f32, |acc, _| acc + inv + v)
                })
                .collect();
            common::assert_close(
                &out[0],
                &common::f32s(&want, &[3]),
                1e-6,
                1e-6,
                &format!("n = {n}"),
            );
        }
    }
}

/// A batched `v·Wᵀ` by a captured `w` (b, n, k) in a loop: the body reads
/// `w` transposed to (b, k, n) once before the loop (loop-operand-layout,
/// then licm), with the same values as the product by `w` itself, for 0, 1
/// and several iterations, interpreted and compiled.
#[test]
fn a_captured_transposed_operand_is_laid_out_once_before_the_loop() {
    let (b, m, k, n) = (2usize, 3usize, 5usize, 5usize);
    let make = || {
        function(|v: Sym, w: Sym, steps: Sym| {
            let dims = DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![2],
                rhs_contract: vec![2],
            };
            fori_loop(
                0,
                &steps,
                |_, c| vec![c[0].dot_general(&w, dims.clone()) * 0.5],
                &[v],
            )
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[b, m, k]),
        TensorSpec::known(DType::F32, &[b, n, k]),
        TensorSpec::known(DType::I32, &[]),
    ];
    let ir = make().compiler_ir(&specs, IrStage::Optimized).unwrap();
    let (outer, body) = ir.split_at(ir.find("graph @while_body").unwrap());
    assert!(
        outer.contains("transpose(") && outer.contains("{perm=[0,2,1]}"),
        "w is transposed before the loop:\n{ir}"
    );
    assert!(
        body.contains("rhs_contract=[1]") && !body.contains("transpose("),
        "the body multiplies the transposed copy:\n{ir}"
    );
    let v: Vec<f32> = (0..b * m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let w: Vec<f32> = (0..b * n * k)
        .map(|i| (i % 5) as f32 * 0.25 - 0.5)
        .collect();
    for steps in [0, 1, 3] {
        let mut want = v.clone();
        for _ in 0..steps {
            let mut next = vec![0f32; b * m * n];
            for (bi, i, j) in product_indices(b, m, n) {
                let dot: f32 = (0..k)
                    .map(|kk| want[(bi * m + i) * k + kk] * w[(bi * n + j) * k + kk])
                    .sum();
                next[(bi * m + i) * n + j] = dot * 0.5;
            }
            want = next;
        }
        for f in [make(), make().jit_compile(true)] {
            let out = f
                .call(&[
                    common::f32s(&v, &[b, m, k]),
                    common::f32s(&w, &[b, n, k]),
                    scalar_i32(steps),
                ])
                .unwrap();
            common::assert_close(
                &out[0],
                &common::f32s(&want, &[b, m, n]),
                1e-5,
                1e-5,
                &format!("{steps} steps"),
            );
        }
    }
}

/// A scatter whose operand nothing reads afterwards combines its updates
/// into that buffer (only the indexed rows written); one whose operand is
/// read again, or is the caller's input, works on a copy and leaves the
/// operand as it was. Every combiner, duplicate and out-of-range indices,
/// the interpreter and the JIT agreeing.
#[test]
fn scatter_combines_in_place_when_the_operand_is_dead() {
    let specs = [
        TensorSpec::known(DType::F32, &[2, 5]),
        TensorSpec::known(DType::I32, &[4]),
        TensorSpec::known(DType::F32, &[2, 4]),
    ];
    let fused = |f: Function| {
        f.jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap()
    };
    let x = common::f32s(&[1., 2., 3., 4., 5., 6., 7., 8., 9., 10.], &[2, 5]);
    // 3 twice, 7 and -1 outside [0, 5): skipped.
    let ids = i32s(&[3, 0, 3, 7], &[4]);
    let ids_neg = i32s(&[-1, 4, 1, 3], &[4]);
    let u = common::f32s(&[10., 20., 30., 40., 50., 60., 70., 80.], &[2, 4]);
    // x·2 = [[2, 4, 6, 8, 10], [12, 14, 16, 18, 20]].
    for (combiner, ids, want) in [
        (
            Combiner::Add,
            &ids,
            [22., 4., 6., 48., 10., 72., 14., 16., 138., 20.],
        ),
        (
            Combiner::Set,
            &ids,
            [20., 4., 6., 30., 10., 60., 14., 16., 70., 20.],
        ),
        (
            Combiner::Min,
            &ids_neg,
            [2., 4., 6., 8., 10., 12., 14., 16., 18., 20.],
        ),
        (
            Combiner::Max,
            &ids_neg,
            [2., 30., 6., 40., 20., 12., 70., 16., 80., 60.],
        ),
    ] {
        let dead = move || {
            function(move |x: Sym, i: Sym, u: Sym| {
                let t = &x * 2.0;
                t.scatter(&i, &u, 1, combiner)
            })
        };
        let live = move || {
            function(move |x: Sym, i: Sym, u: Sym| {
                let t = &x * 2.0;
                let y = t.scatter(&i, &u, 1, combiner);
                vec![y, t]
            })
        };
        let on_input =
            move || function(move |x: Sym, i: Sym, u: Sym| x.scatter(&i, &u, 1, combiner));
        let name = format!("{combiner:?}");
        assert!(
            fused(dead()).contains("scatter in place"),
            "{name}: {}",
            fused(dead())
        );
        assert!(
            !fused(live()).contains("in place"),
            "{name}: {}",
            fused(live())
        );
        assert!(
            !fused(on_input()).contains("in place"),
            "{name}: {}",
            fused(on_input())
        );
        let doubled: Vec<f32> = (1..=10).map(|v| 2.0 * v as f32).collect();
        for f in both(dead) {
            let out = f.call(&[x.clone(), ids.clone(), u.clone()]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want, "{name}");
        }
        for f in both(live) {
            let out = f.call(&[x.clone(), ids.clone(), u.clone()]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want, "{name}");
            assert_eq!(
                common::to_vec::<f32>(&out[1]),
                doubled,
                "{name}: t was written"
            );
        }
        for f in both(on_input) {
            let x2 = common::f32s(&doubled, &[2, 5]);
            let out = f.call(&[x2.clone(), ids.clone(), u.clone()]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want, "{name}");
            assert_eq!(
                common::to_vec::<f32>(&x2),
                doubled,
                "{name}: the input was written"
            );
        }
    }
    // A loop adding into a carried table at a few indices per step: the
    // body scatters into the carry's own buffer.
    let counts = || {
        function(|ids: Sym| {
            let table = ids.graph().scalar(DType::F32, 0.0).broadcast_to(&[6]);
            let one = ids.graph().scalar(DType::F32, 1.0).broadcast_to(&[2]);
            fori_loop(
                0,
                3,
                |i, c| {
                    let row =
                        ids.dynamic_slice(&[i, &ids.graph().scalar(DType::I32, 0.0)], &[1, 2]);
                    vec![c[0].scatter(&row.reshape(&[2]), &one, 0, Combiner::Add)]
                },
                &[table],
            )[0]
            .clone()
        })
    };
    let plan = counts()
        .jit_compile(true)
        .compiler_ir(&[TensorSpec::known(DType::I32, &[3, 2])], IrStage::Fused)
        .unwrap();
    assert!(plan.contains("scatter in place"), "{plan}");
    // The row taken from the stacked indices and reshaped to a vector is
    // copied once: `dynamic_slice` writes into the reshape's buffer.
    assert!(
        plan.contains("reshape: no copy: dynamic_slice 'dynamic_slice' writes"),
        "{plan}"
    );
    for f in both(counts) {
        let out = f.call(&[i32s(&[0, 5, 5, 2, 9, 0], &[3, 2])]).unwrap();
        assert_eq!(
            common::to_vec::<f32>(&out[0]),
            vec![2.0, 0.0, 1.0, 0.0, 0.0, 2.0]
        );
    }
}

/// A reshape of what a GEMM or a runtime step produced is no copy: the
/// producer writes into the reshape's buffer. Not when the value is read
/// again elsewhere (the copy is then a second value).
#[test]
fn reshapes_after_gemms_and_runtime_steps_copy_nothing() {
    let x = common::f32s(
        &(0..24).map(|v| v as f32 * 0.5).collect::<Vec<_>>(),
        &[4, 6],
    );
    let w = common::f32s(
        &(0..48).map(|v| (v % 7) as f32 - 3.0).collect::<Vec<_>>(),
        &[6, 8],
    );
    let v = common::f32s(
        &(0..48).map(|v| (v % 5) as f32).collect::<Vec<_>>(),
        &[16, 3],
    );
    let chained = || {
        function(|x: Sym, w: Sym, v: Sym| {
            let h = x.matmul(&w).reshape(&[2, 16]);
            h.matmul(&v)
        })
    };
    let also_read = || {
        function(|x: Sym, w: Sym, v: Sym| {
            let p = x.matmul(&w);
            let h = p.reshape(&[2, 16]);
            vec![h.matmul(&v), p]
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[4, 6]),
        TensorSpec::known(DType::F32, &[6, 8]),
        TensorSpec::known(DType::F32, &[16, 3]),
    ];
    let fused = |f: Function| {
        f.jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap()
    };
    let plan = fused(chained());
    assert!(plan.contains("no copy: GEMM"), "{plan}");
    assert!(!plan.contains("kernel 'reshape'"), "{plan}");
    let plan = fused(also_read());
    assert!(!plan.contains("no copy"), "{plan}");
    let args = [x, w, v];
    let want = chained().call(&args).unwrap();
    let got = chained().jit_compile(true).call(&args).unwrap();
    common::assert_close(&got[0], &want[0], 1e-6, 1e-6, "chained");
    let want = also_read().call(&args).unwrap();
    let got = also_read().jit_compile(true).call(&args).unwrap();
    for k in 0..2 {
        common::assert_close(&got[k], &want[k], 1e-6, 1e-6, "also read");
    }
}

/// Every (batch, row, column) of a b×m×n product.
fn product_indices(b: usize, m: usize, n: usize) -> Vec<(usize, usize, usize)> {
    (0..b)
        .flat_map(|bi| (0..m).flat_map(move |i| (0..n).map(move |j| (bi, i, j))))
        .collect()
}

#[test]
fn dynamic_update_slice_writes_in_place_when_the_operand_is_dead() {
    let idx = |v: i32| scalar_i32(v);
    // Operand dead after the update: in place. Operand read again: a copy.
    let dead = || {
        function(|x: Sym, u: Sym, i: Sym| {
            let t = &x * 2.0;
            t.dynamic_update_slice(&u, &[&i])
        })
    };
    let live = || {
        function(|x: Sym, u: Sym, i: Sym| {
            let t = &x * 2.0;
            let y = t.dynamic_update_slice(&u, &[&i]);
            vec![&y + &t]
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[5]),
        TensorSpec::known(DType::F32, &[2]),
        TensorSpec::known(DType::I32, &[]),
    ];
    let fused = |f: Function| {
        f.jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap()
    };
    assert!(fused(dead()).contains("in place"), "{}", fused(dead()));
    assert!(!fused(live()).contains("in place"), "{}", fused(live()));
    let x = common::f32s(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5]);
    let u = common::f32s(&[-1.0, -2.0], &[2]);
    for (i, want_dead, want_live) in [
        (
            1,
            vec![2.0, -1.0, -2.0, 8.0, 10.0],
            vec![4.0, 3.0, 4.0, 16.0, 20.0],
        ),
        // Clamped to 3.
        (
            9,
            vec![2.0, 4.0, 6.0, -1.0, -2.0],
            vec![4.0, 8.0, 12.0, 7.0, 8.0],
        ),
    ] {
        for f in [dead(), dead().jit_compile(true)] {
            let out = f.call(&[x.clone(), u.clone(), idx(i)]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want_dead, "i = {i}");
        }
        for f in [live(), live().jit_compile(true)] {
            let out = f.call(&[x.clone(), u.clone(), idx(i)]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), want_live, "i = {i}");
        }
    }
    // A scan writes its stacked outputs in place, step by step.
    let scan_fn = function(|x: Sym| {
        let zero = x.graph().scalar(DType::F32, 0.0);
        let (_, ys) = tensorlift::scan(
            |c, x| (vec![&c[0] + &x[0]], vec![&c[0] + &x[0]]),
            &[zero],
            &[x],
            None,
            false,
        );
        ys
    })
    .jit_compile(true);
    let plan = scan_fn
        .compiler_ir(&[TensorSpec::known(DType::F32, &[6])], IrStage::Fused)
        .unwrap();
    assert!(plan.contains("dynamic_update_slice in place"), "{plan}");
    let out = scan_fn
        .call(&[common::f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[6])])
        .unwrap();
    assert_eq!(
        common::to_vec::<f32>(&out[0]),
        vec![1.0, 3.0, 6.0, 10.0, 15.0, 21.0]
    );
}

#[test]
fn the_ir_builder_makes_loops_and_branches_without_the_tracer() {
    use tensorlift::ir::{Graph, Op, Site, TensorType, builder};
    let site = Site {
        file: "builder.rs".into(),
        line: 1,
        col: 1,
    };
    let f32v = TensorType::known(DType::F32, &[2]);
    let i32s = TensorType::known(DType::I32, &[]);
    let mut g = Graph::new("built");
    let x = g
        .add_parameter(0, f32v.clone(), None, site.clone())
        .unwrap();
    let k = g
        .add_parameter(1, i32s.clone(), None, site.clone())
        .unwrap();
    // case k: [x + x, x * x]
    let branches = [tensorlift::ir::BinaryOp::Add, tensorlift::ir::BinaryOp::Mul]
        .into_iter()
        .enumerate()
        .map(|(b, op)| {
            builder::region(
                &format!("b{b}"),
                std::slice::from_ref(&f32v),
                &site,
                |r, p| Ok(vec![r.add(Op::Binary(op), &[p[0], p[0]], site.clone())?]),
            )
            .unwrap()
        })
        .collect();
    let c = builder::case(&mut g, k, &[x], branches, &site).unwrap();
    // while i < 3: v = v + 1
    let types = [i32s.clone(), f32v.clone()];
    let cond = builder::region("c", &types, &site, |r, p| {
        let three = r.add(
            Op::Constant(tensorlift::ir::Literal::scalar(DType::I32, 3.0).unwrap()),
            &[],
            site.clone(),
        )?;
        Ok(vec![r.add(
            Op::Compare(tensorlift::ir::CmpOp::Lt),
            &[p[0], three],
            site.clone(),
        )?])
    })
    .unwrap();
    let body = builder::region("b", &types, &site, |r, p| {
        let one_i = r.add(
            Op::Constant(tensorlift::ir::Literal::scalar(DType::I32, 1.0).unwrap()),
            &[],
            site.clone(),
        )?;
        let one_f = r.add(
            Op::Constant(
                tensorlift::ir::Literal::from_scalars(
                    DType::F32,
                    &[2],
                    &[tensorlift::ir::Scalar::Float(1.0, None); 2],
                )
                .unwrap(),
            ),
            &[],
            site.clone(),
        )?;
        Ok(vec![
            r.add(
                Op::Binary(tensorlift::ir::BinaryOp::Add),
                &[p[0], one_i],
                site.clone(),
            )?,
            r.add(
                Op::Binary(tensorlift::ir::BinaryOp::Add),
                &[p[1], one_f],
                site.clone(),
            )?,
        ])
    })
    .unwrap();
    let zero = g
        .add(
            Op::Constant(tensorlift::ir::Literal::scalar(DType::I32, 0.0).unwrap()),
            &[],
            site.clone(),
        )
        .unwrap();
    let w = builder::while_loop(&mut g, &[zero, c[0]], cond, body, &site).unwrap();
    g.add_output(w[1], "y").unwrap();
    let x_in = common::f32s(&[1.0, 3.0], &[2]);
    for (k_in, want) in [
        (0, vec![5.0, 9.0]),
        (1, vec![4.0, 12.0]),
        (7, vec![4.0, 12.0]),
    ] {
        let ins = [x_in.clone(), scalar_i32(k_in)];
        let a = tensorlift::runtime::interp::run(&g, &ins).unwrap();
        let b = tensorlift::compiler::compile(&g, &Default::default())
            .unwrap()
            .run(&ins)
            .unwrap();
        assert_eq!(common::to_vec::<f32>(&a[0]), want, "k = {k_in}");
        assert_eq!(common::to_vec::<f32>(&b[0]), want, "k = {k_in}");
    }
    // A bad index type is an error naming case and the site.
    let s = g.add_parameter(2, f32v, None, site.clone()).unwrap();
    let e = builder::case(&mut g, s, &[], vec![], &site).unwrap_err();
    assert!(
        e.to_string().contains("branch index") && e.to_string().contains("builder.rs:1:1"),
        "{e}"
    );
}

/// The interpreter updates a loop carry's buffer in place at its last
/// use; a value someone else still holds (the caller's input, a value read
/// after the update) is never written.
#[test]
fn in_place_updates_never_write_a_value_still_read() {
    let f = function(|x: Sym, u: Sym| {
        let zero = x.graph().scalar(DType::I32, 0.0);
        let y = x.dynamic_update_slice(&u, &[&zero]);
        (y, &x + 0.0)
    });
    let x = Tensor::from(ndarray::arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    let u = Tensor::from(ndarray::arr1(&[9.0f32]).into_dyn());
    let out = f.call(&[x.clone(), u]).unwrap();
    assert_eq!(
        out[0].to_ndarray::<f32>().unwrap().as_slice().unwrap(),
        &[9.0, 2.0, 3.0]
    );
    assert_eq!(
        out[1].to_ndarray::<f32>().unwrap().as_slice().unwrap(),
        &[1.0, 2.0, 3.0]
    );
    assert_eq!(
        x.to_ndarray::<f32>().unwrap().as_slice().unwrap(),
        &[1.0, 2.0, 3.0]
    );
    // Rows written into a carried buffer, one per iteration.
    let g = function(|x: Sym| {
        let buf = x.graph().scalar(DType::F32, 0.0).broadcast_to(&[4, 2]);
        fori_loop(
            0,
            4,
            |i, c| {
                let row = (&x * &i.cast(DType::F32)).reshape(&[1, 2]);
                let zero = x.graph().scalar(DType::I32, 0.0);
                vec![c[0].dynamic_update_slice(&row, &[i, &zero])]
            },
            &[buf],
        )[0]
        .clone()
    });
    let r = g
        .call(&[Tensor::from(ndarray::arr1(&[1.0f32, 10.0]).into_dyn())])
        .unwrap();
    assert_eq!(
        r[0].to_ndarray::<f32>().unwrap().as_slice().unwrap(),
        &[0.0, 0.0, 1.0, 10.0, 2.0, 20.0, 3.0, 30.0]
    );
}

/// A `dynamic_slice` whose block is one contiguous, 16-byte aligned run of
/// its operand (a row of a stack) is read where it lies, in loops and out
/// of them: with clamped starts, feeding kernels and a scatter. Not when
/// its rows are unaligned, when it is an output, when its operand is
/// written (in place) before its last reader, and never with the operand's
/// buffer reused while it is read (the last case fails without that).
#[test]
fn aligned_dynamic_slices_are_read_where_they_lie() {
    let read_in_place = "its block is read where it lies";
    let f32s = |n: usize, shape: &[usize]| {
        common::f32s(
            &(0..n)
                .map(|v| ((v * 7) % 11) as f32 - 5.0)
                .collect::<Vec<_>>(),
            shape,
        )
    };
    let fused = |f: Function, specs: &[TensorSpec]| {
        f.jit_compile(true)
            .compiler_ir(specs, IrStage::Fused)
            .unwrap()
    };
    let check = |name: &str, f: &dyn Fn() -> Function, args: &[Tensor]| {
        let want = f().call(args).unwrap();
        let got = f().jit_compile(true).call(args).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        for (g, w) in got.iter().zip(&want) {
            common::assert_close(g, w, 1e-6, 1e-5, name);
        }
        want
    };
    // A loop summing rows 0, 2, 4, ... of a stack (the start clamps to the
    // last row past the end): rows of 4 f32 are aligned, rows of 5 not.
    let rows_loop = |width: usize| {
        move || {
            function(move |xs: Sym| {
                let g = xs.graph();
                let zero = g.scalar(DType::I32, 0.0);
                let acc = g.scalar(DType::F32, 0.0).broadcast_to(&[width]);
                fori_loop(
                    0,
                    6,
                    |i, c| {
                        let at = i * 2;
                        let row = xs.dynamic_slice(&[&at, &zero], &[1, width]);
                        vec![&c[0] + row.reshape(&[width as i64]) * 3.0]
                    },
                    &[acc],
                )
            })
        }
    };
    for (width, view) in [(4, true), (5, false)] {
        let specs = [TensorSpec::known(DType::F32, &[8, width])];
        let plan = fused(rows_loop(width)(), &specs);
        assert_eq!(
            plan.contains(read_in_place),
            view,
            "rows of {width}: {plan}"
        );
        let xs = f32s(8 * width, &[8, width]);
        let out = check("rows loop", &rows_loop(width), std::slice::from_ref(&xs));
        let x = common::to_vec::<f32>(&xs);
        let want: Vec<f32> = (0..width)
            .map(|j| {
                [0, 2, 4, 6, 7, 7]
                    .iter()
                    .fold(0.0f32, |a, r| a + x[r * width + j] * 3.0)
            })
            .collect();
        assert_eq!(common::to_vec::<f32>(&out[0]), want, "rows of {width}");
    }
    // Scattering rows of a stacked input into a carried table.
    let scatter_loop = || {
        function(|table: Sym, ids: Sym, ups: Sym| {
            let zero = table.graph().scalar(DType::I32, 0.0);
            fori_loop(
                0,
                4,
                |i, c| {
                    let at = ids.dynamic_slice(&[i, &zero], &[1, 4]).reshape(&[4]);
                    let u = ups.dynamic_slice(&[i, &zero], &[1, 4]).reshape(&[4]);
                    vec![c[0].scatter(&at, &u, 0, Combiner::Add)]
                },
                &[table],
            )
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[16]),
        TensorSpec::known(DType::I32, &[4, 4]),
        TensorSpec::known(DType::F32, &[4, 4]),
    ];
    let plan = fused(scatter_loop(), &specs);
    assert_eq!(plan.matches(read_in_place).count(), 2, "{plan}");
    let ids = i32s(
        &[3, 0, 3, 15, 1, 2, 3, 4, 9, 9, 9, 40, -1, 0, 5, 6],
        &[4, 4],
    );
    check(
        "scatter loop",
        &scatter_loop,
        &[f32s(16, &[16]), ids, f32s(16, &[4, 4])],
    );
    // The slice as the output: its own buffer.
    let out_slice = || {
        function(|x: Sym, i: Sym| {
            let z = x.graph().scalar(DType::I32, 0.0);
            x.dynamic_slice(&[&i, &z], &[1, 8])
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[4, 8]),
        TensorSpec::known(DType::I32, &[]),
    ];
    assert!(!fused(out_slice(), &specs).contains(read_in_place));
    for i in [-3, 0, 2, 9] {
        check("output", &out_slice, &[f32s(32, &[4, 8]), scalar_i32(i)]);
    }
    // The operand updated in place before the slice's last reader: a copy.
    let written = || {
        function(|x: Sym, i: Sym| {
            let t = &x * 2.0;
            let z = x.graph().scalar(DType::I32, 0.0);
            let row = t.dynamic_slice(&[&i, &z], &[1, 8]);
            let ones = x.graph().scalar(DType::F32, 1.0).broadcast_to(&[1, 8]);
            let t2 = t.dynamic_update_slice(&ones, &[&i, &z]);
            &t2 + row.reduce_sum(None, false)
        })
    };
    let plan = fused(written(), &specs);
    assert!(plan.contains("in place"), "{plan}");
    assert!(!plan.contains(read_in_place), "{plan}");
    for i in [0, 3] {
        check("written", &written, &[f32s(32, &[4, 8]), scalar_i32(i)]);
    }
    // The operand is not read after the slice, and a product computed
    // after it would take its buffer were the view not keeping it live.
    let reused = || {
        function(|x: Sym, y: Sym, i: Sym| {
            let t = (&x * 2.0).exp();
            let z = x.graph().scalar(DType::I32, 0.0);
            let row = t.dynamic_slice(&[&i, &z], &[1, 16]).reshape(&[16]);
            let w = (&y * 3.0).tanh();
            let m = w.matmul(&w);
            m.reduce_sum(Some(&[0]), false) + row
        })
    };
    let specs = [
        TensorSpec::known(DType::F32, &[16, 16]),
        TensorSpec::known(DType::F32, &[16, 16]),
        TensorSpec::known(DType::I32, &[]),
    ];
    let plan = fused(reused(), &specs);
    assert!(plan.contains(read_in_place), "{plan}");
    for i in [0, 5, 15, 99] {
        let y = common::f32s(
            &(0..256).map(|v| (v % 13) as f32 * 0.1).collect::<Vec<_>>(),
            &[16, 16],
        );
        check("reused", &reused, &[f32s(256, &[16, 16]), y, scalar_i32(i)]);
    }
}

/// `v = m·v / |m·v|` for `steps` iterations of a `fori_loop`, the matrix
/// captured (`m` unchanged by the loop) or, with `carried`, carried and
/// negated every iteration (written by the loop).
fn matvec_loop(steps: i32, carried: bool) -> Function {
    function(move |m: Sym, v: Sym| {
        let out = fori_loop(
            0,
            steps,
            |_, c| {
                let m = if carried { c[1].clone() } else { m.clone() };
                let w = m.matmul(&c[0]);
                let next = &w / (&w * &w).reduce_sum(None, false).sqrt();
                if carried {
                    vec![next, m.neg()]
                } else {
                    vec![next]
                }
            },
            &if carried { vec![v, m.clone()] } else { vec![v] },
        );
        out[0].clone()
    })
}

/// A kernel inside a loop that reads a large operand the loop never
/// writes (a 4 MiB matrix-vector product, memory-bound) is split over
/// threads, each keeping its rows in its own cache; the same product
/// outside a loop, or on a matrix the loop writes, stays on one thread.
/// Every split gives the bits of the unsplit code.
#[test]
fn loop_invariant_reads_split_a_kernel_over_threads() {
    let n = 1024;
    let m = common::f32s(
        &(0..n * n)
            .map(|i| ((i * 7919) % 2003) as f32 / 2003.0 - 0.5)
            .collect::<Vec<_>>(),
        &[n, n],
    );
    let v = common::f32s(&vec![1.0; n], &[n, 1]);
    let spec = [
        TensorSpec::known(DType::F32, &[n, n]),
        TensorSpec::known(DType::F32, &[n, 1]),
    ];
    let threaded = tensorlift::runtime::pool::threads() >= 2;
    let resident = |f: &Function| {
        let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
        let split = fused
            .lines()
            .any(|l| l.contains("kernel 'dot_general'") && l.contains("the loop never writes"));
        (split, fused)
    };
    let (split, fused) = resident(&matvec_loop(5, false).jit_compile(true));
    assert_eq!(split, threaded, "{fused}");
    let (split, fused) = resident(&matvec_loop(5, true).jit_compile(true));
    assert!(!split, "the loop writes the matrix:\n{fused}");
    let once = function(|m: Sym, v: Sym| m.matmul(&v)).jit_compile(true);
    let (split, fused) = resident(&once);
    assert!(!split, "no loop:\n{fused}");
    for steps in [0, 1, 5] {
        for carried in [false, true] {
            let args = [m.clone(), v.clone()];
            let want = matvec_loop(steps, carried).call(&args).unwrap();
            let split = matvec_loop(steps, carried)
                .jit_compile(true)
                .call(&args)
                .unwrap();
            let one = matvec_loop(steps, carried)
                .jit_compile(true)
                .jit_options(tensorlift::compiler::JitOptions {
                    threads: false,
                    ..Default::default()
                })
                .call(&args)
                .unwrap();
            let what = format!("{steps} steps, carried {carried}");
            assert!(common::same_bits(&split[0], &one[0]), "{what}");
            common::assert_close(&split[0], &want[0], 1e-4, 1e-6, &what);
        }
    }
}

/// The error tracing `f` at `args` gives, interpreted and compiled alike
/// (never a panic of the body's).
fn trace_error(make: impl Fn() -> Function, args: &[Tensor]) -> String {
    let [interpreted, compiled] = both(make);
    let e = interpreted.call(args).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let msg = e.to_string();
    assert!(!msg.contains("panicked"), "{msg}");
    assert_eq!(compiled.call(args).unwrap_err().to_string(), msg);
    msg
}

#[test]
fn a_failed_cond_or_switch_gives_its_results_count_and_its_own_error() {
    // Branches of different types: `out[0]` of the user's code must not
    // panic, and the error is the branches' mismatch at the user's line.
    let line = line!() + 3;
    let make = || {
        function(|p: Sym, x: Sym| {
            let out = cond(
                &p,
                |o| vec![&o[0] * 2.0],
                |o| vec![o[0].cast(DType::F64)],
                &[x],
            );
            vec![&out[0] + 1.0]
        })
    };
    let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
    let msg = trace_error(make, &[Tensor::scalar(true), x.clone()]);
    assert!(
        msg.contains("f64[3]") && msg.contains("f32[3]") && msg.contains("branch"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected line {line})"
    );
    let line = line!() + 3;
    let make = || {
        function(|k: Sym, x: Sym| {
            let out = switch(
                &k,
                &[&|a: &[Sym]| vec![&a[0] + 1.0], &|a: &[Sym]| {
                    vec![a[0].reshape(&[3, 1])]
                }],
                &[x],
            );
            vec![out[0].clone()]
        })
    };
    let msg = trace_error(make, &[scalar_i32(0), x.clone()]);
    assert!(
        msg.contains("f32[3,1]") && msg.contains("f32[3]") && msg.contains("branch 1"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected line {line})"
    );
    // An index of the wrong type: the branches are not traced, yet the
    // user gets one value per result of the first branch.
    let make = || {
        function(|k: Sym, x: Sym| {
            let out = switch(&k, &[&|a: &[Sym]| vec![&a[0] + 1.0, a[0].clone()]], &[x]);
            vec![&out[0] + &out[1]]
        })
    };
    let msg = trace_error(make, &[common::f32s(&[0.0], &[1]), x.clone()]);
    assert!(msg.contains("branch index"), "{msg}");
}

#[test]
fn an_error_recorded_before_the_body_panics_is_the_one_reported() {
    // A reshape that fails poisons `y`; the cond over it cannot trace, and
    // the user's code then panics: the reshape is what went wrong.
    let line = line!() + 3;
    let make = || {
        function(|p: Sym, x: Sym| {
            let y = x.reshape(&[7]);
            let out = cond(&p, |o| vec![&o[0] * 2.0], |o| vec![o[0].clone()], &[y]);
            let first: &Sym = out.first().expect("the body gives up here");
            vec![first.clone()]
        })
    };
    let args = [Tensor::scalar(true), common::f32s(&[1.0, 2.0, 3.0], &[3])];
    let msg = trace_error(make, &args);
    assert!(msg.contains("reshape"), "{msg}");
    assert!(
        msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected line {line})"
    );
}

fn running_sum_scan(reverse: bool) -> Function {
    function(move |c: Sym, xs: Sym| {
        let (c, ys) = tensorlift::scan(
            |c, x| {
                let s = &c[0] + &x[0];
                (vec![s.clone()], vec![s, x[0].cast(DType::I32)])
            },
            &[c],
            &[xs],
            None,
            reverse,
        );
        vec![c[0].clone(), ys[0].clone(), ys[1].clone()]
    })
}

#[test]
fn a_scan_of_zero_steps_returns_the_initial_carry_and_empty_ys() {
    let c = common::f32s(&[1.5, -2.0], &[2]);
    let xs = common::f32s(&[], &[0, 2]);
    for reverse in [false, true] {
        for f in both(|| running_sum_scan(reverse)) {
            let out = f.call(&[c.clone(), xs.clone()]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), vec![1.5, -2.0]);
            assert_eq!(out[1].shape(), &[0, 2]);
            assert_eq!(out[1].dtype(), DType::F32);
            assert_eq!(out[2].shape(), &[0, 2]);
            assert_eq!(out[2].dtype(), DType::I32);
            // One step still works through the same function.
            let one = f
                .call(&[c.clone(), common::f32s(&[1.0, 1.0], &[1, 2])])
                .unwrap();
            assert_eq!(common::to_vec::<f32>(&one[0]), vec![2.5, -1.0]);
            assert_eq!(common::to_vec::<f32>(&one[1]), vec![2.5, -1.0]);
        }
    }
    // A length of 0 and no xs.
    for f in both(|| {
        function(|x: Sym| {
            let (c, ys) = tensorlift::scan(
                |c, _| (vec![&c[0] * 2.0], vec![c[0].clone()]),
                &[x],
                &[],
                Some(0),
                false,
            );
            vec![c[0].clone(), ys[0].clone()]
        })
    }) {
        let out = f.call(&[common::f32s(&[3.0], &[])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0]);
        assert_eq!(out[1].shape(), &[0]);
    }
    // The gradient of a scan of no steps: the carry passes through.
    for f in both(|| {
        function(|c: Sym, xs: Sym| {
            let (c, _) = tensorlift::scan(
                |c, x| (vec![&c[0] * &x[0]], vec![]),
                &[c],
                &[xs],
                None,
                false,
            );
            c[0].reduce_sum(None, false)
        })
    }) {
        let g = f.grad(&[0]).call(&[c.clone(), xs.clone()]).unwrap();
        assert_eq!(common::to_vec::<f32>(&g[0]), vec![1.0, 1.0]);
    }
}

#[test]
fn scan_errors_name_the_scan_the_users_carry_and_line() {
    // The body returns f64 for the f32 carry 0 (the user's first carry).
    let line = line!() + 3;
    let make = || {
        function(|c: Sym, xs: Sym| {
            let (c, ys) = tensorlift::scan(
                |c, x| {
                    let n = (&c[0] + &x[0]).cast(DType::F64);
                    (vec![n.clone()], vec![n])
                },
                &[c],
                &[xs],
                None,
                false,
            );
            vec![c[0].clone(), ys[0].clone()]
        })
    };
    let c = common::f32s(&[0.0, 0.0], &[2]);
    for steps in [0, 4] {
        let xs = common::f32s(&vec![1.0; steps * 2], &[steps, 2]);
        let msg = trace_error(make, &[c.clone(), xs]);
        assert!(msg.contains("scan"), "{msg}");
        assert!(msg.contains("carry 0"), "{msg}");
        assert!(msg.contains("f64[2]") && msg.contains("f32[2]"), "{msg}");
        assert!(!msg.contains("src/control.rs"), "{msg}");
        assert!(
            msg.contains(&format!("control_flow.rs:{line}:")),
            "{msg} (expected line {line})"
        );
    }
    // xs of different lengths.
    let line = line!() + 3;
    let make = || {
        function(|a: Sym, b: Sym| {
            let (_, ys) = tensorlift::scan(
                |c, x| (c.to_vec(), vec![&x[0] + &x[1]]),
                &[],
                &[a, b],
                None,
                false,
            );
            ys
        })
    };
    let msg = trace_error(
        make,
        &[common::f32s(&[1.0; 3], &[3]), common::f32s(&[1.0; 2], &[2])],
    );
    assert!(msg.contains("xs[1]"), "{msg}");
    assert!(
        msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected line {line})"
    );
}

#[test]
fn fori_loop_errors_name_the_users_carry() {
    // The counter is a carry of the `while` inside; the user's carry 0 is
    // what the message names.
    let line = line!() + 1;
    let make = || function(|x: Sym| fori_loop(0, 3, |_, c| vec![c[0].cast(DType::F64)], &[x]));
    let msg = trace_error(make, &[common::f32s(&[1.0], &[1])]);
    assert!(
        msg.contains("fori_loop") && msg.contains("carry 0"),
        "{msg}"
    );
    assert!(msg.contains("f64[1]") && msg.contains("f32[1]"), "{msg}");
    assert!(
        msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected line {line})"
    );
    let make = || function(|x: Sym| fori_loop(0, 3, |_, c| vec![c[0].clone(), c[0].clone()], &[x]));
    let msg = trace_error(make, &[common::f32s(&[1.0], &[1])]);
    assert!(
        msg.contains("returns 2 value(s)") && msg.contains("carries 1"),
        "{msg}"
    );
}

#[test]
fn using_a_value_of_an_ended_body_names_the_op_that_uses_it() {
    let line = line!() + 14;
    let make = || {
        function(|x: Sym| {
            let mut leaked: Option<Sym> = None;
            let o = fori_loop(
                0,
                3,
                |_, c| {
                    let y = &c[0] * 2.0;
                    leaked = Some(y.clone());
                    vec![y]
                },
                &[x],
            );
            vec![&o[0] + leaked.expect("traced")]
        })
    };
    let msg = trace_error(make, &[common::f32s(&[1.0], &[])]);
    assert!(msg.contains("has ended"), "{msg}");
    assert!(
        msg.contains("add 'add' (created at ") && msg.contains(&format!("control_flow.rs:{line}:")),
        "{msg} (expected op add at line {line})"
    );
}

/// A stateful callback of `i` (an i32 scalar) that fails with "boom at
/// `i`" where `i` is `at`, else passes its operand `x` (f32[2]) on.
fn fails_at(x: &Sym, i: &Sym, at: i32) -> Sym {
    let out = x.graph().host_fn(
        move |ts| {
            let i = ts[1]
                .to_ndarray::<i32>()?
                .iter()
                .copied()
                .next()
                .unwrap_or(-1);
            match i == at {
                true => Err(Error::invalid(format!("boom at {i}"))),
                false => Ok(vec![ts[0].clone()]),
            }
        },
        &[x, i],
        &[DType::F32],
        true,
    );
    out[0].set_shape(&[Some(2)])
}

#[test]
fn errors_in_loops_and_branches_say_where_in_both_modes() {
    // The interpreter and compiled code name the iteration of every loop
    // around a failing step and the branch it ran in, the outermost first,
    // in the same words (compiled code counts iterations in a register).
    let x = Tensor::from(ndarray::arr1(&[1.0f32, 2.0]).into_dyn());
    let nested = || {
        function(|x: Sym| {
            fori_loop(
                0,
                3,
                |i, c| {
                    let i10 = i * 10;
                    fori_loop(0, 4, move |j, d| vec![fails_at(&d[0], &(&i10 + j), 12)], c)
                },
                &[x],
            )
            .remove(0)
        })
    };
    let branch = || {
        function(|x: Sym| {
            fori_loop(
                0,
                5,
                |i, c| {
                    let hit = i.equal(3);
                    let i = i.clone();
                    cond(
                        &hit,
                        move |o| vec![fails_at(&o[0], &i, 3)],
                        |o| vec![o[0].clone() + 1.0],
                        c,
                    )
                },
                &[x],
            )
            .remove(0)
        })
    };
    let condition = || {
        function(|x: Sym| {
            let k0 = x.graph().scalar(DType::I32, 0.0);
            while_loop(
                |c| {
                    let k = c[1].clone();
                    fails_at(&c[0], &k, 4).reduce_sum(None, false).less(1e9)
                },
                |c| vec![c[0].clone(), &c[1] + 1],
                &[x, k0],
            )
            .remove(0)
        })
    };
    let cases: [(&dyn Fn() -> Function, &str); 3] = [
        (
            &nested,
            "in iteration 1 of the body: in iteration 2 of the body: boom at 12",
        ),
        (
            &branch,
            "in iteration 3 of the body: in branch 1: boom at 3",
        ),
        (
            &condition,
            "in the condition, before iteration 4: boom at 4",
        ),
    ];
    for (make, want) in cases {
        for f in both(make) {
            let err = f.call(std::slice::from_ref(&x)).unwrap_err().to_string();
            assert!(err.ends_with(want), "{want:?} is not the end of: {err}");
        }
    }
}

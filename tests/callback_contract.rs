//! The callback contract as a user meets it through the public API, in
//! interpreted and compiled mode: callable identity for CSE, constant
//! folding whatever the declared shape, ops over results of unknown rank,
//! and unbound callbacks reported before anything runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tensorlift::ir::Shape;
use tensorlift::{Code, DType, Error, Function, IrStage, Sym, Tensor, TensorSpec, function};

fn both(f: impl Fn() -> Function) -> [Function; 2] {
    [f(), f().jit_compile(true)]
}

fn x3() -> Tensor {
    common::f32s(&[1.0, 2.0, 3.0], &[3])
}

fn doubled(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    Ok(vec![Tensor::from(
        ins[0].array_view::<f32>()?.mapv(|v| v * 2.0),
    )])
}

/// Number of nodes of `op` in the optimized graph of `f` for `specs`.
fn count_ops(f: &Function, specs: &[TensorSpec], op: &str) -> usize {
    let text = f.compiler_ir(specs, IrStage::Optimized).unwrap();
    text.lines()
        .filter(|l| l.contains(&format!("= {op} ")))
        .count()
}

static DOUBLED_CALLS: AtomicUsize = AtomicUsize::new(0);

fn counted_doubled(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    DOUBLED_CALLS.fetch_add(1, Ordering::SeqCst);
    doubled(ins)
}

#[test]
fn the_same_rust_function_traced_twice_is_merged_when_stateless() {
    let spec = [TensorSpec::known(DType::F32, &[3])];
    for f in both(|| {
        function(|x: Sym| {
            let a = x
                .graph()
                .host_fn(counted_doubled, &[&x], &[DType::F32], false);
            let b = x
                .graph()
                .host_fn(counted_doubled, &[&x], &[DType::F32], false);
            &a[0] + &b[0]
        })
    }) {
        assert_eq!(count_ops(&f, &spec, "host_fn"), 1);
        let before = DOUBLED_CALLS.load(Ordering::SeqCst);
        let out = f.call(&[x3()]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![4.0, 8.0, 12.0]);
        assert_eq!(DOUBLED_CALLS.load(Ordering::SeqCst) - before, 1);
    }
}

#[test]
fn a_shared_closure_is_one_callable_and_distinct_closures_are_not() {
    let spec = [TensorSpec::known(DType::F32, &[3])];
    let shared: tensorlift::HostFnArc = Arc::new(doubled);
    for f in both(|| {
        let shared = shared.clone();
        function(move |x: Sym| {
            let g = x.graph();
            let a = g.host_fn_shared(&shared, &[&x], &[DType::F32], false);
            let b = g.host_fn_shared(&shared, &[&x], &[DType::F32], false);
            // Same callable, other declared shape: another callback.
            let c = g.host_fn_shared_with(
                "c",
                &shared,
                &[&x],
                &[DType::F32],
                &[Shape::known(&[3])],
                false,
            );
            // Two closures that capture something are two callables.
            let k = 2.0f32;
            let d = g.host_fn(
                move |ins: &[Tensor]| {
                    Ok(vec![Tensor::from(
                        ins[0].array_view::<f32>()?.mapv(|v| v * k),
                    )])
                },
                &[&x],
                &[DType::F32],
                false,
            );
            let e = g.host_fn(
                move |ins: &[Tensor]| {
                    Ok(vec![Tensor::from(
                        ins[0].array_view::<f32>()?.mapv(|v| v * k),
                    )])
                },
                &[&x],
                &[DType::F32],
                false,
            );
            &(&(&a[0] + &b[0]) + &c[0]) + &(&d[0] + &e[0])
        })
    }) {
        assert_eq!(count_ops(&f, &spec, "host_fn"), 4);
        let out = f.call(&[x3()]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![10.0, 20.0, 30.0]);
    }
}

#[test]
fn stateful_callbacks_of_one_callable_are_never_merged() {
    let spec = [TensorSpec::known(DType::F32, &[3])];
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let shared: tensorlift::HostFnArc = Arc::new(move |ins: &[Tensor]| {
        l.lock().unwrap().push(1);
        doubled(ins)
    });
    for f in both(|| {
        let shared = shared.clone();
        function(move |x: Sym| {
            let a = x
                .graph()
                .host_fn_shared(&shared, &[&x], &[DType::F32], true);
            let b = x
                .graph()
                .host_fn_shared(&shared, &[&x], &[DType::F32], true);
            &a[0] + &b[0]
        })
    }) {
        assert_eq!(count_ops(&f, &spec, "host_fn"), 2);
        log.lock().unwrap().clear();
        f.call(&[x3()]).unwrap();
        assert_eq!(log.lock().unwrap().len(), 2);
    }
}

static FOLD_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Returns `[x*2]` and `x` reversed as a `[1, n]` matrix (shapes not declared).
fn two_results(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    FOLD_CALLS.fetch_add(1, Ordering::SeqCst);
    let v = ins[0].array_view::<f32>()?;
    let mut rev: Vec<f32> = v.iter().copied().collect();
    rev.reverse();
    let n = rev.len();
    Ok(vec![
        Tensor::from(v.mapv(|x| x * 2.0)),
        Tensor::from(
            ndarray::Array2::from_shape_vec((1, n), rev)
                .unwrap()
                .into_dyn(),
        ),
    ])
}

#[test]
fn stateless_callbacks_on_constants_fold_whatever_their_declared_shape() {
    let spec = [TensorSpec::known(DType::F32, &[3])];
    for f in both(|| {
        function(|x: Sym| {
            let k = x.graph().constant(&common::f32s(&[1.0, 2.0, 3.0], &[3]));
            let r = x
                .graph()
                .host_fn(two_results, &[&k], &[DType::F32, DType::F32], false);
            // Neither result's shape is declared: the folded constants have
            // the shapes the callback returned, and ops after them see them.
            (&x + &r[0], r[1].reduce_sum(Some(&[-1]), false))
        })
    }) {
        let before = FOLD_CALLS.load(Ordering::SeqCst);
        assert_eq!(count_ops(&f, &spec, "host_fn"), 0);
        for _ in 0..3 {
            let out = f.call(&[x3()]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0, 6.0, 9.0]);
            assert_eq!(out[1].shape(), &[1]);
            assert_eq!(common::to_vec::<f32>(&out[1]), vec![6.0]);
        }
        // Folded once, while optimizing; calls never run it.
        assert_eq!(FOLD_CALLS.load(Ordering::SeqCst) - before, 1);
        let optimized = f.compiler_ir(&spec, IrStage::Optimized).unwrap();
        assert!(!optimized.contains("[*]"), "{optimized}");
    }
}

/// A callback whose result rank is only known when it runs: x as a
/// `[2, n/2]` matrix.
fn as_matrix(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    let v: Vec<f32> = ins[0].array_view::<f32>()?.iter().copied().collect();
    let n = v.len() / 2;
    Ok(vec![Tensor::from(
        ndarray::Array2::from_shape_vec((2, n), v)
            .unwrap()
            .into_dyn(),
    )])
}

#[test]
fn ops_over_results_of_unknown_rank_trace_and_run() {
    for f in both(|| {
        function(|x: Sym, row: Sym| {
            let m = x.graph().host_fn(as_matrix, &[&x], &[DType::F32], true);
            let m = &m[0];
            let total = m.reduce_sum(None, false);
            let rows = m.reduce_max(Some(&[-1]), true);
            let cols = m.reduce_sum(Some(&[0]), false);
            let shifted = m - &row; // broadcasts [2, n] with [n]
            let arg = m.argmax(-1);
            let prod = m.matmul(&m.transpose(&[1, 0]));
            vec![total, rows, cols, shifted, arg, prod]
        })
    }) {
        let x = common::f32s(&[1.0, 5.0, 2.0, 3.0, 4.0, 0.0], &[6]);
        let row = common::f32s(&[1.0, 1.0, 1.0], &[3]);
        let out = f.call(&[x, row]).unwrap();
        assert_eq!(out[0].shape(), &[] as &[usize]);
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![15.0]);
        assert_eq!(out[1].shape(), &[2, 1]);
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![5.0, 4.0]);
        assert_eq!(common::to_vec::<f32>(&out[2]), vec![4.0, 9.0, 2.0]);
        assert_eq!(out[3].shape(), &[2, 3]);
        assert_eq!(
            common::to_vec::<f32>(&out[3]),
            vec![0.0, 4.0, 1.0, 2.0, 3.0, -1.0]
        );
        assert_eq!(common::to_vec::<i64>(&out[4]), vec![1, 1]);
        assert_eq!(out[5].shape(), &[2, 2]);
        assert_eq!(common::to_vec::<f32>(&out[5]), vec![30.0, 23.0, 23.0, 25.0]);
        // Another run-time shape (rank 2 again, other columns) also works.
        let x = common::f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
        let row = common::f32s(&[0.0, 1.0], &[2]);
        let out = f.call(&[x, row]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![10.0]);
        assert_eq!(common::to_vec::<f32>(&out[3]), vec![1.0, 1.0, 3.0, 3.0]);
    }
}

#[test]
fn an_op_over_an_unknown_rank_that_does_not_fit_fails_when_it_runs() {
    for f in both(|| {
        function(|x: Sym| {
            let m = x.graph().host_fn(as_matrix, &[&x], &[DType::F32], true);
            m[0].reduce_sum(Some(&[2]), false)
        })
    }) {
        let e = f
            .call(&[common::f32s(&[1.0, 2.0, 3.0, 4.0], &[4])])
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("axis 2") && text.contains("callback_contract.rs"),
            "{text}"
        );
    }
}

/// Binds `name` in `g` to an identity host_fn that counts its calls.
fn bind_counting(g: &mut tensorlift::Graph, name: &str, count: Arc<AtomicUsize>) {
    g.bind(
        name,
        tensorlift::runtime::callback::HostCallback::new(
            tensorlift::ir::CallbackKind::HostFn,
            move |ins: &[Tensor]| {
                count.fetch_add(1, Ordering::SeqCst);
                Ok(ins.to_vec())
            },
        )
        .into_ref(),
    );
}

const TWO_CALLBACKS: &str = "graph @g {
  %x = parameter 0 : f32[3]
  %a = host_fn \"first\" (%x) stateful : (f32[3])
  %b = host_fn \"second\" (%a) stateful : (f32[3])
  %c = host_fn \"third\" (%b) stateful : (f32[3])
  return %c as \"c\"
}
";

#[test]
fn unbound_callbacks_are_all_reported_before_any_callback_runs() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let mut g = tensorlift::ir::text::parse(TWO_CALLBACKS, "two.tlir").unwrap();
    bind_counting(&mut g, "first", r);
    let check = |e: Error| {
        assert_eq!(e.code(), Code::NotFound, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("'second'") && text.contains("'third'") && !text.contains("'first'"),
            "{text}"
        );
        assert!(text.contains("two.tlir:4"), "{text}");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a callback ran: {text}");
    };
    check(tensorlift::runtime::interp::run(&g, &[x3()]).unwrap_err());
    // Compiled: the compile fails, or else the first call, before anything runs.
    match tensorlift::compiler::compile(&g, &Default::default()) {
        Err(e) => check(e),
        Ok(exe) => check(exe.run(&[x3()]).unwrap_err()),
    }
}

#[test]
fn compiling_a_whole_program_with_a_callback_of_unknown_shape_says_what_splits_it() {
    // At the top level the message spoke of loop bodies and said "compiled
    // code is split at it", which compiling a whole program does not do.
    let src = "graph @g {
  %x = parameter 0 : f32[3]
  %a = host_fn \"first\" (%x) stateful : (f32[*])
  return %a as \"a\"
}
";
    let g = tensorlift::ir::text::parse(src, "whole.tlir").unwrap();
    let e = tensorlift::compiler::compile(&g, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("host_fn 'a' (created at whole.tlir:3:3)")
            && e.contains("a program compiled whole")
            && e.contains("compile_graph and functions with jit_compile split")
            && !e.contains("loop or branch body"),
        "{e}"
    );
}

#[test]
fn unbound_callbacks_after_a_dynamic_split_are_reported_before_any_runs() {
    // A program split at a callback of unknown shape: the callbacks after
    // the split must be checked before the first one runs.
    let src = "graph @g {
  %x = parameter 0 : f32[3]
  %a = host_fn \"first\" (%x) stateful : (f32[*])
  %b = host_fn \"second\" (%a) stateful : (f32[*])
  return %b as \"b\"
}
";
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let mut g = tensorlift::ir::text::parse(src, "split.tlir").unwrap();
    bind_counting(&mut g, "first", r);
    let e = tensorlift::compile_graph(&g, &Default::default())
        .and_then(|c| c.run(&[x3()]))
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(e.to_string().contains("'second'"), "{e}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "{e}");
}

#[cfg(feature = "python")]
#[test]
fn the_same_python_callable_traced_twice_is_merged_when_stateless() {
    use pyo3::prelude::*;
    let spec = [TensorSpec::known(DType::F32, &[3])];
    let (func, calls) = Python::attach(|py| {
        let globals = pyo3::types::PyDict::new(py);
        let code =
            c"import numpy as np\ncalls = []\ndef f(x):\n    calls.append(1)\n    return x * 2\n";
        py.run(code, Some(&globals), None).unwrap();
        (
            globals.get_item("f").unwrap().unwrap().unbind(),
            globals.get_item("calls").unwrap().unwrap().unbind(),
        )
    });
    let count = || Python::attach(|py| calls.bind(py).len().unwrap());
    for f in both(|| {
        let func = Python::attach(|py| func.clone_ref(py));
        function(move |x: Sym| {
            let g = x.graph();
            let one = |stateful| {
                let func = Python::attach(|py| func.clone_ref(py));
                g.numpy_function(func, &[&x], &[DType::F32], stateful)[0].clone()
            };
            // Two stateless calls merge; a stateful one of the same callable
            // stays its own node.
            &(&one(false) + &one(false)) + &one(true)
        })
    }) {
        assert_eq!(count_ops(&f, &spec, "numpy_function"), 2);
        let before = count();
        let out = f.call(&[x3()]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![6.0, 12.0, 18.0]);
        assert_eq!(count() - before, 2);
    }
}

#[test]
fn ops_over_unknown_ranks_print_and_parse_back() {
    let f = function(|x: Sym, row: Sym| {
        let m = x.graph().host_fn(as_matrix, &[&x], &[DType::F32], true);
        let m = &m[0];
        vec![
            m.reduce_sum(None, false),
            m.reduce_min(Some(&[-1]), true),
            m.argmin(0),
            m.less(&row),
            m.matmul(&m.transpose(&[1, 0])),
            m.less(&row).select(m, 1.0f32),
            m.broadcast_to(&[2, 2, 3]),
            m.slice(&[0, 1], &[2, 2], &[1, 1]),
            m.reverse(&[-1, 0]).concat(std::slice::from_ref(m), -1),
            m.take(&row.cast(DType::I64), 1),
        ]
    });
    let spec = [
        TensorSpec::known(DType::F32, &[6]),
        TensorSpec::known(DType::F32, &[3]),
    ];
    let text = f.compiler_ir(&spec, IrStage::Traced).unwrap();
    for op in [
        "unranked_reduce_sum",
        "unranked_reduce_min",
        "unranked_argmin",
        "unranked_compare_lt",
        "unranked_matmul",
        "unranked_transpose",
        "unranked_select",
        "unranked_broadcast_to",
        "unranked_slice",
        "unranked_reverse",
        "unranked_concatenate",
        "unranked_take",
    ] {
        assert!(text.contains(&format!("= {op}(")), "{op} missing:\n{text}");
    }
    let parsed = tensorlift::ir::text::parse(&text, "traced.tlir").unwrap();
    assert_eq!(tensorlift::ir::text::print(&parsed), text);
    tensorlift::ir::verify(&parsed).unwrap();
}

#[test]
fn layout_ops_over_results_of_unknown_rank_trace_and_run() {
    for f in both(|| {
        function(|x: Sym| {
            let m = x.graph().host_fn(as_matrix, &[&x], &[DType::F32], true);
            let m = &m[0];
            let idx = x
                .graph()
                .constant(&Tensor::from(ndarray::arr1(&[1i64, 0]).into_dyn()));
            vec![
                m.greater(2.0f32).select(m, 0.0f32),
                m.broadcast_to(&[3, 2, 2]),
                m.slice(&[0, 1], &[2, 2], &[1, 1]),
                m.reverse(&[-1]),
                m.concat(std::slice::from_ref(m), -2),
                m.take(&idx, -1),
            ]
        })
    }) {
        let out = f
            .call(&[common::f32s(&[1.0, 2.0, 3.0, 4.0], &[4])])
            .unwrap();
        let expect: [(&[usize], Vec<f32>); 6] = [
            (&[2, 2], vec![0.0, 0.0, 3.0, 4.0]),
            (&[3, 2, 2], [1.0, 2.0, 3.0, 4.0].repeat(3)),
            (&[2, 1], vec![2.0, 4.0]),
            (&[2, 2], vec![2.0, 1.0, 4.0, 3.0]),
            (&[4, 2], vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]),
            (&[2, 2], vec![2.0, 1.0, 4.0, 3.0]),
        ];
        for (i, (o, (shape, values))) in out.iter().zip(expect).enumerate() {
            assert_eq!(o.shape(), shape, "output {i}");
            assert_eq!(common::to_vec::<f32>(o), values, "output {i}");
        }
    }
}

//! `host_fn`: Rust callbacks in interpreted and compiled code — results,
//! checks, effects, errors, panics, lifetime, threads.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorlift::ir::Shape;
use tensorlift::{
    Code, DType, Error, Function, Sym, Tensor, TensorMut, TensorRef, TensorSpec, function,
};

fn both(f: impl Fn() -> Function) -> [Function; 2] {
    [f(), f().jit_compile(true)]
}

fn scale2(ins: &[Tensor]) -> Result<Vec<Tensor>, Error> {
    let v = ins[0].array_view::<f32>()?;
    Ok(vec![Tensor::from(v.mapv(|x| x * 2.0))])
}

#[test]
fn host_fn_runs_in_both_modes() {
    for f in both(|| {
        function(|x: Sym| {
            let y = x.graph().host_fn_with(
                "scale",
                scale2,
                &[&x],
                &[DType::F32],
                &[Shape::known(&[3])],
                false,
            );
            &y[0] + 1.0
        })
    }) {
        let out = f.call(&[common::f32s(&[1.0, 2.0, 3.0], &[3])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0, 5.0, 7.0]);
    }
}

#[test]
fn set_shape_declares_a_result_shape() {
    for f in both(|| {
        function(|x: Sym| {
            let y = x.graph().host_fn(scale2, &[&x], &[DType::F32], false);
            y[0].set_shape(&[Some(3)]).exp()
        })
    }) {
        let out = f.call(&[common::f32s(&[0.0, 0.0, 0.0], &[3])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![1.0; 3]);
        // A result that contradicts the declared shape is an error naming the op and output.
        let e = f.call(&[common::f32s(&[0.0; 4], &[4])]).unwrap_err();
        assert!(
            e.to_string().contains(
                "output 0 of host_fn 'host_fn' has shape [4], but its declared shape is [3]"
            ),
            "{e}"
        );
    }
}

#[test]
fn stateful_callbacks_run_once_per_call_in_order_and_are_never_removed() {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    for (mode, f) in both(|| {
        let l1 = log.clone();
        let l2 = log.clone();
        function(move |x: Sym| {
            let (l1, l2) = (l1.clone(), l2.clone());
            // Unused results: only the effect matters.
            x.graph().host_fn(
                move |_| {
                    l1.lock().unwrap().push("first");
                    Ok(vec![])
                },
                &[&x],
                &[],
                true,
            );
            x.graph().host_fn(
                move |_| {
                    l2.lock().unwrap().push("second");
                    Ok(vec![])
                },
                &[&x],
                &[],
                true,
            );
            x.neg()
        })
    })
    .into_iter()
    .enumerate()
    {
        log.lock().unwrap().clear();
        for _ in 0..3 {
            f.call(&[common::f32s(&[1.0], &[1])]).unwrap();
        }
        assert_eq!(
            *log.lock().unwrap(),
            ["first", "second", "first", "second", "first", "second"],
            "mode {mode}"
        );
    }
}

#[test]
fn stateless_callbacks_are_dropped_when_unused_and_folded_on_constants() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let f = function(move |x: Sym| {
        let c2 = c.clone();
        let counting = move |ins: &[Tensor]| {
            c2.fetch_add(1, Ordering::SeqCst);
            scale2(ins)
        };
        let _unused = x
            .graph()
            .host_fn(counting.clone(), &[&x], &[DType::F32], false);
        let k = x.graph().constant(&common::f32s(&[1.0, 2.0], &[2]));
        let folded = x.graph().host_fn_with(
            "fold",
            counting,
            &[&k],
            &[DType::F32],
            &[Shape::known(&[2])],
            false,
        );
        &x + &folded[0]
    });
    let out = f.call(&[common::f32s(&[0.0, 0.0], &[2])]).unwrap();
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0, 4.0]);
    // Folded once while optimizing; the unused one never ran; calls do not run it again.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    f.call(&[common::f32s(&[0.0, 0.0], &[2])]).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn wrong_results_errors_and_panics_are_clean_and_recoverable() {
    for f in both(|| {
        function(|x: Sym, mode: Sym| {
            let y = x.graph().host_fn_with(
                "scale",
                |ins: &[Tensor]| {
                    let m = ins[1].array_view::<i32>()?[[]];
                    match m {
                        0 => scale2(ins),
                        1 => Ok(vec![Tensor::from(
                            ins[0].array_view::<f32>()?.mapv(f64::from),
                        )]),
                        2 => Ok(vec![]),
                        3 => Err(Error::OutOfRange(tensorlift::Detail::msg("no more data"))),
                        _ => panic!("boom"),
                    }
                },
                &[&x, &mode],
                &[DType::F32],
                &[Shape::known(&[2])],
                false,
            );
            y[0].clone()
        })
    }) {
        let x = common::f32s(&[1.0, 2.0], &[2]);
        let m = |v: i32| Tensor::scalar(v);
        let e = f.call(&[x.clone(), m(1)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("output 0 of host_fn 'scale' is float64, but Tout says float32"),
            "{e}"
        );
        let e = f.call(&[x.clone(), m(2)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("host_fn 'scale' returned 0 value(s), but Tout declares 1"),
            "{e}"
        );
        let e = f.call(&[x.clone(), m(3)]).unwrap_err();
        assert_eq!(e.code(), Code::OutOfRange);
        assert!(
            e.to_string().contains("no more data") && e.to_string().contains("host_fn 'scale'"),
            "{e}"
        );
        let e = f.call(&[x.clone(), m(4)]).unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(
            e.to_string().contains("the callback panicked: boom")
                && e.to_string().contains("host_fn.rs"),
            "{e}"
        );
        // Still usable.
        assert_eq!(
            common::to_vec::<f32>(&f.call(&[x, m(0)]).unwrap()[0]),
            vec![2.0, 4.0]
        );
    }
}

#[test]
fn undeclared_shapes_split_compiled_code_and_compile_once_per_shape() {
    // The callback returns the first n elements, n read from the data: its
    // output shape is only known at run time.
    let head = |ins: &[Tensor]| -> Result<Vec<Tensor>, Error> {
        let x = ins[0].array_view::<f32>()?;
        let n = x[[0]] as usize;
        Ok(vec![Tensor::from(
            x.slice(ndarray::s![..n]).to_owned().into_dyn(),
        )])
    };
    let body = move |x: Sym| {
        let h = x.graph().host_fn(head, &[&x], &[DType::F32], true)[0].set_shape(&[None]);
        (&h * 3.0).reduce_sum(None, false) + x.reduce_max(None, false)
    };
    let interp = function(body);
    let jit = function(body).jit_compile(true);
    let x = |n: f32| common::f32s(&[n, 1.0, 2.0, 3.0], &[4]);
    for n in [2.0f32, 3.0, 2.0, 4.0, 3.0] {
        let a = interp.call(&[x(n)]).unwrap();
        let b = jit.call(&[x(n)]).unwrap();
        assert_eq!(
            common::to_vec::<f32>(&a[0]),
            common::to_vec::<f32>(&b[0]),
            "n={n}"
        );
    }
    // The part before the callback once, the part after it once per shape (2, 3, 4).
    assert_eq!(jit.compile_count(), 4);
}

#[test]
fn callbacks_live_as_long_as_their_graphs() {
    let captured = Arc::new(common::f32s(&[5.0], &[1]));
    for jit in [false, true] {
        for _ in 0..100 {
            let t = captured.clone();
            let f = function(move |x: Sym| {
                let t = t.clone();
                x.graph().host_fn_with(
                    "add",
                    move |ins: &[Tensor]| {
                        Ok(vec![Tensor::from(
                            &ins[0].array_view::<f32>()? + &t.array_view::<f32>()?,
                        )])
                    },
                    &[&x],
                    &[DType::F32],
                    &[Shape::known(&[1])],
                    true,
                )[0]
                .clone()
            })
            .jit_compile(jit);
            assert_eq!(
                common::to_vec::<f32>(&f.call(&[common::f32s(&[1.0], &[1])]).unwrap()[0]),
                vec![6.0]
            );
        }
        assert_eq!(
            Arc::strong_count(&captured),
            1,
            "jit={jit}: a dropped function still references its callback"
        );
    }
}

#[test]
fn unbound_callbacks_in_text_are_an_error_before_anything_runs() {
    let g = tensorlift::ir::text::parse("graph @g {\n  %x = parameter 0 : f32[2]\n  %y = host_fn \"scale\" (%x) : (f32[2])\n  return %y as \"y\"\n}\n", "g.tlir").unwrap();
    let e = tensorlift::runtime::interp::run(&g, &[common::f32s(&[1.0, 2.0], &[2])]).unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(
        e.to_string()
            .contains("1 callback(s) have no callable bound: 'scale'"),
        "{e}"
    );
    let e = tensorlift::compiler::compile(&g, &Default::default())
        .unwrap()
        .run(&[common::f32s(&[1.0, 2.0], &[2])])
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Printing names the callback (its body is not serialized).
    assert!(tensorlift::ir::text::print(&g).contains("host_fn \"scale\" (%x)"));
}

#[test]
fn host_fns_run_in_parallel_from_eight_threads() {
    let live = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (l, p) = (live.clone(), peak.clone());
    let f = function(move |x: Sym| {
        let (l, p) = (l.clone(), p.clone());
        x.graph().host_fn_with(
            "slow",
            move |ins: &[Tensor]| {
                let now = l.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                l.fetch_sub(1, Ordering::SeqCst);
                scale2(ins)
            },
            &[&x],
            &[DType::F32],
            &[Shape::known(&[1])],
            true,
        )[0]
        .clone()
    })
    .jit_compile(true);
    let c = Arc::new(f.compile(&[TensorSpec::known(DType::F32, &[1])]).unwrap());
    let hs: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                let out = c.call(&[common::f32s(&[i as f32], &[1])]).unwrap();
                assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0 * i as f32]);
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert!(
        peak.load(Ordering::SeqCst) >= 2,
        "callbacks never overlapped"
    );
}

#[test]
fn callbacks_may_call_tensorlift_functions() {
    // A callback that runs another function (interpreted and compiled), and
    // one that calls the very function it belongs to with another shape.
    let inner = Arc::new(function(|x: Sym| x.exp().reduce_sum(None, true)).jit_compile(true));
    for jit in [false, true] {
        let inner = inner.clone();
        let f = function(move |x: Sym| {
            let inner = inner.clone();
            x.graph().host_fn_with(
                "nested",
                move |ins: &[Tensor]| inner.call(ins),
                &[&x],
                &[DType::F32],
                &[Shape::known(&[1])],
                true,
            )[0]
            .clone()
                + 1.0
        })
        .jit_compile(jit);
        let out = f.call(&[common::f32s(&[0.0, 0.0], &[2])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0]);
    }
    let slot: Arc<std::sync::OnceLock<Function>> = Arc::new(std::sync::OnceLock::new());
    let s2 = slot.clone();
    let f = function(move |x: Sym| {
        let s2 = s2.clone();
        let recurse = move |ins: &[Tensor]| -> Result<Vec<Tensor>, Error> {
            let n = ins[0].len();
            if n == 1 {
                return Ok(vec![ins[0].clone()]);
            }
            // Call the same function on the first element only.
            let first = common::f32s(&[ins[0].array_view::<f32>()?[[0]]], &[1]);
            s2.get()
                .ok_or_else(|| Error::internal("not set"))?
                .call(&[first])
        };
        x.graph().host_fn_with(
            "self_call",
            recurse,
            &[&x],
            &[DType::F32],
            &[Shape::known(&[1])],
            true,
        )[0]
        .clone()
    })
    .jit_compile(true);
    let _ = slot.set(f.clone());
    let out = f.call(&[common::f32s(&[7.0, 8.0, 9.0], &[3])]).unwrap();
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![7.0]);
    assert_eq!(f.compile_count(), 2);
}

/// `out = a * b + c` and `sum(a)`, written into runtime-provided buffers.
fn fma_and_sum(ins: &[TensorRef<'_>], outs: &mut [TensorMut<'_>]) -> Result<(), Error> {
    let (a, b) = (ins[0].slice::<f32>()?, ins[1].array::<f32>()?);
    let c = ins[2].slice::<f32>()?[0];
    let b = b.as_slice().unwrap_or(&[]);
    for ((o, x), y) in outs[0].slice_mut::<f32>()?.iter_mut().zip(a).zip(b) {
        *o = x * y + c;
    }
    outs[1].array_mut::<f64>()?[[]] = a.iter().map(|v| f64::from(*v)).sum();
    Ok(())
}

#[test]
fn host_fn_into_fills_runtime_buffers_in_both_modes() {
    for f in both(|| {
        function(|x: Sym| {
            let g = x.graph();
            // Operands: the caller's input, a temporary and a constant.
            let t = x.exp();
            let c = g.scalar(DType::F32, 0.5).reshape(&[1]);
            let r = g.host_fn_into(
                "fma_sum",
                fma_and_sum,
                &[&x, &t, &c],
                &[DType::F32, DType::F64],
                &[&[2, 2], &[]],
                false,
            );
            (&r[0] * 2.0, r[1].clone())
        })
    }) {
        let x = common::f32s(&[0.0, 1.0, 2.0, 3.0], &[2, 2]);
        for _ in 0..2 {
            let out = f.call(std::slice::from_ref(&x)).unwrap();
            let want: Vec<f32> = [0.0f32, 1.0, 2.0, 3.0]
                .iter()
                .map(|v| (v * v.exp() + 0.5) * 2.0)
                .collect();
            assert_eq!(out[0].shape(), &[2, 2]);
            let want = common::f32s(&want, &[2, 2]);
            common::assert_close(&out[0], &want, 1e-6, 0.0, "host_fn_into");
            assert_eq!(common::to_vec::<f64>(&out[1]), vec![6.0]);
        }
        // The caller's input was only read.
        assert_eq!(common::to_vec::<f32>(&x), vec![0.0, 1.0, 2.0, 3.0]);
    }
}

#[test]
fn host_fn_into_errors_panics_and_bad_declarations() {
    for f in both(|| {
        function(|x: Sym| {
            x.graph().host_fn_into(
                "picky",
                |ins: &[TensorRef<'_>], outs: &mut [TensorMut<'_>]| {
                    let v = ins[0].slice::<i32>()?[0];
                    match v {
                        0 => {
                            outs[0].slice_mut::<i32>()?[0] = 7;
                            Ok(())
                        }
                        1 => Err(Error::OutOfRange(tensorlift::Detail::msg("no more data"))),
                        2 => {
                            // Viewing with the wrong element type is an error, not UB.
                            outs[0].slice_mut::<f32>()?[0] = 1.0;
                            Ok(())
                        }
                        _ => panic!("boom"),
                    }
                },
                &[&x],
                &[DType::I32],
                &[&[1]],
                true,
            )[0]
            .clone()
        })
    }) {
        let m = |v: i32| Tensor::from(ndarray::arr1(&[v]).into_dyn());
        let e = f.call(&[m(1)]).unwrap_err();
        assert_eq!(e.code(), Code::OutOfRange);
        assert!(
            e.to_string().contains("no more data") && e.to_string().contains("'picky'"),
            "{e}"
        );
        let e = f.call(&[m(2)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("cannot view int32 elements as float32"),
            "{e}"
        );
        let e = f.call(&[m(3)]).unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(e.to_string().contains("the callback panicked: boom"), "{e}");
        assert_eq!(common::to_vec::<i32>(&f.call(&[m(0)]).unwrap()[0]), vec![7]);
    }
    // Declarations are checked when tracing, naming the op and its site.
    let bad = |tout: &'static [DType], shapes: &'static [&'static [usize]]| {
        function(move |x: Sym| {
            x.graph()
                .host_fn_into(
                    "bad",
                    |_: &[TensorRef<'_>], _: &mut [TensorMut<'_>]| Ok(()),
                    &[&x],
                    tout,
                    shapes,
                    false,
                )
                .into_iter()
                .next()
                .unwrap_or(x)
        })
        .call(&[Tensor::scalar(1.0f32)])
        .unwrap_err()
    };
    let e = bad(&[DType::F32], &[]);
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.to_string()
            .contains("host_fn_into output_shapes has 0 entries, but Tout has 1"),
        "{e}"
    );
    assert!(e.to_string().contains("host_fn.rs"), "{e}");
    let e = bad(&[DType::String], &[&[1]]);
    assert!(e.to_string().contains("outputs cannot be strings"), "{e}");
}

//! numpy_function / py_func: Python callbacks with NumPy arrays, in
//! interpreted and compiled code (the seed pages' contract).
#![cfg(feature = "python")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use pyo3::prelude::*;
use tensorlift::ir::{CallbackKind, Shape};
use tensorlift::{Code, DType, Function, Sym, Tensor, TensorSpec, function};

use common::pyfn;

fn both(f: impl Fn() -> Function) -> [Function; 2] {
    [f(), f().jit_compile(true)]
}

#[test]
fn seed_example_in_place_write_on_a_constant() {
    // tf.numpy_function's page: x[0] = 0.; return x on a constant gives [0., 2.] every call.
    let func = pyfn("def f(x):\n    x[0] = 0.\n    return x\n", "f");
    for f in both(|| {
        let func = Python::attach(|py| func.clone_ref(py));
        function(move |dummy: Sym| {
            let c = dummy.graph().constant(&common::f32s(&[1.0, 2.0], &[2]));
            let func = Python::attach(|py| func.clone_ref(py));
            let y = dummy.graph().numpy_function_with(
                CallbackKind::NumpyFunction,
                "zero_first",
                func,
                &[&c],
                &[DType::F32],
                &[Shape::known(&[2])],
                true,
            );
            (y[0].clone(), c)
        })
    }) {
        for _ in 0..3 {
            let out = f.call(&[common::f32s(&[0.0], &[1])]).unwrap();
            assert_eq!(common::to_vec::<f32>(&out[0]), vec![0.0, 2.0]);
            // The constant itself never changed.
            assert_eq!(common::to_vec::<f32>(&out[1]), vec![1.0, 2.0]);
        }
    }
}

#[test]
fn results_are_checked_and_converted() {
    let src = "def f(x, mode):\n    m = int(mode)\n    if m == 0: return x * 2\n    if m == 1: return x.astype(np.float64)\n    if m == 2: return [[1, 2, 3]]\n    if m == 3: return 7\n    if m == 4: return np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))[:, ::2]\n    if m == 5: return np.array([1, 'a'], dtype=object)\n    if m == 7: return [1, 2, 3]\n    if m == 8: return [x]\n    return (x, x)\n";
    let func = pyfn(src, "f");
    for (i, f) in both(|| {
        let func = Python::attach(|py| func.clone_ref(py));
        function(move |x: Sym, mode: Sym| {
            let func = Python::attach(|py| func.clone_ref(py));
            x.graph()
                .numpy_function(func, &[&x, &mode], &[DType::F32], false)[0]
                .clone()
        })
        .input_signature(vec![
            TensorSpec::new(DType::F32, &[None]),
            TensorSpec::known(DType::I32, &[]),
        ])
    })
    .into_iter()
    .enumerate()
    {
        let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
        let m = |v: i32| Tensor::scalar(v);
        let _ = i;
        assert_eq!(
            common::to_vec::<f32>(&f.call(&[x.clone(), m(0)]).unwrap()[0]),
            vec![2.0, 4.0, 6.0]
        );
        let e = f.call(&[x.clone(), m(1)]).unwrap_err();
        assert!(
            e.to_string().contains(
                "output 0 of numpy_function 'numpy_function' is float64, but Tout says float32"
            ),
            "{e}"
        );
        // A list is a sequence of outputs, also for one Tout (TensorFlow's
        // rule): `[[1, 2, 3]]` is one output, a list taking the declared
        // dtype; `[1, 2, 3]` is three outputs; `[x]` is `x`.
        let listed = f.call(&[x.clone(), m(2)]).unwrap();
        assert_eq!(listed[0].shape(), &[3]);
        assert_eq!(common::to_vec::<f32>(&listed[0]), vec![1.0, 2.0, 3.0]);
        let e = f.call(&[x.clone(), m(7)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("returned 3 value(s), but Tout declares 1"),
            "{e}"
        );
        let one = f.call(&[x.clone(), m(8)]).unwrap();
        assert_eq!(one[0].shape(), &[3]);
        assert_eq!(common::to_vec::<f32>(&one[0]), vec![1.0, 2.0, 3.0]);
        assert_eq!(
            common::to_vec::<f32>(&f.call(&[x.clone(), m(3)]).unwrap()[0]),
            vec![7.0]
        );
        let fortran = f.call(&[x.clone(), m(4)]).unwrap();
        assert_eq!(fortran[0].shape(), &[2, 2]);
        assert_eq!(common::to_vec::<f32>(&fortran[0]), vec![0.0, 2.0, 3.0, 5.0]);
        let e = f.call(&[x.clone(), m(5)]).unwrap_err();
        assert_eq!(e.code(), Code::Unimplemented, "{e}");
        let e = f.call(&[x, m(6)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("returned 2 value(s), but Tout declares 1"),
            "{e}"
        );
    }
}

#[test]
fn exceptions_map_to_error_kinds_with_tracebacks() {
    let src = "def f(x, k):\n    k = int(k)\n    if k == 0: raise ValueError('bad value')\n    if k == 1: raise TypeError('bad type')\n    if k == 2: raise StopIteration()\n    if k == 3: raise MemoryError()\n    if k == 4: raise NotImplementedError('later')\n    if k == 5: raise KeyError('other')\n    return x\n";
    let func = pyfn(src, "f");
    for f in both(|| {
        let func = Python::attach(|py| func.clone_ref(py));
        function(move |x: Sym, k: Sym| {
            let func = Python::attach(|py| func.clone_ref(py));
            x.graph().numpy_function_with(
                CallbackKind::PyFunc,
                "risky",
                func,
                &[&x, &k],
                &[DType::F32],
                &[Shape::known(&[1])],
                true,
            )[0]
            .clone()
        })
    }) {
        let x = common::f32s(&[1.0], &[1]);
        let expect = [
            Code::InvalidArgument,
            Code::InvalidArgument,
            Code::OutOfRange,
            Code::ResourceExhausted,
            Code::Unimplemented,
            Code::Unknown,
        ];
        for (k, code) in expect.iter().enumerate() {
            let e = f.call(&[x.clone(), Tensor::scalar(k as i32)]).unwrap_err();
            assert_eq!(e.code(), *code, "k={k}: {e}");
            let msg = e.to_string();
            // The node names the op and its name once; the exception names
            // the Python function (it repeated "py_func 'risky'").
            assert!(
                msg.contains("py_func 'risky'")
                    && msg.contains(": f() raised Traceback")
                    && msg.matches("py_func 'risky'").count() == 1
                    && msg.contains("line"),
                "k={k}: {msg}"
            );
        }
        assert!(
            f.call(&[x.clone(), Tensor::scalar(0i32)])
                .unwrap_err()
                .to_string()
                .contains("ValueError: bad value")
        );
        // Still usable after every error.
        assert_eq!(
            common::to_vec::<f32>(&f.call(&[x, Tensor::scalar(9i32)]).unwrap()[0]),
            vec![1.0]
        );
    }
}

#[test]
fn every_dtype_passes_through() {
    let ident = pyfn("def f(x):\n    return x.copy()\n", "f");
    let cases: Vec<Tensor> = vec![
        Tensor::from(ndarray::arr1(&[true, false]).into_dyn()),
        Tensor::from(ndarray::arr1(&[-3i8, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[-3i16, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[i32::MIN, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[i64::MAX, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[255u8, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[65535u16, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[u32::MAX, 4]).into_dyn()),
        Tensor::from(ndarray::arr1(&[u64::MAX, 4]).into_dyn()),
        Tensor::from(
            ndarray::arr1(&[half::f16::from_f32(1.5), half::f16::from_f32(-0.25)]).into_dyn(),
        ),
        Tensor::from(ndarray::arr1(&[1.5f32, f32::NAN]).into_dyn()),
        Tensor::from(ndarray::arr1(&[1.5f64, -0.0]).into_dyn()),
        Tensor::from(ndarray::arr1(&[num_complex::Complex32::new(1.0, -2.0)]).into_dyn()),
        Tensor::from(ndarray::arr1(&[num_complex::Complex64::new(1.0, -2.0)]).into_dyn()),
        Tensor::from(
            ndarray::ArrayD::from_shape_vec(vec![2], vec!["ab".to_string(), "γ".to_string()])
                .unwrap(),
        ),
    ];
    for t in cases {
        let d = t.dtype();
        let shape = t.shape().to_vec();
        for f in both(|| {
            let func = Python::attach(|py| ident.clone_ref(py));
            let shape = Shape::known(&shape);
            function(move |x: Sym| {
                let func = Python::attach(|py| func.clone_ref(py));
                x.graph().numpy_function_with(
                    CallbackKind::NumpyFunction,
                    "ident",
                    func,
                    &[&x],
                    &[d],
                    std::slice::from_ref(&shape),
                    false,
                )[0]
                .clone()
            })
        }) {
            let out = f
                .call(std::slice::from_ref(&t))
                .unwrap_or_else(|e| panic!("{d}: {e}"));
            assert!(common::same_bits(&out[0], &t), "{d}: {:?} vs {t:?}", out[0]);
        }
    }
}

#[test]
fn none_for_empty_tout_and_stateful_order() {
    let src = "log = []\ndef a(x):\n    log.append('a')\n    return None\ndef b(x):\n    log.append('b')\n";
    let (a, b) = (pyfn(src, "a"), pyfn(src, "b"));
    let _ = b;
    for f in both(|| {
        let a = Python::attach(|py| a.clone_ref(py));
        function(move |x: Sym| {
            let (a1, a2) = Python::attach(|py| (a.clone_ref(py), a.clone_ref(py)));
            x.graph().numpy_function(a1, &[&x], &[], true);
            x.graph().numpy_function(a2, &[&x], &[], true);
            x.neg()
        })
    }) {
        let log_len = || {
            Python::attach(|py| {
                a.bind(py)
                    .getattr("__globals__")
                    .unwrap()
                    .get_item("log")
                    .unwrap()
                    .len()
                    .unwrap()
            })
        };
        let before = log_len();
        f.call(&[common::f32s(&[1.0], &[1])]).unwrap();
        assert_eq!(log_len(), before + 2, "both stateful callbacks ran once");
    }
}

#[test]
fn python_callbacks_from_eight_threads_do_not_deadlock() {
    let func = pyfn("def f(x):\n    return x + np.float32(1)\n", "f");
    let f = function(move |x: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        x.graph().numpy_function_with(
            CallbackKind::NumpyFunction,
            "inc",
            func,
            &[&x],
            &[DType::F32],
            &[Shape::known(&[4])],
            false,
        )[0]
        .clone()
            * 2.0
    })
    .jit_compile(true);
    let c = std::sync::Arc::new(f.compile(&[TensorSpec::known(DType::F32, &[4])]).unwrap());
    let hs: Vec<_> = (0..8)
        .map(|i| {
            let c = c.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let out = c.call(&[common::f32s(&[i as f32; 4], &[4])]).unwrap();
                    assert_eq!(
                        common::to_vec::<f32>(&out[0]),
                        vec![2.0 * (i as f32 + 1.0); 4]
                    );
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn dropped_functions_release_their_python_callables() {
    let func = pyfn("def f(x):\n    return x\n", "f");
    let refcount = || {
        Python::attach(|py| {
            py.import("sys")
                .unwrap()
                .call_method1("getrefcount", (func.bind(py),))
                .unwrap()
                .extract::<isize>()
                .unwrap()
        })
    };
    let baseline = refcount();
    for jit in [false, true] {
        for _ in 0..1000 {
            let f = {
                let func = Python::attach(|py| func.clone_ref(py));
                function(move |x: Sym| {
                    let func = Python::attach(|py| func.clone_ref(py));
                    x.graph().numpy_function_with(
                        CallbackKind::NumpyFunction,
                        "id",
                        func,
                        &[&x],
                        &[DType::F32],
                        &[Shape::known(&[1])],
                        true,
                    )[0]
                    .clone()
                })
                .jit_compile(jit)
            };
            f.call(&[common::f32s(&[1.0], &[1])]).unwrap();
        }
    }
    assert_eq!(
        refcount(),
        baseline,
        "a dropped function still references its Python callable"
    );
}

#[test]
fn py_function_runs_log_huber_eagerly_and_is_rejected_by_the_jit() {
    // The py_function page's example, with tensorlift's names.
    let src = "import tensorlift as tl\ndef log_huber(x, m):\n    if tl.abs(x) <= m:\n        return x**2\n    else:\n        return m**2 * (1 - 2 * tl.math.log(m) + tl.math.log(x**2))\n";
    let func = std::sync::Arc::new(pyfn(src, "log_huber"));
    let body = move |x: Sym, m: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        x.graph().py_function(func, &[&x, &m], &[DType::F32])[0].clone()
    };
    let f = function(body.clone());
    let y = f
        .call(&[Tensor::scalar(1.0f32), Tensor::scalar(2.0f32)])
        .unwrap();
    assert_eq!(common::to_vec::<f32>(&y[0]), vec![1.0]);
    let y = f
        .call(&[Tensor::scalar(3.0f32), Tensor::scalar(2.0f32)])
        .unwrap();
    let want = 4.0 * (1.0 - 2.0 * 2.0f32.ln() + 9.0f32.ln());
    assert!((common::to_vec::<f32>(&y[0])[0] - want).abs() < 1e-5);
    // Under jit_compile=true: a compile-time error naming py_function, the
    // node and its creation site, before the callback ever runs.
    let e = function(body)
        .jit_compile(true)
        .compile(&[
            TensorSpec::known(DType::F32, &[]),
            TensorSpec::known(DType::F32, &[]),
        ])
        .unwrap_err();
    assert_eq!(e.code(), Code::JitIncompatible);
    let msg = e.to_string();
    assert!(
        msg.contains("py_function 'py_function' (created at tests/numpy_function.rs"),
        "{msg}"
    );
    assert!(
        msg.contains("jit_compile=true")
            && msg.contains("numpy_function/py_func")
            && msg.contains("jit_compile=false"),
        "{msg}"
    );
}

#[test]
fn eager_tensors_have_numpy_shape_dtype_and_operators() {
    let src = "import numpy as np\ndef f(x):\n    assert x.shape == [2, 2], x.shape\n    assert x.dtype == 'float64'\n    a = np.asarray(x)\n    assert (a == x.numpy()).all()\n    y = (x * 2 + 1) / 2 - x\n    assert bool((y == 0.5).numpy().all())\n    return -abs(y) + np.ones((2, 2))\n";
    let func = pyfn(src, "f");
    let f = function(move |x: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        x.graph().py_function(func, &[&x], &[DType::F64])[0].clone()
    });
    let x = Tensor::from(ndarray::arr2(&[[1.0f64, 2.0], [3.0, 4.0]]).into_dyn());
    let y = f.call(&[x]).unwrap();
    assert_eq!(common::to_vec::<f64>(&y[0]), vec![0.5; 4]);
}

fn call_f32(func: &Py<PyAny>, name: &str, x: &Sym, shape: &[usize]) -> Sym {
    let func = Python::attach(|py| func.clone_ref(py));
    x.graph().numpy_function_with(
        CallbackKind::NumpyFunction,
        name,
        func,
        &[x],
        &[DType::F32],
        &[Shape::known(shape)],
        true,
    )[0]
    .clone()
}

#[test]
fn inputs_reach_numpy_uncopied_only_when_nothing_else_reads_them() {
    // `probe` reports whether its argument views a runtime buffer (no copy)
    // and then scribbles over it; `total` sums what it is given.
    let probe = pyfn(
        "def probe(x):\n    handed = type(x.base).__name__ == 'TensorBuffer'\n    x[...] = -100\n    return np.float32(1.0 if handed else 0.0)\n",
        "probe",
    );
    let total = pyfn("def total(x):\n    return np.float32(x.sum())\n", "total");
    for (mode, f) in both(|| {
        let (probe, total) = Python::attach(|py| (probe.clone_ref(py), total.clone_ref(py)));
        function(move |x: Sym| {
            let t = &x * 2.0;
            let u = &x + 1.0;
            // t is read again (by `total`), so `probe` must get a copy; u is
            // read by nobody else, so it is handed over; x is the caller's.
            let a = call_f32(&probe, "probe_t", &t, &[]);
            let sum_t = call_f32(&total, "total_t", &t, &[]);
            let b = call_f32(&probe, "probe_u", &u, &[]);
            let c = call_f32(&probe, "probe_x", &x, &[]);
            [a, sum_t, b, c]
        })
    })
    .into_iter()
    .enumerate()
    {
        let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
        for _ in 0..2 {
            let out = f.call(std::slice::from_ref(&x)).unwrap();
            let got: Vec<f32> = out.iter().map(|t| common::to_vec::<f32>(t)[0]).collect();
            // probe_t gets a private copy (made by NumPy when interpreted,
            // by the runtime when compiled), so its scribbles never reach
            // `total`; u is handed over; the caller's x is copied.
            assert_eq!(got[1..], [12.0, 1.0, 0.0], "mode {mode}");
        }
        assert_eq!(common::to_vec::<f32>(&x), vec![1.0, 2.0, 3.0]);
        if mode == 1 {
            // Compiled: u ('add') has its own buffer, moved into probe_u;
            // t ('mul') is handed only to its last reader, total_t.
            let plan = f
                .compiler_ir(
                    &[TensorSpec::known(DType::F32, &[3])],
                    tensorlift::IrStage::Fused,
                )
                .unwrap();
            assert!(plan.contains("handed off to step 4 (add)"), "{plan}");
            assert!(plan.contains("handed off to step 3 (mul)"), "{plan}");
        }
    }
}

#[test]
fn fresh_results_are_adopted_and_shared_arrays_copied() {
    let src = "G = np.arange(3, dtype=np.float32)\nADDR = [0]\ndef fresh(x):\n    y = x + np.float32(1)\n    ADDR[0] = y.__array_interface__['data'][0]\n    return y\ndef glob(x):\n    return G\n";
    let (fresh, glob) = (pyfn(src, "fresh"), pyfn(src, "glob"));
    let addr = || -> usize {
        Python::attach(|py| {
            let g = fresh.bind(py).getattr("__globals__").unwrap();
            g.get_item("ADDR")
                .unwrap()
                .get_item(0)
                .unwrap()
                .extract()
                .unwrap()
        })
    };
    for (mode, f) in both(|| {
        let (fresh, glob) = Python::attach(|py| (fresh.clone_ref(py), glob.clone_ref(py)));
        function(move |x: Sym| {
            (
                call_f32(&fresh, "fresh", &x, &[3]),
                call_f32(&glob, "glob", &x, &[3]),
            )
        })
    })
    .into_iter()
    .enumerate()
    {
        let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0, 3.0, 4.0]);
        // The fresh array's memory is the result's: no copy.
        assert_eq!(out[0].bytes().as_ptr() as usize, addr(), "mode {mode}");
        // The global is copied: changing it later does not change the result.
        assert_eq!(common::to_vec::<f32>(&out[1]), vec![0.0, 1.0, 2.0]);
        Python::attach(|py| {
            let g = glob.bind(py).getattr("__globals__").unwrap();
            g.get_item("G").unwrap().set_item(0, 50.0).unwrap();
        });
        assert_eq!(
            common::to_vec::<f32>(&out[1]),
            vec![0.0, 1.0, 2.0],
            "mode {mode}"
        );
        let again = f.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f32>(&again[1]), vec![50.0, 1.0, 2.0]);
        Python::attach(|py| {
            let g = glob.bind(py).getattr("__globals__").unwrap();
            g.get_item("G").unwrap().set_item(0, 0.0).unwrap();
        });
        // Adopted results outlive the call and the GIL: use them from another thread.
        let t = std::thread::spawn(move || common::to_vec::<f32>(&out[0]))
            .join()
            .unwrap();
        assert_eq!(t, vec![2.0, 3.0, 4.0]);
    }
}

#[test]
fn a_blocked_python_callback_blocks_nothing_else() {
    // `wait` blocks (releasing the GIL, as sleeping or I/O does) until the
    // main thread, which meanwhile runs compiled code with Rust and Python
    // callbacks, sets the event. A lock held across a callback would
    // deadlock here; the 10 s timeout turns that into a failure instead.
    let src = "import threading\nSTARTED = threading.Event()\nGO = threading.Event()\ndef wait(x):\n    STARTED.set()\n    return np.float32(1.0 if GO.wait(10) else 0.0)\ndef inc(x):\n    return x + np.float32(1)\n";
    let (wait, inc) = (pyfn(src, "wait"), pyfn(src, "inc"));
    let event = |name: &str, method: &str| {
        Python::attach(|py| {
            let g = wait.bind(py).getattr("__globals__").unwrap();
            g.get_item(name)
                .unwrap()
                .call_method1(method, (10,))
                .unwrap();
        })
    };
    let blocked = {
        let wait = Python::attach(|py| wait.clone_ref(py));
        function(move |x: Sym| call_f32(&wait, "wait", &x, &[])).jit_compile(true)
    };
    let other = {
        let inc = Python::attach(|py| inc.clone_ref(py));
        function(move |x: Sym| {
            let y = call_f32(&inc, "inc", &x, &[1]);
            x.graph().host_fn_with(
                "double",
                |ins: &[Tensor]| {
                    Ok(vec![Tensor::from(
                        ins[0].array_view::<f32>()?.mapv(|v| v * 2.0),
                    )])
                },
                &[&y],
                &[DType::F32],
                &[Shape::known(&[1])],
                true,
            )[0]
            .clone()
        })
        .jit_compile(true)
    };
    let h = std::thread::spawn(move || blocked.call(&[common::f32s(&[0.0], &[1])]).unwrap());
    event("STARTED", "wait");
    for i in 0..20 {
        let out = other.call(&[common::f32s(&[i as f32], &[1])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![2.0 * (i as f32 + 1.0)]);
    }
    Python::attach(|py| {
        let g = wait.bind(py).getattr("__globals__").unwrap();
        g.get_item("GO").unwrap().call_method0("set").unwrap();
    });
    let out = h.join().unwrap();
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![1.0]);
}

#[test]
fn numpy_function_with_a_numpy_gradient_is_differentiable() {
    // The forward is NumPy's sinh, the gradient NumPy's cosh: neither is
    // traced, yet grad works interpreted and compiled, and check_grads
    // (reverse mode: a callback has no transpose) agrees.
    use tensorlift::{GradCheck, Mode, check_grads, custom_vjp};
    let fwd = pyfn(
        "import numpy as np\ndef f(x):\n    return np.sinh(x)\n",
        "f",
    );
    let bwd = pyfn(
        "import numpy as np\ndef g(x, ct):\n    return np.cosh(x) * ct\n",
        "g",
    );
    let x = Tensor::from(ndarray::arr1(&[0.5f64, -1.0, 2.0]).into_dyn());
    for jit in [false, true] {
        let (fwd, bwd) = Python::attach(|py| (fwd.clone_ref(py), bwd.clone_ref(py)));
        let f = function(move |x: Sym| {
            let (fwd, bwd) = Python::attach(|py| (fwd.clone_ref(py), bwd.clone_ref(py)));
            custom_vjp(
                move |a| {
                    let y = a[0]
                        .graph()
                        .numpy_function(fwd, &[&a[0]], &[DType::F64], false);
                    vec![y[0].set_shape(&[Some(3)])]
                },
                move |a, _out, ct| {
                    let g =
                        a[0].graph()
                            .numpy_function(bwd, &[&a[0], &ct[0]], &[DType::F64], false);
                    vec![g[0].set_shape(&[Some(3)])]
                },
                &[x],
            )
            .remove(0)
            .reduce_sum(None, false)
        })
        .jit_compile(jit);
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        let want: Vec<f64> = [0.5f64, -1.0, 2.0].iter().map(|v| v.cosh()).collect();
        assert_eq!(common::to_vec::<f64>(&g[0]), want, "jit {jit}");
        let opts = GradCheck {
            only: Some(Mode::Reverse),
            ..GradCheck::default()
        };
        check_grads(&f, std::slice::from_ref(&x), &[0], &opts).unwrap();
        // Without the custom gradient, differentiating is an error naming
        // the callback and where it was made.
        let plain = function(|x: Sym| {
            let f = pyfn(
                "import numpy as np\ndef f(x):\n    return np.sinh(x)\n",
                "f",
            );
            let y = x.graph().numpy_function(f, &[&x], &[DType::F64], false);
            y[0].set_shape(&[Some(3)]).reduce_sum(None, false)
        })
        .jit_compile(jit);
        let e = plain
            .grad(&[0])
            .call(std::slice::from_ref(&x))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("numpy_function")
                && e.contains("not differentiable")
                && e.contains("numpy_function.rs"),
            "{e}"
        );
    }
}

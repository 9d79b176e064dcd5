//! `import tensorlift` works in Python code run by tensorlift from the very
//! first use in a process, whatever the callback kind. Each case runs in a
//! fresh child process (this test binary re-run with `TL_IMPORT_CASE` set),
//! since the embedded module, once registered, stays for the process.
#![cfg(feature = "python")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::ffi::CString;
use std::path::PathBuf;
use std::process::Command;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorlift::ir::CallbackKind;
use tensorlift::{DType, Function, Sym, function};

/// A user module that imports tensorlift at module level.
const USER_MODULE: &str = "import numpy as np\nimport tensorlift as tl\n\ndef g(x):\n    return np.asarray(tl.exp(tl.constant(x)), dtype=np.float32)\n";

/// A directory holding `tl_import_user.py`.
fn module_dir(case: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorlift-import-{}-{case}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("tl_import_user.py"), USER_MODULE).unwrap();
    d
}

/// Runs `case` in a fresh process and asserts it succeeded.
fn in_child(case: &str) {
    let dir = module_dir(case);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_case", "--exact", "--nocapture", "--test-threads=1"])
        .env("TL_IMPORT_CASE", case)
        .env("PYTHONPATH", &dir)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "case {case} failed:\n{text}");
    assert!(
        text.contains(&format!("case {case} ok")),
        "case {case} did not run:\n{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Python function defined with plain pyo3 (tensorlift is not involved)
/// that imports the user module when first called.
fn lazy_importer() -> Py<PyAny> {
    Python::attach(|py| {
        let globals = PyDict::new(py);
        let code =
            CString::new("def f(x):\n    import tl_import_user\n    return tl_import_user.g(x)\n")
                .unwrap();
        py.run(&code, Some(&globals), None).unwrap();
        globals.get_item("f").unwrap().unwrap().unbind()
    })
}

fn traced(kind: CallbackKind, func: Py<PyAny>) -> Function {
    function(move |x: Sym| {
        let func = Python::attach(|py| func.clone_ref(py));
        let outs = match kind {
            CallbackKind::PyFunction => x.graph().py_function(func, &[&x], &[DType::F32]),
            CallbackKind::NumpyFunction | CallbackKind::PyFunc | CallbackKind::HostFn => {
                x.graph().numpy_function_with(
                    kind,
                    "g",
                    func,
                    &[&x],
                    &[DType::F32],
                    &[tensorlift::Shape::known(&[2])],
                    true,
                )
            }
        };
        outs[0].clone()
    })
}

fn check_exp(f: &Function) {
    let out = f.call(&[common::f32s(&[0.0, 1.0], &[2])]).unwrap();
    let got = common::to_vec::<f32>(&out[0]);
    assert_eq!(got.len(), 2);
    assert!(
        (got[0] - 1.0).abs() < 1e-6 && (got[1] - 1.0f32.exp()).abs() < 1e-5,
        "{got:?}"
    );
}

/// The body of every case; a no-op unless run by `in_child`.
#[test]
fn child_case() {
    let Ok(case) = std::env::var("TL_IMPORT_CASE") else {
        return;
    };
    let jit = case.ends_with("_jit");
    match case.trim_end_matches("_jit").trim_end_matches("_interp") {
        "numpy_function" => {
            check_exp(&traced(CallbackKind::NumpyFunction, lazy_importer()).jit_compile(jit))
        }
        "py_func" => check_exp(&traced(CallbackKind::PyFunc, lazy_importer()).jit_compile(jit)),
        "py_function" => check_exp(&traced(CallbackKind::PyFunction, lazy_importer())),
        // The one-liners load code that imports tensorlift at module level
        // before any callback has run.
        "callable" => {
            let g = tensorlift::python::callable("tl_import_user:g").unwrap();
            check_exp(&traced(CallbackKind::NumpyFunction, g).jit_compile(jit));
        }
        "source" => {
            let g = tensorlift::python::callable_from_source(USER_MODULE, "g").unwrap();
            check_exp(&traced(CallbackKind::PyFunc, g).jit_compile(jit));
        }
        other => panic!("unknown case {other}"),
    }
    println!("case {case} ok");
}

#[test]
fn numpy_function_first_callback_imports_tensorlift() {
    in_child("numpy_function_interp");
    in_child("numpy_function_jit");
}

#[test]
fn py_func_first_callback_imports_tensorlift() {
    in_child("py_func_interp");
    in_child("py_func_jit");
}

#[test]
fn py_function_first_callback_imports_tensorlift() {
    // py_function runs interpreted only (JitIncompatible when compiled).
    in_child("py_function_interp");
}

#[test]
fn a_module_loaded_by_callable_imports_tensorlift_at_its_top() {
    in_child("callable_interp");
    in_child("callable_jit");
}

#[test]
fn source_loaded_by_callable_from_source_imports_tensorlift_at_its_top() {
    in_child("source_interp");
    in_child("source_jit");
}

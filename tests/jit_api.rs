//! The JIT's user-facing behaviour: jit_compile and compile(), compile
//! counts, JitIncompatible errors, IR stages and dumps, thread safety
//! (freeing code memory is `tests/jit_memory.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::sync::Arc;

use tensorlift::compiler::{self, JitOptions};
use tensorlift::ir::text;
use tensorlift::{Code, DType, IrStage, Sym, Tensor, TensorSpec, function};

fn softmax(x: Sym) -> Sym {
    let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
    &e / e.reduce_sum(Some(&[-1]), true)
}

#[test]
fn jit_and_interpreter_agree_and_compiles_are_counted() {
    let f = function(softmax).jit_compile(true);
    let g = function(softmax);
    for rows in [1usize, 3, 3, 5] {
        let x = common::f32s(
            &(0..rows * 7)
                .map(|i| (i as f32 * 0.37).sin() * 4.0)
                .collect::<Vec<_>>(),
            &[rows, 7],
        );
        let (a, b) = (
            f.call(std::slice::from_ref(&x)).unwrap(),
            g.call(&[x]).unwrap(),
        );
        common::assert_close(&a[0], &b[0], 2e-6, 1e-7, "softmax");
    }
    // One compilation per new shape, none for a repeated one.
    assert_eq!(f.compile_count(), 3);
    assert_eq!(g.compile_count(), 0);
}

#[test]
fn compile_ahead_of_time_and_reuse() {
    let f = function(|x: Sym, y: Sym| (x.matmul(&y) + 1.0).maximum(0.0)).jit_compile(true);
    let specs = [
        TensorSpec::known(DType::F32, &[2, 3]),
        TensorSpec::known(DType::F32, &[3, 4]),
    ];
    let c = f.compile(&specs).unwrap();
    assert_eq!(f.compile_count(), 1);
    let x = common::f32s(&[1.0, -2.0, 3.0, 0.5, 0.0, -1.0], &[2, 3]);
    let y = common::f32s(
        &(0..12).map(|i| i as f32 - 6.0).collect::<Vec<_>>(),
        &[3, 4],
    );
    let out = c.call(&[x.clone(), y.clone()]).unwrap();
    let want = function(|x: Sym, y: Sym| (x.matmul(&y) + 1.0).maximum(0.0))
        .call(&[x.clone(), y.clone()])
        .unwrap();
    common::assert_close(&out[0], &want[0], 1e-6, 1e-6, "mlp layer");
    // Calling the Function with the same shapes reuses the executable.
    f.call(&[x, y]).unwrap();
    assert_eq!(f.compile_count(), 1);
    // Inputs that do not match the specs are errors, not recompiles.
    let e = c
        .call(&[common::f32s(&[1.0], &[1, 1]), common::f32s(&[1.0], &[1, 1])])
        .unwrap_err();
    assert!(e.to_string().contains("compiled for f32[2,3]"), "{e}");
    assert_eq!(f.compile_count(), 1);
}

#[test]
fn relaxed_specs_compile_per_concrete_shape() {
    let f = function(|x: Sym| (&x * 2.0).reduce_sum(None, false))
        .input_signature(vec![TensorSpec::new(DType::F32, &[None])])
        .jit_compile(true);
    let c = f.compile(&[TensorSpec::new(DType::F32, &[None])]).unwrap();
    assert_eq!(f.compile_count(), 0);
    for n in [3usize, 5, 3] {
        let out = c.call(&[common::f32s(&vec![1.5; n], &[n])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![3.0 * n as f32]);
    }
    assert_eq!(f.compile_count(), 2);
    assert_eq!(f.trace_count(), 1);
}

#[test]
fn jit_incompatible_lists_every_offending_node_before_running() {
    let src = "graph @g {\n  %x = parameter 0 : f32[2]\n  %a = py_function \"first\" (%x) : (f32[2])\n  %b = neg(%x) : f32[2]\n  %c = py_function \"second\" (%b) : (f32[2])\n  return %a as \"a\", %c as \"c\"\n}\n";
    let g = text::parse(src, "prog.tlir").unwrap();
    let e = compiler::compile(&g, &JitOptions::default()).unwrap_err();
    assert_eq!(e.code(), Code::JitIncompatible);
    let msg = e.to_string();
    assert!(msg.contains("2 node(s) cannot be compiled"), "{msg}");
    assert!(
        msg.contains("py_function 'a' (created at prog.tlir:3:3)")
            && msg.contains("py_function 'c' (created at prog.tlir:5:3)"),
        "{msg}"
    );
    assert!(
        msg.contains("jit_compile=true")
            && msg.contains("numpy_function/py_func")
            && msg.contains("jit_compile=false"),
        "{msg}"
    );
    let tensorlift::Error::JitIncompatible { offenders } = e else {
        panic!()
    };
    assert_eq!(
        offenders
            .iter()
            .map(|o| o.node.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "c"]
    );
}

#[test]
fn ir_stages_and_dumps() {
    let f = function(softmax).jit_compile(true).name("softmax");
    let spec = [TensorSpec::known(DType::F32, &[4, 16])];
    let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
    // Row softmax materializes only the row max, the row sum, its
    // reciprocal (the division is a product, as XLA's) and the output,
    // into which the row sum's kernel stashes each exp.
    assert_eq!(fused.matches(": kernel").count(), 4, "{fused}");
    assert_eq!(fused.matches(" temp @").count(), 3, "{fused}");
    assert!(fused.contains("stashes its per-element value"), "{fused}");
    // Each kernel as Cranelift IR or (where the host allows) machine
    // code, then `main` (a list of calls: no control flow).
    let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
    assert_eq!(clif.matches("; kernel '").count(), 4, "{clif}");
    assert!(
        clif.contains("; main: a list of calls run by Rust"),
        "{clif}"
    );
    assert_eq!(f.compile_count(), 1);
    let dir = std::env::temp_dir().join(format!("tensorlift-dump-{}", std::process::id()));
    let exe = compiler::compile(
        &f.concrete(&spec).unwrap().optimized,
        &JitOptions::default(),
    )
    .unwrap();
    exe.dump_to(&dir, "softmax", None).unwrap();
    for ext in ["optimized.tlir", "fused.txt", "clif"] {
        assert!(dir.join(format!("softmax.{ext}")).exists(), "{ext}");
    }
}

#[test]
fn fusion_decisions_say_why() {
    // exp(x) read by two consumers with a small inline cost is recomputed;
    // an expensive shared subexpression is materialized with a reason.
    let f = function(|x: Sym| {
        let mut y = x.exp();
        for _ in 0..10 {
            y = (&y * 1.1 + 0.5).tanh();
        }
        (&y + 1.0, &y * 2.0)
    })
    .jit_compile(true);
    let fused = f
        .compiler_ir(&[TensorSpec::known(DType::F32, &[8])], IrStage::Fused)
        .unwrap();
    assert!(
        fused.contains("materialized: 2 consumers and inline cost"),
        "{fused}"
    );
    let g = function(|x: Sym, w: Sym| x.exp().matmul(&w)).jit_compile(true);
    let fused = g
        .compiler_ir(
            &[
                TensorSpec::known(DType::F32, &[2, 2]),
                TensorSpec::known(DType::F32, &[2, 2]),
            ],
            IrStage::Fused,
        )
        .unwrap();
    assert!(
        fused.contains("exp: materialized: dot_general 'dot_general' reads it from memory"),
        "{fused}"
    );
    assert!(fused.contains("GEMM call"), "{fused}");
}

#[test]
fn one_compiled_function_from_eight_threads() {
    let f = function(|x: Sym| (x.exp() * 2.0).reduce_sum(Some(&[1]), false)).jit_compile(true);
    let c = Arc::new(
        f.compile(&[TensorSpec::known(DType::F32, &[64, 33])])
            .unwrap(),
    );
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for k in 0..50 {
                    let v = (t * 100 + k) as f32 * 1e-3;
                    let out = c
                        .call(&[common::f32s(&vec![v; 64 * 33], &[64, 33])])
                        .unwrap();
                    let want = 2.0 * 33.0 * v.exp();
                    for y in common::to_vec::<f32>(&out[0]) {
                        assert!((y - want).abs() <= 1e-4 * want, "{y} vs {want}");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// A call with several parallel sections (two GEMMs split over the pool)
/// keeps the pool's workers spinning through the call; called from
/// ordinary threads and from the workers of the program's own rayon pool
/// (not tensorlift's: the spinning jobs of concurrent calls run inside
/// each other), every call finishes with the right values. Without the
/// spinning the dump has no such line (seen failing).
#[test]
fn calls_with_parallel_sections_from_threads_and_from_the_pool() {
    let n = 256;
    let f = function(|a: Sym, b: Sym| a.matmul(&b).tanh().matmul(&b)).jit_compile(true);
    let spec = [
        TensorSpec::known(DType::F32, &[n, n]),
        TensorSpec::known(DType::F32, &[n, n]),
    ];
    let c = Arc::new(f.compile(&spec).unwrap());
    let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
    if std::thread::available_parallelism().is_ok_and(|p| p.get() >= 2)
        && std::env::var_os("RAYON_NUM_THREADS").is_none()
    {
        assert!(
            fused.contains("parallel sections: the pool's other workers spin"),
            "two split GEMMs should keep the pool awake:\n{fused}"
        );
    }
    // a = I/2, so the result is tanh(b/2)·b.
    let a: Vec<f32> = (0..n * n)
        .map(|i| if i / n == i % n { 0.5 } else { 0.0 })
        .collect();
    let b: Vec<f32> = (0..n * n)
        .map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5)
        .collect();
    let want: Vec<f32> = (0..n * n)
        .map(|i| {
            let (r, col) = (i / n, i % n);
            (0..n)
                .map(|k| (b[r * n + k] * 0.5).tanh() * b[k * n + col])
                .sum()
        })
        .collect();
    let inputs = [common::f32s(&a, &[n, n]), common::f32s(&b, &[n, n])];
    let check = |out: &[Tensor]| {
        for (g, w) in common::to_vec::<f32>(&out[0]).iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
        }
    };
    check(&c.call(&inputs).unwrap());
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (c, inputs) = (c.clone(), inputs.clone());
            std::thread::spawn(move || {
                for _ in 0..10 {
                    c.call(&inputs).unwrap();
                }
            })
        })
        .collect();
    use rayon::prelude::*;
    let from_pool: Vec<Vec<Tensor>> = (0..16)
        .into_par_iter()
        .map(|_| c.call(&inputs).unwrap())
        .collect();
    for out in &from_pool {
        check(out);
    }
    for t in threads {
        t.join().unwrap();
    }
}

/// Splits run on tensorlift's own threads: with every worker of the
/// program's rayon pool blocked until the call returns, a call whose
/// kernel splits over threads still finishes (on rayon's global pool, its
/// parts waited behind the blocked jobs forever: seen failing).
#[test]
fn calls_split_without_the_programs_rayon_pool() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};
    let f = function(|x: Sym| (x.exp() + 1.0).log().tanh()).jit_compile(true);
    let n = 1 << 20;
    let x = common::f32s(
        &(0..n).map(|i| (i % 97) as f32 * 0.01).collect::<Vec<_>>(),
        &[n],
    );
    let spec = [TensorSpec::known(DType::F32, &[n])];
    let c = f.compile(&spec).unwrap();
    let fused = f.compiler_ir(&spec, IrStage::Fused).unwrap();
    let threaded = std::thread::available_parallelism().is_ok_and(|p| p.get() >= 2)
        && std::env::var_os("RAYON_NUM_THREADS").is_none();
    if threaded {
        assert!(
            fused.contains(" ranges of "),
            "the kernel should split:
{fused}"
        );
    }
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let blocked = Arc::new(AtomicUsize::new(0));
    let workers = rayon::current_num_threads();
    for _ in 0..workers {
        let (gate, blocked) = (gate.clone(), blocked.clone());
        rayon::spawn(move || {
            blocked.fetch_add(1, Ordering::SeqCst);
            let mut open = gate.0.lock().unwrap();
            while !*open {
                open = gate.1.wait(open).unwrap();
            }
        });
    }
    while blocked.load(Ordering::SeqCst) < workers {
        std::thread::yield_now();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let call = std::thread::spawn(move || tx.send(c.call(&[x]).unwrap()).unwrap());
    let out = rx.recv_timeout(std::time::Duration::from_secs(120));
    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let out = out.expect("the call waited on the program's blocked rayon pool");
    call.join().unwrap();
    let got = common::to_vec::<f32>(&out[0]);
    for (i, y) in got.iter().enumerate().step_by(4099) {
        let v = (i % 97) as f32 * 0.01;
        let want = (v.exp() + 1.0).ln().tanh();
        assert!((y - want).abs() <= 1e-5, "element {i}: {y} vs {want}");
    }
}

#[test]
fn compiles_from_the_pool_from_threads_and_on_a_one_thread_pool() {
    // Each kernel compiles on the pool while the next is built, and the
    // compiling thread takes whatever the pool has not started: compiles
    // from inside the pool's own tasks, from several threads at once and
    // on a pool of one thread must all finish, with the same code.
    fn program(scale: f32) -> tensorlift::Function {
        function(move |x: Sym| {
            let e = (&x * scale - x.reduce_max(Some(&[1]), true)).exp();
            let s = &e / e.reduce_sum(Some(&[1]), true);
            (&s * 2.0).sqrt() + x.reduce_sum(Some(&[0]), true)
        })
        .jit_compile(true)
    }
    let x = common::f32s(
        &(0..64 * 96)
            .map(|i| (i % 17) as f32 * 0.25 - 2.0)
            .collect::<Vec<_>>(),
        &[64, 96],
    );
    let spec = [TensorSpec::known(DType::F32, &[64, 96])];
    let want: Vec<Vec<Tensor>> = (0..8)
        .map(|i| {
            function(move |x: Sym| {
                let e = (&x * (1.0 + i as f32) - x.reduce_max(Some(&[1]), true)).exp();
                let s = &e / e.reduce_sum(Some(&[1]), true);
                (&s * 2.0).sqrt() + x.reduce_sum(Some(&[0]), true)
            })
            .call(std::slice::from_ref(&x))
            .unwrap()
        })
        .collect();
    let check = |i: usize, c: &tensorlift::CompiledFunction| {
        let got = c.call(std::slice::from_ref(&x)).unwrap();
        common::assert_close(&got[0], &want[i][0], 1e-5, 1e-6, &format!("program {i}"));
    };
    use rayon::prelude::*;
    let from_pool: Vec<tensorlift::CompiledFunction> = (0..8)
        .into_par_iter()
        .map(|i| program(1.0 + i as f32).compile(&spec).unwrap())
        .collect();
    for (i, c) in from_pool.iter().enumerate() {
        check(i, c);
    }
    std::thread::scope(|s| {
        for i in 0..4 {
            let (spec, check) = (&spec, &check);
            s.spawn(move || check(i, &program(1.0 + i as f32).compile(spec).unwrap()));
        }
    });
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    one.install(|| {
        let inner: Vec<tensorlift::CompiledFunction> = (0..3)
            .into_par_iter()
            .map(|i| program(1.0 + i as f32).compile(&spec).unwrap())
            .collect();
        for (i, c) in inner.iter().enumerate() {
            check(i, c);
        }
    });
}

#[test]
fn strings_pass_through_compiled_code() {
    let f = function(|s: Sym, x: Sym| (s, x.neg())).jit_compile(true);
    let s = Tensor::from(
        ndarray::ArrayD::from_shape_vec(vec![2], vec!["a".to_string(), "βγ".to_string()]).unwrap(),
    );
    let out = f.call(&[s.clone(), common::f32s(&[1.0], &[1])]).unwrap();
    assert_eq!(out[0].strings(), s.strings());
    assert_eq!(common::to_vec::<f32>(&out[1]), vec![-1.0]);
}

#[test]
fn runtime_errors_in_compiled_code_are_clean_and_recoverable() {
    let f = function(|x: Sym, i: Sym| x.take(&i, 0) * 2.0).jit_compile(true);
    let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
    let bad = Tensor::from(ndarray::arr1(&[0i32, 7]).into_dyn());
    let e = f.call(&[x.clone(), bad]).unwrap_err();
    assert!(
        e.to_string().contains("indices[1] = 7 is not in [0, 3)")
            && e.to_string().contains("jit_api.rs"),
        "{e}"
    );
    let ok = f
        .call(&[x, Tensor::from(ndarray::arr1(&[2i32, 1]).into_dyn())])
        .unwrap();
    assert_eq!(common::to_vec::<f32>(&ok[0]), vec![6.0, 4.0]);
    // Integer division by zero never traps in compiled code.
    let d = function(|a: Sym, b: Sym| (&a / &b, &a % &b)).jit_compile(true);
    let out = d
        .call(&[
            Tensor::from(ndarray::arr1(&[i64::MIN, 5, 7]).into_dyn()),
            Tensor::from(ndarray::arr1(&[-1i64, 0, 2]).into_dyn()),
        ])
        .unwrap();
    assert_eq!(common::to_vec::<i64>(&out[0]), vec![i64::MIN, -1, 3]);
    assert_eq!(common::to_vec::<i64>(&out[1]), vec![0, 5, 1]);
}

#[test]
fn multithreaded_kernels_are_deterministic() {
    // Large enough to be split across cores; every run, threaded or not,
    // gives the same bits.
    let body = |x: Sym| {
        let y = (-&x * &x).exp() * x.tanh() + x.abs().sqrt();
        (
            y.clone(),
            (&x - x.reduce_max(Some(&[1]), true))
                .exp()
                .reduce_sum(Some(&[1]), false),
        )
    };
    let x = common::f32s(
        &(0..512 * 1024usize)
            .map(|i| ((i * 7919) % 2003) as f32 / 300.0 - 3.0)
            .collect::<Vec<_>>(),
        &[512, 1024],
    );
    let threaded = function(body).jit_compile(true);
    let single = function(body).jit_compile(true).jit_options(JitOptions {
        threads: false,
        ..JitOptions::default()
    });
    let a = threaded.call(std::slice::from_ref(&x)).unwrap();
    let b = single.call(std::slice::from_ref(&x)).unwrap();
    for _ in 0..3 {
        let again = threaded.call(std::slice::from_ref(&x)).unwrap();
        for i in 0..2 {
            assert!(common::same_bits(&again[i], &a[i]));
        }
    }
    for i in 0..2 {
        assert!(
            common::same_bits(&a[i], &b[i]),
            "output {i} depends on threading"
        );
    }
    // The fused plan says which kernels were split over threads; the
    // test needs a pool of at least two threads (not RAYON_NUM_THREADS=1).
    let spec = [TensorSpec::known(DType::F32, &[512, 1024])];
    let fused = threaded.compiler_ir(&spec, IrStage::Fused).unwrap();
    let split: Vec<&str> = fused
        .lines()
        .filter(|l| l.contains("decision: threads:") && l.contains(" ranges of "))
        .collect();
    assert!(
        !split.is_empty(),
        "no kernel was split over threads, so nothing above tested threading:\n{fused}"
    );
    let unsplit = single.compiler_ir(&spec, IrStage::Fused).unwrap();
    assert!(
        !unsplit.contains(" ranges of ") && unsplit.contains("threads are disabled"),
        "with threads disabled a kernel is still reported split:\n{unsplit}"
    );
}

/// Bytes that make every bit pattern of every element type likely
/// (NaNs with payloads, subnormals, negative zeros).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 56) as u8
        })
        .collect()
}

/// A transpose by `perm` of noise of `dtype` in `dims`: the input, the
/// function's body and the interpreter's result.
fn transpose_case(
    dtype: DType,
    dims: &[usize],
    perm: &[usize],
    seed: u64,
) -> (
    Tensor,
    impl Fn(Sym) -> Sym + Clone + Send + Sync + 'static,
    Tensor,
) {
    let n: usize = dims.iter().product();
    let x = Tensor::from_bytes(dtype, dims, &noise(n * dtype.size(), seed)).unwrap();
    let perm = perm.to_vec();
    let body = move |x: Sym| x.transpose(&perm);
    let want = function(body.clone())
        .call(std::slice::from_ref(&x))
        .unwrap();
    (x, body, want.into_iter().next().unwrap())
}

/// `body` compiled, split over threads or not.
fn compiled_threads(
    body: impl Fn(Sym) -> Sym + Send + Sync + 'static,
    threads: bool,
) -> tensorlift::Function {
    function(body).jit_compile(true).jit_options(JitOptions {
        threads,
        ..JitOptions::default()
    })
}

/// Uniform values in [-1, 1) of `dtype` (f64, else f32), from `seed`.
fn uniform(dtype: DType, dims: &[usize], seed: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = noise(n * 8, seed)
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as f64 / 2f64.powi(63) - 1.0)
        .collect();
    match dtype == DType::F64 {
        true => Tensor::from_bytes(
            dtype,
            dims,
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        )
        .unwrap(),
        false => common::f32s(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), dims),
    }
}

#[test]
fn sums_over_a_middle_axis_run_as_machine_code() {
    // Where the host has AVX2 or AVX-512, a sum over a middle axis with
    // the innermost kept (a column sum: codegen/columns.rs) is machine
    // code: blocks of as many vectors of columns as there are registers
    // (32 zmm, 14 ymm) over blocks of 64 rows, the last vector masked
    // where the columns are not whole
    // vectors. Each column is summed in row order, as the interpreter sums
    // it, so every bit agrees, split over threads or not; exact mode and
    // integer sums keep Cranelift.
    let wide = compiler::max_isa() >= compiler::IsaLevel::Avx2;
    /// (dtype, dims, axis, machine code where the host allows)
    type Case<'a> = (DType, &'a [usize], i64, bool);
    let cases: &[Case<'_>] = &[
        (DType::F32, &[4096, 1024], 0, true),
        (DType::F32, &[256, 256, 64], 1, true),
        (DType::F32, &[3, 100, 17], 1, true),
        (DType::F32, &[2, 7, 300], 1, true),
        (DType::F32, &[4, 3, 128], 1, true),
        (DType::F32, &[2, 5, 120], 1, true),
        (DType::F32, &[3, 1, 5], 1, true),
        (DType::F64, &[5, 33, 64], 1, true),
        (DType::F64, &[2, 9, 67], 1, true),
        (DType::F64, &[2, 9, 3], 1, true),
        // More rows than a row block, the sums resumed from the output
        // (a masked last vector among them).
        (DType::F64, &[2, 130, 67], 1, true),
        (DType::F32, &[1, 200, 1], 1, true),
        // More vectors of columns than registers (AVX-512: 32 a block,
        // AVX2: 14): a whole block then a partial one with the masked
        // vector, or only whole blocks, the last masked.
        (DType::F32, &[2, 70, 1003], 1, true),
        (DType::F32, &[3, 9, 507], 1, true),
        (DType::F64, &[2, 9, 500], 1, true),
        (DType::F32, &[2, 130, 1792], 1, true),
        // Sums over the rows of a matrix whose columns make no two blocks
        // of 2 KiB (`tile::column_blocks` leaves them 2-D, one thread: a
        // bias gradient's sum over the batch).
        (DType::F32, &[256, 512], 0, true),
        (DType::F32, &[100, 37], 0, true),
        (DType::F64, &[70, 300], 0, true),
        (DType::F32, &[5, 1], 0, true),
        (DType::I32, &[4, 6, 40], 1, false),
    ];
    for (i, &(dtype, dims, axis, native)) in cases.iter().enumerate() {
        let x = match dtype == DType::I32 {
            true => Tensor::from_bytes(
                dtype,
                dims,
                &noise(dims.iter().product::<usize>() * 4, 7 + i as u64)
                    .chunks(4)
                    .flat_map(|c| (i32::from_le_bytes(c.try_into().unwrap()) >> 8).to_le_bytes())
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
            false => uniform(dtype, dims, 7 + i as u64),
        };
        let body = move |x: Sym| x.reduce_sum(Some(&[axis]), false);
        let interp = function(body).call(std::slice::from_ref(&x)).unwrap();
        // Outside exact mode an f32 sum adds row after row in f32 (the
        // interpreter accumulates in f64, and exact mode runs its kernel).
        let in_order =
            (dtype == DType::F32).then(|| [common::sum_in_order_f32(&x, &[axis as usize], false)]);
        let spec = [TensorSpec::known(dtype, dims)];
        for (threads, exact) in [(true, false), (false, false), (true, true)] {
            let f = function(body).jit_compile(true).jit_options(JitOptions {
                threads,
                exact,
                ..JitOptions::default()
            });
            let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
            let what = format!(
                "sum over axis {axis} of {dtype:?}{dims:?} (threads {threads}, exact {exact})"
            );
            assert_eq!(
                clif.contains("(codegen/columns.rs)"),
                native && wide && !exact,
                "{what}: machine code exactly where the host has AVX-512 and the kernel \
                 qualifies:\n{clif}"
            );
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            let want = match (&in_order, exact) {
                (Some(t), false) => &t[..],
                (Some(_) | None, _) => &interp[..],
            };
            assert!(
                common::same_bits(&got[0], &want[0]),
                "{what} differs from a sum in row order: {:?} against {:?}",
                &got[0],
                &want[0]
            );
        }
    }
    // A slice of a larger operand (its first element at an offset, its
    // rows farther apart than its columns).
    let x = uniform(DType::F32, &[4, 50, 90], 99);
    let slice = |x: Sym| x.slice(&[1, 3, 5], &[4, 43, 80], &[1, 1, 1]);
    let body = move |x: Sym| slice(x).reduce_sum(Some(&[1]), false);
    let read = function(slice).call(std::slice::from_ref(&x)).unwrap();
    let want = [common::sum_in_order_f32(&read[0], &[1], false)];
    let got = function(body)
        .jit_compile(true)
        .call(std::slice::from_ref(&x))
        .unwrap();
    assert!(
        common::same_bits(&got[0], &want[0]),
        "the sum of a slice differs from the interpreter's"
    );
}

/// The header line of kernel `name` in a Cranelift-stage dump.
fn kernel_header<'a>(clif: &'a str, name: &str) -> &'a str {
    let at = clif
        .find(&format!("; kernel '{name}'"))
        .unwrap_or_else(|| panic!("no kernel '{name}' in:\n{clif}"));
    clif[at..].lines().next().unwrap()
}

#[test]
fn row_reductions_run_as_machine_code() {
    // A sum, max or min over the innermost axis of an f32 expression is
    // AVX-512 or AVX2 machine code (codegen/native.rs; a max by AVX-512's
    // `vrangeps`, or by AVX2's `maxps` with the sign bits kept aside for
    // a zero result, NaN lanes kept aside at both): row by row, the row's
    // values added into accumulators held in registers, the last vector
    // masked.
    // Max and min agree with the interpreter bit for bit, NaN, signed
    // zeros and infinities included; sums to rounding (their order
    // differs). Exact mode and rows too long for the sums' accuracy keep
    // Cranelift.
    let isa = compiler::max_isa();
    // Rows of 1003: a masked last vector at both levels (16 and 8 lanes).
    let c = 1003;
    let x = {
        let mut v: Vec<f32> = common::to_vec(&uniform(DType::F32, &[40, c], 5));
        v[3] = f32::NAN; // row 0: a NaN
        v[c..2 * c].fill(-0.0); // row 1: negative zeros
        v[2 * c..3 * c].fill(-0.0);
        v[2 * c + 500] = 0.0; // row 2: one positive zero among them
        v[3 * c..4 * c].fill(f32::NEG_INFINITY); // row 3
        v[4 * c..5 * c].fill(f32::INFINITY); // row 4
        v[5 * c - 1] = f32::NAN; // a NaN in the masked last vector
        v[5 * c..6 * c].fill(-2.5); // row 5: all negative
        common::f32s(&v, &[40, c])
    };
    type Body = fn(Sym) -> Sym;
    // (what, body, the reduction's kernel, bitwise)
    let cases: [(&str, Body, &str, bool); 6] = [
        (
            "sum",
            |x| x.reduce_sum(Some(&[1]), false),
            "reduce_sum",
            false,
        ),
        (
            "max",
            |x| x.reduce_max(Some(&[1]), false),
            "reduce_max",
            true,
        ),
        (
            "min",
            |x| x.reduce_min(Some(&[1]), false),
            "reduce_min",
            true,
        ),
        (
            "a sum of squares about a value per row",
            |x| {
                let m = x.reduce_sum(Some(&[1]), true) * 0.001;
                (&x - &m).square().reduce_sum(Some(&[1]), false)
            },
            "reduce_sum_1",
            false,
        ),
        (
            "a softmax (a max, then a sum that stores its values)",
            softmax,
            "reduce_max",
            false,
        ),
        (
            "a max of a product",
            |x| (&x * 3.0).reduce_max(Some(&[1]), false),
            "reduce_max",
            true,
        ),
    ];
    let spec = [TensorSpec::known(DType::F32, &[40, c])];
    for (what, body, kernel, bitwise) in cases {
        let want = function(body).call(std::slice::from_ref(&x)).unwrap();
        for exact in [false, true] {
            let f = function(body).jit_compile(true).jit_options(JitOptions {
                exact,
                ..JitOptions::default()
            });
            let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
            let native = !exact && isa >= compiler::IsaLevel::Avx2;
            assert_eq!(
                kernel_header(&clif, kernel).contains("machine code"),
                native,
                "{what} (exact {exact}): machine code exactly where the host and options allow:\n{clif}"
            );
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            if bitwise {
                assert!(
                    common::same_bits(&got[0], &want[0]),
                    "{what} (exact {exact}): {:?} against the interpreter's {:?}",
                    &got[0],
                    &want[0]
                );
            } else {
                common::assert_close(&got[0], &want[0], 1e-5, 1e-5, what);
            }
        }
    }
    // Rows whose sums would add too many values a lane in sequence keep
    // Cranelift; their max does not need to.
    let long = uniform(DType::F32, &[2, 40000], 6);
    let spec = [TensorSpec::known(DType::F32, &[2, 40000])];
    for (body, kernel, native) in [
        (
            (|x| x.reduce_sum(Some(&[1]), false)) as Body,
            "reduce_sum",
            false,
        ),
        (
            |x| x.reduce_max(Some(&[1]), false),
            "reduce_max",
            isa >= compiler::IsaLevel::Avx2,
        ),
    ] {
        let f = function(body).jit_compile(true);
        let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
        assert_eq!(
            kernel_header(&clif, kernel).contains("machine code"),
            native,
            "{clif}"
        );
        let want = function(body).call(std::slice::from_ref(&long)).unwrap();
        let got = f.call(std::slice::from_ref(&long)).unwrap();
        common::assert_close(&got[0], &want[0], 1e-5, 1e-4, kernel);
    }
}

#[test]
fn transposes_in_tiles_copy_every_bit() {
    // Transposed reads run in 16×16 tiles, copies of 4- and 8-byte
    // elements through vector registers 4×4 or 2×2 at a time (4-byte
    // ones on AVX-512 hosts as whole tiles: the next test); other
    // widths, fused arithmetic and shapes that do not split into whole
    // tiles take the scalar loops. Each must move every bit where the
    // interpreter does, threaded (the 1024×2048 copies split over cores)
    // or not.
    let cases: &[(DType, &[usize], &[usize])] = &[
        (DType::F32, &[32, 48], &[1, 0]),
        (DType::F32, &[1024, 2048], &[1, 0]),
        (DType::F64, &[64, 32], &[1, 0]),
        (DType::F64, &[1024, 2048], &[1, 0]),
        (DType::I32, &[3, 48, 64], &[0, 2, 1]),
        (DType::U32, &[32, 3, 48], &[2, 1, 0]),
        (DType::I64, &[2, 32, 2, 16], &[3, 1, 0, 2]),
        (DType::U8, &[64, 48], &[1, 0]),
        (DType::F16, &[32, 64], &[1, 0]),
        (DType::C64, &[32, 64], &[1, 0]),
        (DType::C128, &[32, 32], &[1, 0]),
        (DType::F32, &[20, 30], &[1, 0]),
        (DType::F32, &[48, 40], &[1, 0]),
    ];
    for (i, &(dtype, dims, perm)) in cases.iter().enumerate() {
        let (x, body, want) = transpose_case(dtype, dims, perm, i as u64);
        for threads in [true, false] {
            let f = compiled_threads(body.clone(), threads);
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            assert!(
                common::same_bits(&got[0], &want),
                "transpose of {dtype:?}{dims:?} (threads {threads}) differs from the interpreter's"
            );
        }
    }
    // Fused with arithmetic, the tiles run as scalar loops.
    let x = common::f32s(
        &(0..64 * 96)
            .map(|i| i as f32 * 0.5 - 7.0)
            .collect::<Vec<_>>(),
        &[64, 96],
    );
    let body = |x: Sym| x.transpose(&[1, 0]) * 3.0 + 1.0;
    let want = function(body).call(std::slice::from_ref(&x)).unwrap();
    let f = function(body).jit_compile(true);
    let got = f.call(std::slice::from_ref(&x)).unwrap();
    assert!(common::same_bits(&got[0], &want[0]));
    let fused = f
        .compiler_ir(&[TensorSpec::known(DType::F32, &[64, 96])], IrStage::Fused)
        .unwrap();
    assert!(
        fused.contains("tiled 16×16"),
        "the fused transpose was not tiled, so the scalar tile loops went untested:\n{fused}"
    );
}

#[test]
fn transposes_of_four_and_eight_byte_elements_run_as_avx512_machine_code() {
    // Where the host has AVX-512, a tiled transposed copy of 4- or 8-byte
    // elements is machine code (codegen/transpose.rs): each 16×16 tile in
    // registers (8-byte ones as four 8×8 blocks), with batch dims around it, and an output of 8 MiB or
    // more streamed (non-temporal stores) when it is 64-byte aligned,
    // stored plainly when it is not. Elsewhere Cranelift's tiles. Every
    // case moves every bit where the interpreter does, split over
    // threads or not.
    let avx512 = compiler::max_isa() >= compiler::IsaLevel::Avx512;
    /// (dtype, dims, perm, machine code on AVX-512, streamed there)
    type Case<'a> = (DType, &'a [usize], &'a [usize], bool, bool);
    let cases: &[Case<'_>] = &[
        (DType::F32, &[64, 48], &[1, 0], true, false),
        (DType::I32, &[2, 3, 32, 48], &[0, 1, 3, 2], true, false),
        (DType::U32, &[3, 32, 2, 48], &[2, 0, 3, 1], true, false),
        (DType::F32, &[2048, 1024], &[1, 0], true, true),
        (DType::F32, &[2, 1024, 1040], &[0, 2, 1], true, true),
        // 8-byte elements: four 8×8 blocks a tile.
        (DType::F64, &[64, 32], &[1, 0], true, false),
        (DType::I64, &[2, 3, 32, 48], &[0, 1, 3, 2], true, false),
        (DType::C64, &[3, 32, 2, 48], &[2, 0, 3, 1], true, false),
        (DType::F64, &[1024, 1024], &[1, 0], true, true),
        // 2-byte elements, rows that are not whole tiles and an empty
        // tensor (a loop of no steps inside the tiles' loops): Cranelift.
        (DType::F16, &[32, 64], &[1, 0], false, false),
        (DType::F32, &[20, 30], &[1, 0], false, false),
        (DType::F32, &[0, 3, 32, 32], &[3, 1, 0, 2], false, false),
    ];
    for (i, &(dtype, dims, perm, native, streamed)) in cases.iter().enumerate() {
        let (x, body, want) = transpose_case(dtype, dims, perm, 40 + i as u64);
        let spec = [TensorSpec::known(dtype, dims)];
        for threads in [true, false] {
            let f = compiled_threads(body.clone(), threads);
            let clif = f.compiler_ir(&spec, IrStage::Cranelift).unwrap();
            let what = format!("transpose of {dtype:?}{dims:?} (threads {threads})");
            assert_eq!(
                clif.contains("(codegen/transpose.rs)"),
                native && avx512,
                "{what}: machine code exactly where the host has AVX-512 and the kernel \
                 qualifies:\n{clif}"
            );
            assert_eq!(
                clif.contains("vmovntps"),
                streamed && avx512,
                "{what}: streamed exactly where 8 MiB or more leave the program:\n{clif}"
            );
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            assert!(
                common::same_bits(&got[0], &want),
                "{what} differs from the interpreter's"
            );
            // Into a caller's buffer 16 bytes past a cache line: written
            // in place, not streamed, and not a byte beside it.
            let bytes = want.bytes().len();
            let mut buf = vec![0x5a_u8; bytes + 128];
            let start = buf.as_ptr().align_offset(64) + 16;
            let out_dims: Vec<usize> = want.shape().to_vec();
            let mut outs =
                [
                    tensorlift::TensorMut::new(dtype, &out_dims, &mut buf[start..start + bytes])
                        .unwrap(),
                ];
            f.call_into(std::slice::from_ref(&x), &mut outs).unwrap();
            let got = Tensor::from_bytes(dtype, &out_dims, outs[0].bytes_mut()).unwrap();
            assert!(
                common::same_bits(&got, &want),
                "{what} into an unaligned buffer differs from the interpreter's"
            );
            assert!(
                buf[..start]
                    .iter()
                    .chain(&buf[start + bytes..])
                    .all(|&b| b == 0x5a),
                "{what} wrote outside the caller's buffer"
            );
        }
    }
    // A view read backwards from an offset (a slice, reversed), and an
    // 8 MiB output that the next kernel of its row group reads: not
    // streamed.
    let x = common::f32s(
        &(0..64 * 96).map(|i| i as f32).collect::<Vec<_>>(),
        &[64, 96],
    );
    let view = |x: Sym| {
        x.slice(&[0, 16], &[64, 80], &[1, 1])
            .reverse(&[0])
            .transpose(&[1, 0])
    };
    let grouped = |x: Sym| {
        let t = x.transpose(&[0, 2, 1]);
        let u = &t + &t.transpose(&[0, 2, 1]);
        vec![t, u]
    };
    let y = common::f32s(
        &(0..8192 * 256)
            .map(|i| (i % 1000) as f32)
            .collect::<Vec<_>>(),
        &[8192, 16, 16],
    );
    for (name, f, x) in [
        ("a reversed slice", function(view).jit_compile(true), x),
        (
            "a row group's member",
            function(grouped).jit_compile(true),
            y,
        ),
    ] {
        let want = f
            .clone()
            .jit_compile(false)
            .call(std::slice::from_ref(&x))
            .unwrap();
        let got = f.call(std::slice::from_ref(&x)).unwrap();
        assert!(
            common::same_bits(&got[0], &want[0]),
            "{name} differs from the interpreter's"
        );
        let clif = f
            .compiler_ir(
                &[TensorSpec::known(DType::F32, x.shape())],
                IrStage::Cranelift,
            )
            .unwrap();
        assert_eq!(
            clif.contains("(codegen/transpose.rs)"),
            avx512,
            "{name}: machine code exactly where the host has AVX-512:\n{clif}"
        );
        assert!(!clif.contains("vmovntps"), "{name} streamed:\n{clif}");
    }
}

#[test]
fn unrolled_elementwise_rows_cover_every_tail() {
    // Cheap elementwise rows run four vectors per step, then one vector
    // per step, then a scalar tail. Every row length up to three unrolled
    // steps of f32 (48) and f64 (24) elements, with rows of a matrix and a
    // broadcast operand (a hoisted stride-0 load), must match the
    // interpreter bit for bit.
    let body = |x: Sym, y: Sym| ((&x * 3 + 1) * &x - &y) * 5 + &x;
    let make = |dtype: DType, dims: &[usize], seed: u64| -> Tensor {
        let n: usize = dims.iter().product();
        // Small integers, exact in every dtype: a misplaced lane shows.
        let v: Vec<i32> = noise(n, seed).iter().map(|&b| i32::from(b) - 128).collect();
        let shape = dims.to_vec();
        if dtype == DType::F32 {
            let v = v.iter().map(|&i| i as f32).collect();
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape, v).unwrap())
        } else if dtype == DType::F64 {
            let v = v.iter().map(|&i| f64::from(i)).collect();
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape, v).unwrap())
        } else {
            Tensor::from(ndarray::ArrayD::from_shape_vec(shape, v).unwrap())
        }
    };
    for dtype in [DType::F32, DType::F64, DType::I32] {
        for n in 0..=50_usize {
            for rows in [1_usize, 3] {
                let args = [
                    make(dtype, &[rows, n], n as u64),
                    make(dtype, &[rows, 1], 1000 + n as u64),
                ];
                let want = function(body).call(&args).unwrap();
                let got = function(body).jit_compile(true).call(&args).unwrap();
                assert!(
                    common::same_bits(&got[0], &want[0]),
                    "{dtype:?}[{rows}, {n}]: the compiled row differs from the interpreter's"
                );
            }
        }
    }
}

#[test]
fn column_and_middle_axis_reductions_sum_in_row_order() {
    // Sums over rows that keep the innermost dim run as calls of a
    // column-sum routine (blocks of columns outermost and split over
    // cores when the outermost dim is reduced); the others (a product, a
    // max, a fused producer, integers) take the inline loops over the same
    // tiled nest. Every column is summed row after row in its own type:
    // the same bits as a sum in that order (an f32 sum in exact mode is
    // the interpreter's, accumulated in f64).
    // (dtype, dims, what the reduction reads, the reduction, its axes,
    // keepdims)
    type Pre = fn(Sym) -> Sym;
    type Red = fn(&Sym, Option<&[i64]>, bool) -> Sym;
    let id: Pre = |x| x;
    let (sum, max, prod): (Red, Red, Red) = (Sym::reduce_sum, Sym::reduce_max, Sym::reduce_prod);
    type Case = (DType, &'static [usize], Pre, Red, &'static [usize], bool);
    let cases: &[Case] = &[
        (DType::F32, &[4096, 1024], id, sum, &[0], false),
        (DType::F64, &[512, 512], id, sum, &[0], false),
        (DType::F32, &[3, 70, 130], id, sum, &[1], false),
        (DType::F32, &[64, 33, 64], id, sum, &[0, 1], false),
        (
            DType::F32,
            &[600, 1024],
            |x| x.reverse(&[0]),
            sum,
            &[0],
            true,
        ),
        (DType::F32, &[300, 1024], |x| &x * 2.0, sum, &[0], false),
        (DType::F32, &[300, 1024], id, max, &[0], false),
        (DType::F64, &[40, 300, 16], id, prod, &[1], false),
        (DType::I32, &[300, 1024], id, sum, &[0], false),
        // The outermost dim reduced, two kept dims that do not merge (a
        // block of columns' outputs are not one run): not tiled.
        (
            DType::F32,
            &[2, 2, 1024],
            |x| x.transpose(&[1, 0, 2]),
            sum,
            &[0],
            false,
        ),
        (
            DType::F32,
            &[1, 2, 1024],
            |x| x.reverse(&[1]),
            sum,
            &[0],
            false,
        ),
        (
            DType::F64,
            &[3, 4, 512],
            |x| x.transpose(&[1, 0, 2]),
            sum,
            &[0],
            false,
        ),
    ];
    for (i, &(dtype, dims, pre, red, axes, keep)) in cases.iter().enumerate() {
        let n: usize = dims.iter().product();
        let vals: Vec<f64> = (0..n)
            .map(|j| ((j * 7919 + i * 31) % 2003) as f64 / 97.0 - 10.0)
            .collect();
        let x64 = Tensor::from(ndarray::ArrayD::from_shape_vec(dims.to_vec(), vals).unwrap());
        let x = function(move |x: Sym| x.cast(dtype)).call(&[x64]).unwrap()[0].clone();
        let ax: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
        let body = move |x: Sym| red(&pre(x), Some(&ax), keep);
        let interp = function(body.clone())
            .call(std::slice::from_ref(&x))
            .unwrap();
        // An f32 sum: row after row in f32 outside exact mode (the
        // interpreter accumulates in f64, and exact mode runs its kernel).
        let f32_sum = dtype == DType::F32 && std::ptr::fn_addr_eq(red, sum);
        let in_order = f32_sum.then(|| {
            let read = function(pre).call(std::slice::from_ref(&x)).unwrap();
            common::sum_in_order_f32(&read[0], axes, keep)
        });
        for (exact, threads) in [(true, true), (false, true), (false, false)] {
            let f = function(body.clone())
                .jit_compile(true)
                .jit_options(JitOptions {
                    exact,
                    threads,
                    ..JitOptions::default()
                });
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            let want = match (&in_order, exact) {
                (Some(t), false) => t,
                (Some(_) | None, _) => &interp[0],
            };
            assert!(
                common::same_bits(&got[0], want),
                "case {i} ({dtype:?}{dims:?}, exact {exact}, threads {threads}) differs from a \
                 sum in row order: {:?} against {:?}",
                &got[0],
                want
            );
        }
    }
    let f = function(|x: Sym| x.reduce_sum(Some(&[0]), false)).jit_compile(true);
    let fused = f
        .compiler_ir(
            &[TensorSpec::known(DType::F32, &[4096, 1024])],
            IrStage::Fused,
        )
        .unwrap();
    // Split over threads, unless one is allowed (RAYON_NUM_THREADS=1,
    // a one-core host), in blocks of 512 columns, narrower (down to 16)
    // where the pool has more threads than blocks.
    let block: usize = fused
        .split("columns in blocks of ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("the column sum was not blocked:\n{fused}"));
    let threads = tensorlift::runtime::pool::threads();
    assert!(
        block <= 512 && (1024 / block >= threads || block == 16),
        "blocks of {block} for {threads} threads"
    );
    assert!(
        block == 512 || 1024 / (2 * block) < threads,
        "blocks of {block} narrower than {threads} threads need"
    );
    assert!(
        fused.contains("ranges of") || fused.contains("one thread allowed"),
        "the column sum was not split:\n{fused}"
    );
}

#[test]
fn compiled_functions_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<tensorlift::CompiledFunction>();
    assert_send_sync::<tensorlift::Executable>();
    assert_send_sync::<tensorlift::Function>();
    assert_send_sync::<Tensor>();
}

#[test]
fn very_long_chains_compile_without_deep_recursion() {
    // 20,000 dependent ops fuse into one kernel; nothing recurses per op.
    let f = function(|x: Sym| {
        let mut y = x;
        for i in 0..20_000 {
            y = if i % 2 == 0 { &y * 1.0001 } else { &y + 0.5 };
        }
        y
    })
    .jit_compile(true);
    let out = f.call(&[common::f32s(&[0.0], &[1])]).unwrap();
    let mut want = 0.0f32;
    for i in 0..20_000 {
        want = if i % 2 == 0 {
            want * 1.0001
        } else {
            want + 0.5
        };
    }
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![want]);
}

/// A comparison converted to a number (`cast` of a bool, as the gradient
/// of a max counts the ties of each row) and summed per row runs as vector
/// code for f32, f64 and i32 rows; summed and elementwise it gives the
/// interpreter's bits (NaNs compare false; odd row lengths leave tails).
#[test]
fn comparisons_cast_to_numbers_are_vector_code() {
    let (rows, cols) = (7, 37);
    // (NaN in the even rows only: a row with a NaN has a NaN max, which
    // nothing equals.)
    let values = |i: usize| -> f64 {
        match i % 11 {
            3 if (i / cols).is_multiple_of(2) => f64::NAN,
            5 => -0.0,
            _ => ((i * 7919) % 13) as f64 - 6.0,
        }
    };
    let a = ndarray::ArrayD::from_shape_fn(vec![rows, cols], |ix| values(ix[0] * cols + ix[1]));
    for (x, lanes) in [
        (Tensor::from(a.mapv(|v| v as f32)), "f32x4"),
        (Tensor::from(a.clone()), "f64x2"),
        (
            Tensor::from(a.mapv(|v| if v.is_nan() { 4 } else { v as i32 })),
            "i32x4",
        ),
    ] {
        let dt = x.dtype();
        let ties = move |x: Sym| {
            let m = x.reduce_max(Some(&[1]), true);
            let hits = x.equal(&m).cast(dt);
            (
                hits.reduce_sum(Some(&[1]), false),
                x.greater(&(&m - &x)).cast(dt) * &x,
            )
        };
        let jit = function(ties).jit_compile(true).name("ties");
        let interp = function(ties).jit_compile(false);
        let (got, want) = (
            jit.call(std::slice::from_ref(&x)).unwrap(),
            interp.call(std::slice::from_ref(&x)).unwrap(),
        );
        for (g, w) in got.iter().zip(&want) {
            assert!(common::same_bits(g, w), "{dt:?}: {g:?} against {w:?}");
        }
        // Every odd row has ties to count.
        let counts: Vec<f64> = if dt == DType::F32 {
            common::to_vec::<f32>(&want[0])
                .into_iter()
                .map(f64::from)
                .collect()
        } else if dt == DType::F64 {
            common::to_vec::<f64>(&want[0])
        } else {
            common::to_vec::<i32>(&want[0])
                .into_iter()
                .map(f64::from)
                .collect()
        };
        assert!(
            counts.iter().skip(1).step_by(2).all(|&c| c >= 1.0),
            "{dt:?}: {counts:?}"
        );
        let spec = [TensorSpec::known(dt, &[rows, cols])];
        let clif = jit.compiler_ir(&spec, IrStage::Cranelift).unwrap();
        // The row sum's kernel: its function until the next one.
        let start = clif.find("; kernel 'reduce_sum").unwrap();
        let end = clif[start + 1..]
            .find("\n; ")
            .map_or(clif.len(), |e| start + 1 + e);
        let kernel = &clif[start..end];
        // An f32 row sum is machine code where the host allows (the mask
        // blends 1 or 0: codegen/native.rs); the others Cranelift's
        // vectors.
        let native = dt == DType::F32 && compiler::max_isa() >= compiler::IsaLevel::Avx2;
        if native {
            assert!(
                kernel.contains(" machine code, ")
                    && (kernel.contains("vblendmps") || kernel.contains("vblendvps")),
                "{dt:?}: the row count is not machine code selecting 1 or 0\n{kernel}"
            );
        } else {
            assert!(
                kernel.contains(lanes),
                "{dt:?}: the row count is scalar\n{kernel}"
            );
        }
    }
}

#[test]
fn gathers_fuse_into_their_consumers() {
    // A `take` read only by kernels is an index map of theirs: each
    // element is loaded where it lies in the table (no gathered copy),
    // after a runtime step checked the indices. The same bits as the
    // interpreter in exact mode whatever the indices' type, the axis and
    // the reader.
    type Body = fn(Sym, Sym) -> Sym;
    // (table dtype, table dims, index dtype, index dims, axis, program)
    type Case<'a> = (DType, &'a [usize], DType, &'a [usize], i64, Body);
    let cases: &[Case] = &[
        // An embedding bag: rows summed over the bag (a middle-axis sum).
        (DType::F32, &[300, 64], DType::I32, &[40, 7], 0, |t, i| {
            t.take(&i, 0).reduce_sum(Some(&[1]), false)
        }),
        (DType::F64, &[300, 64], DType::I64, &[40, 7], 0, |t, i| {
            t.take(&i, 0).reduce_sum(Some(&[1]), false)
        }),
        // Rows of odd length (vector body and scalar tail).
        (DType::F32, &[50, 37], DType::U8, &[9], 0, |t, i| {
            (t.take(&i, 0) * 0.5).exp()
        }),
        // The innermost axis gathered: the index changes along the row.
        (DType::F32, &[6, 50], DType::I32, &[11], 1, |t, i| {
            t.take(&i, 1).tanh() + 1.0
        }),
        // A middle axis of a rank-3 table at 2-D indices, a row max.
        (DType::F32, &[4, 30, 20], DType::I64, &[3, 5], 1, |t, i| {
            t.take(&i, 1).reduce_max(Some(&[-1]), false)
        }),
        // One row (rank-0 indices), integers.
        (DType::I32, &[10, 16], DType::I16, &[], 0, |t, i| {
            t.take(&i, 0) * 3 + 1
        }),
        // Two gathers from one table in one kernel.
        (DType::F32, &[64, 32], DType::I32, &[16], 0, |t, i| {
            let j = i.graph().iota(DType::I32, &[16], 0) * 2;
            &t.take(&i, 0) - &t.take(&j, 0)
        }),
    ];
    for (c, &(tdt, tdims, idt, idims, axis, body)) in cases.iter().enumerate() {
        let n: usize = tdims.iter().product();
        let vals: Vec<f64> = (0..n)
            .map(|j| ((j * 7919 + c * 31) % 2003) as f64 / 97.0 - 10.0)
            .collect();
        let t64 = Tensor::from(ndarray::ArrayD::from_shape_vec(tdims.to_vec(), vals).unwrap());
        let table = function(move |x: Sym| x.cast(tdt)).call(&[t64]).unwrap()[0].clone();
        let bound = tdims[axis as usize];
        let m: usize = idims.iter().product();
        let ids: Vec<i64> = (0..m).map(|j| ((j * 37 + c) % bound) as i64).collect();
        let ids = Tensor::from(ndarray::ArrayD::from_shape_vec(idims.to_vec(), ids).unwrap());
        let ids = function(move |x: Sym| x.cast(idt)).call(&[ids]).unwrap()[0].clone();
        let args = [table.clone(), ids.clone()];
        let want = function(body).call(&args).unwrap();
        for exact in [true, false] {
            let f = function(body).jit_compile(true).jit_options(JitOptions {
                exact,
                ..JitOptions::default()
            });
            let got = f.call(&args).unwrap();
            if exact {
                assert!(
                    common::same_bits(&got[0], &want[0]),
                    "case {c} differs from the interpreter"
                );
            } else {
                // Approximated exp and tanh; sums in f32 (the
                // interpreter's accumulate in f64).
                common::assert_close(&got[0], &want[0], 1e-5, 1e-5, &format!("case {c}"));
            }
        }
        let fused = function(body)
            .jit_compile(true)
            .compiler_ir(
                &[TensorSpec::known(tdt, tdims), TensorSpec::known(idt, idims)],
                IrStage::Fused,
            )
            .unwrap();
        assert!(
            fused.contains("fused into its readers as a gather")
                && !fused.contains("runtime kernel (take"),
            "case {c}: the take was not fused:\n{fused}"
        );
    }
    // Out-of-range indices are the take's error, before anything is read;
    // the function keeps working after it.
    let f =
        function(|t: Sym, i: Sym| t.take(&i, 0).reduce_sum(Some(&[1]), false)).jit_compile(true);
    let table = common::f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    for bad in [3i64, -1] {
        let ids = Tensor::from(ndarray::arr2(&[[0i64, 1], [2, bad]]).into_dyn());
        let e = f.call(&[table.clone(), ids]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("indices[3] = {bad} is not in [0, 3)"))
                && msg.contains("take")
                && msg.contains("jit_api.rs"),
            "{msg}"
        );
    }
    let ids = Tensor::from(ndarray::arr2(&[[0i64, 1], [2, 2]]).into_dyn());
    let out = f.call(&[table, ids]).unwrap();
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![4.0, 6.0, 10.0, 12.0]);
    // A loop whose carry is gathered from itself (a permutation of its
    // rows per iteration): no kernel writes the rows it gathers from.
    let permute = |t: Sym, i: Sym| {
        tensorlift::fori_loop(0, 5, |_, c| vec![c[0].take(&i, 0) * 2.0 + 1.0], &[t]).remove(0)
    };
    let table = common::f32s(&(0..24).map(|v| v as f32).collect::<Vec<_>>(), &[6, 4]);
    let ids = Tensor::from(ndarray::arr1(&[5i32, 3, 0, 1, 4, 2]).into_dyn());
    let want = function(permute)
        .call(&[table.clone(), ids.clone()])
        .unwrap();
    let got = function(permute)
        .jit_compile(true)
        .call(&[table, ids])
        .unwrap();
    assert!(common::same_bits(&got[0], &want[0]), "{got:?} vs {want:?}");
    // A take the caller gets stays a copy of the rows (a runtime kernel).
    let f = function(|t: Sym, i: Sym| t.take(&i, 0)).jit_compile(true);
    let fused = f
        .compiler_ir(
            &[
                TensorSpec::known(DType::F32, &[8, 4]),
                TensorSpec::known(DType::I32, &[3]),
            ],
            IrStage::Fused,
        )
        .unwrap();
    assert!(fused.contains("runtime kernel (take"), "{fused}");
}

#[test]
fn loop_carries_start_filled_in_place() {
    // A carry whose initial value is a fill that only the loop reads (the
    // zeros a loop's stacked rows start from) is filled in the carry's
    // own slot: no buffer of zeros copied in at every call (rows of 512:
    // a fill of over 4096 elements is not folded into a constant). A fill
    // read after the loop or inside it too is copied as before. Same bits as the
    // interpreter either way.
    // 16 steps writing row i of a fill `v` of (16, 512), the fill read
    // inside the body too when `captured`; returns the rows and the fill.
    fn stacked(x: Sym, v: f64, captured: bool) -> (Sym, Sym) {
        let g = x.graph();
        let rows = g.scalar(DType::F32, v).broadcast_to(&[16, 512]);
        let out = tensorlift::fori_loop(
            0,
            16,
            |i, c| {
                let row = (&c[0] * 0.5 + 1.0).reshape(&[1, 512]);
                let zero = i.graph().scalar(DType::I32, 0.0);
                let mut h = c[0].tanh();
                if captured {
                    // (Row i: a read the loop cannot hoist.)
                    h = h + rows.dynamic_slice(&[i, &zero], &[1, 512]).reshape(&[512]);
                }
                vec![h, c[1].dynamic_update_slice(&row, &[i, &zero])]
            },
            &[x, rows.clone()],
        );
        (out[1].clone(), rows)
    }
    type Body = fn(Sym) -> Sym;
    let cases: [(Body, bool); 3] = [
        (|x| stacked(x, 0.0, false).0, true),
        (
            |x| {
                let (out, rows) = stacked(x, 0.0, false);
                out + rows
            },
            false,
        ),
        // The fill is also captured by the body, which reads it where it
        // is: it must be written.
        (|x| stacked(x, 0.5, true).0, false),
    ];
    let x = common::f32s(
        &(0..512).map(|i| i as f32 / 256.0 - 1.0).collect::<Vec<_>>(),
        &[512],
    );
    for (c, (body, filled)) in cases.into_iter().enumerate() {
        let want = function(body).call(std::slice::from_ref(&x)).unwrap();
        let f = function(body).jit_compile(true).jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        });
        for _ in 0..3 {
            let got = f.call(std::slice::from_ref(&x)).unwrap();
            assert!(
                common::same_bits(&got[0], &want[0]),
                "case {c} differs from the interpreter"
            );
        }
        let fused = function(body)
            .jit_compile(true)
            .compiler_ir(&[TensorSpec::known(DType::F32, &[512])], IrStage::Fused)
            .unwrap();
        assert_eq!(
            fused.contains("instead of copied into them"),
            filled,
            "case {c}:\n{fused}"
        );
    }
}

#[test]
fn loop_invariant_gemm_operands_are_packed_once() {
    // A GEMM in a loop whose right operand the loop leaves alone reads it
    // packed once before the loop; the same bits as the interpreter in
    // exact mode, with new weights at every call.
    use tensorlift::{fori_loop, while_loop};
    type Body = fn(Sym, Sym, Sym) -> Sym;
    // (h dims, w dims, program, pack steps expected)
    type Case<'a> = (&'a [usize], &'a [usize], Body, usize);
    let cases: &[Case] = &[
        // h ← tanh(h·W + u), split over the pool by rows.
        (
            &[64, 512],
            &[512, 512],
            |h, w, u| fori_loop(0, 4, |_, c| vec![(c[0].matmul(&w) + &u).tanh()], &[h]).remove(0),
            1,
        ),
        // Odd sizes (panels and row blocks cut short), W read transposed.
        (
            &[37, 100],
            &[100, 100],
            |h, w, u| {
                let wt = w.transpose(&[1, 0]);
                fori_loop(0, 3, |_, c| vec![(c[0].matmul(&wt) + &u).tanh()], &[h]).remove(0)
            },
            1,
        ),
        // In f64, W a temporary (converted before the loop), and a trip
        // count that depends on the data.
        (
            &[24, 40],
            &[40, 40],
            |h, w, u| {
                let (h, w, u) = (h.cast(DType::F64), w.cast(DType::F64), u.cast(DType::F64));
                let out = while_loop(
                    |c| {
                        (c[0].abs().reduce_sum(None, false))
                            .less(c[1].abs().reduce_sum(None, false) * 4.0)
                    },
                    |c| vec![c[0].matmul(&w) + &u + &c[0] * 1.5, c[1].clone()],
                    &[h.clone(), h],
                );
                out[0].cast(DType::F32)
            },
            1,
        ),
        // Two products by W in one loop: one packed copy.
        (
            &[64, 100],
            &[100, 100],
            |h, w, u| {
                fori_loop(
                    0,
                    3,
                    |_, c| vec![(c[0].matmul(&w) + c[0].tanh().matmul(&w) + &u).tanh()],
                    &[h],
                )
                .remove(0)
            },
            1,
        ),
        // Nested loops: packed once, before the outer one.
        (
            &[32, 64],
            &[64, 64],
            |h, w, u| {
                fori_loop(
                    0,
                    3,
                    |_, c| {
                        let inner = fori_loop(
                            0,
                            2,
                            |_, d| vec![(d[0].matmul(&w) + &u).tanh()],
                            &[c[0].clone()],
                        );
                        vec![inner[0].clone() * 0.9]
                    },
                    &[h],
                )
                .remove(0)
            },
            1,
        ),
        // W changes at every step: not packed.
        (
            &[64, 100],
            &[100, 100],
            |h, w, u| {
                fori_loop(
                    0,
                    4,
                    |_, c| vec![(c[0].matmul(&c[1]) + &u).tanh(), c[1].tanh()],
                    &[h, w],
                )
                .remove(0)
            },
            0,
        ),
        // Deeper than one block of `gemm`'s (512): not packed.
        (
            &[8, 600],
            &[600, 600],
            |h, w, u| fori_loop(0, 2, |_, c| vec![(c[0].matmul(&w) + &u).tanh()], &[h]).remove(0),
            0,
        ),
        // Not in a loop: not packed.
        (
            &[64, 100],
            &[100, 100],
            |h, w, u| (h.matmul(&w) + u).tanh(),
            0,
        ),
    ];
    for (c, &(hd, wd, body, packs)) in cases.iter().enumerate() {
        let vals = |n: usize, s: usize| -> Vec<f32> {
            (0..n)
                .map(|j| ((j * 7919 + s * 31) % 2003) as f32 / 2003.0 - 0.5)
                .collect()
        };
        let ud = [hd[0], wd[1]];
        let args = |s: usize| {
            [
                common::f32s(&vals(hd.iter().product(), s), hd),
                common::f32s(
                    &(vals(wd.iter().product(), s + 1).iter())
                        .map(|v| v * 0.1)
                        .collect::<Vec<_>>(),
                    wd,
                ),
                common::f32s(&vals(ud.iter().product(), s + 2), &ud),
            ]
        };
        let f = function(body).jit_compile(true).jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        });
        for call in 0..3 {
            let a = args(call * 10);
            let want = function(body).call(&a).unwrap();
            let got = f.call(&a).unwrap();
            assert!(
                common::same_bits(&got[0], &want[0]),
                "case {c}, call {call}: differs from the interpreter"
            );
        }
        let specs: Vec<TensorSpec> = args(0)
            .iter()
            .map(|t| TensorSpec::known(t.dtype(), t.shape()))
            .collect();
        let fused_ir = function(body)
            .jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap();
        let steps: Vec<&str> = fused_ir
            .lines()
            .filter(|l| l.starts_with("  step "))
            .collect();
        let pack_at: Vec<usize> = (steps.iter().enumerate())
            .filter(|(_, l)| l.contains(": pack '"))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(pack_at.len(), packs, "case {c}:\n{fused_ir}");
        assert_eq!(
            fused_ir.matches("rhs packed in slot").count(),
            if packs > 0 {
                steps.iter().filter(|l| l.contains(": gemm '")).count()
            } else {
                0
            },
            "case {c}: every product by W reads the packed copy:\n{fused_ir}"
        );
        if let Some(&p) = pack_at.first() {
            let first_label = steps.iter().position(|l| l.contains(": label ")).unwrap();
            assert!(
                p < first_label,
                "case {c}: packed inside a loop:\n{fused_ir}"
            );
        }
    }
}

#[test]
fn gemm_epilogues_run_on_each_parts_rows() {
    // The kernel right after a GEMM, over its rows and reading the product
    // only from the row it writes (a layer's bias and activation, a row
    // reduction), runs on each part's rows as the part finishes them. The same bits as
    // the interpreter in exact mode.
    type Body = fn(Sym, Sym, Sym) -> Sym;
    // (x dims, w dims, program, whether the kernel is an epilogue)
    type Case<'a> = (&'a [usize], &'a [usize], Body, bool);
    let cases: &[Case] = &[
        // Split by rows over the pool (39M multiply-adds).
        (
            &[256, 512],
            &[512, 300],
            |x, w, b| (x.matmul(&w) + b).maximum(0.0),
            true,
        ),
        // Small: one part.
        (
            &[5, 16],
            &[16, 300],
            |x, w, b| (x.matmul(&w) + b).tanh(),
            true,
        ),
        // The product read transposed: not an epilogue.
        (
            &[300, 256],
            &[256, 300],
            |x, w, b| x.matmul(&w).transpose(&[1, 0]) + b,
            false,
        ),
        // Dims merged into one (`m·n` indices, a row's length per row).
        (
            &[64, 128],
            &[128, 512],
            |x, w, _| x.matmul(&w).tanh() * 2.0,
            true,
        ),
        // Row reductions (a softmax's row max, a row sum).
        (
            &[256, 512],
            &[512, 300],
            |x, w, b| (x.matmul(&w) + b).reduce_max(Some(&[1]), true),
            true,
        ),
        (
            &[256, 512],
            &[512, 300],
            |x, w, _| x.matmul(&w).reduce_sum(Some(&[1]), false),
            true,
        ),
        // A sum over the rows: not an epilogue.
        (
            &[256, 512],
            &[512, 300],
            |x, w, _| x.matmul(&w).reduce_sum(Some(&[0]), false),
            false,
        ),
        // A product of one column: not an epilogue (it becomes row
        // reductions outside exact mode).
        (
            &[256, 512],
            &[512, 1],
            |x, w, b| (x.matmul(&w) + b).maximum(0.0),
            false,
        ),
        // The product is returned too (its slot an output).
        (
            &[200, 128],
            &[128, 300],
            |x, w, b| {
                let p = x.matmul(&w);
                &p * (&p + b).exp()
            },
            true,
        ),
    ];
    for (c, &(xd, wd, body, fused)) in cases.iter().enumerate() {
        let vals = |n: usize, s: usize| -> Vec<f32> {
            (0..n)
                .map(|j| ((j * 7919 + s * 31) % 2003) as f32 / 2003.0 - 0.5)
                .collect()
        };
        let x = common::f32s(&vals(xd.iter().product(), 1), xd);
        let w = common::f32s(&vals(wd.iter().product(), 2), wd);
        let b = common::f32s(&vals(wd[1], 3), &[wd[1]]);
        let args = [x, w, b];
        let want = function(body).call(&args).unwrap();
        let f = function(body).jit_compile(true).jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        });
        for _ in 0..3 {
            let got = f.call(&args).unwrap();
            assert!(
                common::same_bits(&got[0], &want[0]),
                "case {c} differs from the interpreter"
            );
        }
        let specs: Vec<TensorSpec> = args
            .iter()
            .map(|t| TensorSpec::known(t.dtype(), t.shape()))
            .collect();
        let fused_ir = function(body)
            .jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap();
        assert_eq!(
            fused_ir.contains("then on each part's rows"),
            fused,
            "case {c}:\n{fused_ir}"
        );
    }
    // A product too thin to split (k = 1) with a costly epilogue: the
    // kernel still splits over the pool after it, as a step of its own
    // would.
    let outer = |x: Sym, y: Sym| x.matmul(&y).exp();
    let specs = [
        TensorSpec::known(DType::F32, &[2048, 1]),
        TensorSpec::known(DType::F32, &[1, 2048]),
    ];
    let fused_ir = function(outer)
        .jit_compile(true)
        .compiler_ir(&specs, IrStage::Fused)
        .unwrap();
    let want = if tensorlift::runtime::pool::threads() > 1 {
        "its epilogue 'exp' after it, in "
    } else {
        "its epilogue 'exp' after it, on one thread"
    };
    assert!(fused_ir.contains(want), "{fused_ir}");
    let x = common::f32s(
        &(0..2048)
            .map(|j| (j % 13) as f32 * 0.01)
            .collect::<Vec<_>>(),
        &[2048, 1],
    );
    let y = common::f32s(
        &(0..2048).map(|j| (j % 7) as f32 * 0.1).collect::<Vec<_>>(),
        &[1, 2048],
    );
    let args = [x, y];
    let want = function(outer).call(&args).unwrap();
    let got = function(outer)
        .jit_compile(true)
        .jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        })
        .call(&args)
        .unwrap();
    assert!(
        common::same_bits(&got[0], &want[0]),
        "the outer product differs"
    );
    // In a loop body: h ← tanh(h·W + x), 20 steps.
    let rnn = |h: Sym, w: Sym, x: Sym| {
        tensorlift::fori_loop(0, 20, |_, c| vec![(c[0].matmul(&w) + &x).tanh()], &[h]).remove(0)
    };
    let h = common::f32s(
        &(0..128 * 256)
            .map(|j| (j % 7) as f32 * 0.1)
            .collect::<Vec<_>>(),
        &[128, 256],
    );
    let w = common::f32s(
        &(0..256 * 256)
            .map(|j| ((j * 13) % 17) as f32 * 0.004 - 0.03)
            .collect::<Vec<_>>(),
        &[256, 256],
    );
    let x = common::f32s(
        &(0..128 * 256)
            .map(|j| (j % 5) as f32 * 0.2)
            .collect::<Vec<_>>(),
        &[128, 256],
    );
    let args = [h, w, x];
    let specs: Vec<TensorSpec> = args
        .iter()
        .map(|t| TensorSpec::known(t.dtype(), t.shape()))
        .collect();
    let fused_ir = function(rnn)
        .jit_compile(true)
        .compiler_ir(&specs, IrStage::Fused)
        .unwrap();
    assert!(
        fused_ir.contains("then on each part's rows (256 of"),
        "{fused_ir}"
    );
    let want = function(rnn).call(&args).unwrap();
    let got = function(rnn)
        .jit_compile(true)
        .jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        })
        .call(&args)
        .unwrap();
    assert!(common::same_bits(&got[0], &want[0]), "the loop differs");
}

/// Compiled code flushes denormals to zero, results and operands alike,
/// as XLA's CPU code does (`jax.jit(lambda x: x * 0.5)(2e-38)` is 0), on
/// every thread a call splits over; it keeps them in exact mode or when
/// told to, as the interpreter always does. The calling thread's own
/// mode is back when the call returns, and a callback inside the code
/// runs in it. (Elsewhere than on x86-64 nothing is flushed.)
#[test]
fn denormals_flush_to_zero_in_compiled_code_unless_kept() {
    use tensorlift::ir::Shape;
    let tiny = f32::MIN_POSITIVE;
    let quarter = std::hint::black_box(tiny) / 4.0;
    assert!(quarter.is_subnormal());
    // Long enough to split over the pool.
    let n = 1 << 20;
    let x = common::f32s(&vec![tiny; n], &[n]);
    let d = common::f32s(&[quarter; 8], &[8]);
    let body = move |x: Sym, d: Sym| {
        // The callback halves in Rust: in the caller's mode.
        let halved = x.graph().host_fn_with(
            "halve",
            |ins: &[Tensor]| {
                let v = ins[0].array_view::<f32>()?;
                Ok(vec![Tensor::from(
                    v.mapv(|x| std::hint::black_box(x) * 0.5),
                )])
            },
            &[&x],
            &[DType::F32],
            &[Shape::known(&[n])],
            false,
        );
        vec![
            // A denormal result (FTZ), in f32 and in f64 (sin(x) is x
            // here; it makes the kernels long enough to split).
            x.sin() * 0.5,
            x.cast(DType::F64).sin() * 1e-280,
            // A denormal operand whose product is a normal number (DAZ).
            &d * 1073741824.0,
            halved[0].clone(),
        ]
    };
    let check = |out: &[Tensor], flushed: bool, what: &str| {
        let half = common::to_vec::<f32>(&out[0]);
        let tiny64 = common::to_vec::<f64>(&out[1]);
        let up = common::to_vec::<f32>(&out[2]);
        if flushed {
            assert!(half.iter().all(|v| *v == 0.0), "{what}: sin(x) * 0.5");
            assert!(tiny64.iter().all(|v| *v == 0.0), "{what}: f64");
            assert!(up.iter().all(|v| *v == 0.0), "{what}: d * 2^30");
        } else {
            assert!(
                half.iter().all(|v| *v == tiny * 0.5),
                "{what}: sin(x) * 0.5"
            );
            assert!(tiny64.iter().all(|v| v.is_subnormal()), "{what}: f64");
            assert!(
                up.iter().all(|v| *v == quarter * 1073741824.0),
                "{what}: d * 2^30"
            );
        }
        let from_callback = common::to_vec::<f32>(&out[3]);
        assert!(
            from_callback.iter().all(|v| *v == tiny * 0.5),
            "{what}: the callback ran in the caller's mode"
        );
        // The calling thread computes denormals again.
        assert!((std::hint::black_box(tiny) * 0.5).is_subnormal(), "{what}");
    };
    let flushes = cfg!(target_arch = "x86_64");
    let inputs = [x, d];
    if tensorlift::runtime::pool::threads() > 1 {
        let specs = [
            TensorSpec::known(DType::F32, &[n]),
            TensorSpec::known(DType::F32, &[8]),
        ];
        let plan = function(body)
            .jit_compile(true)
            .compiler_ir(&specs, IrStage::Fused)
            .unwrap();
        assert!(plan.contains("split into"), "{plan}");
    }
    check(&function(body).call(&inputs).unwrap(), false, "interpreted");
    let jit = function(body).jit_compile(true);
    for _ in 0..2 {
        check(&jit.call(&inputs).unwrap(), flushes, "compiled");
    }
    for (what, options) in [
        (
            "exact",
            JitOptions {
                exact: true,
                ..JitOptions::default()
            },
        ),
        (
            "kept",
            JitOptions {
                flush_denormals: false,
                ..JitOptions::default()
            },
        ),
    ] {
        let f = function(body).jit_compile(true).jit_options(options);
        check(&f.call(&inputs).unwrap(), false, what);
    }
}

/// Outside exact mode a division by a value broadcast along the result is
/// a product with its reciprocal, as XLA's CPU code computes it (its
/// softmax equals `e * (1 / s)` bit for bit): per row, per column and by a
/// scalar, in f32 and f64. A divisor of the result's own shape stays a
/// division, and exact mode divides as the interpreter does.
#[test]
fn divisions_by_broadcast_values_multiply_by_reciprocals_as_xla_does() {
    let (rows, cols) = (37usize, 129usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
        .collect();
    let by_row: Vec<f32> = (0..rows).map(|i| 0.37 + i as f32 * 1.13).collect();
    let by_col: Vec<f32> = (0..cols).map(|i| 3.1 - i as f32 * 0.071).collect();
    let inputs = [
        common::f32s(&x, &[rows, cols]),
        common::f32s(&by_row, &[rows, 1]),
        common::f32s(&by_col, &[cols]),
    ];
    let body = |x: Sym, r: Sym, c: Sym| {
        vec![
            &x / &r.broadcast_to(&[37, 129]),
            &x / &c.broadcast_to(&[37, 129]),
            &x / 3.0,
            x.cast(DType::F64) / r.cast(DType::F64).broadcast_to(&[37, 129]),
            &x / &(&x * 0.5 + 7.0),
            // A scalar known at run time only.
            &x / &r.reduce_max(None, false),
        ]
    };
    let jit = function(body).jit_compile(true).call(&inputs).unwrap();
    let exact = function(body)
        .jit_compile(true)
        .jit_options(JitOptions {
            exact: true,
            ..JitOptions::default()
        })
        .call(&inputs)
        .unwrap();
    let interpreted = function(body).call(&inputs).unwrap();
    for (k, (e, i)) in exact.iter().zip(&interpreted).enumerate() {
        assert!(common::same_bits(e, i), "output {k}: exact mode divides");
    }
    let at = |i: usize| (i / cols, i % cols);
    let quotient = |k: usize, i: usize, v: f32| -> f32 {
        let (r, c) = at(i);
        match k {
            0 => v * (1.0 / by_row[r]),
            1 => v * (1.0 / by_col[c]),
            2 => v * (1.0f32 / 3.0),
            4 => v / (v * 0.5 + 7.0),
            _ => v * (1.0 / by_row.iter().copied().fold(f32::MIN, f32::max)),
        }
    };
    for k in [0, 1, 2, 4, 5] {
        let got = common::to_vec::<f32>(&jit[k]);
        for (i, (g, v)) in got.iter().zip(&x).enumerate() {
            assert_eq!(
                g.to_bits(),
                quotient(k, i, *v).to_bits(),
                "output {k} element {i}"
            );
        }
    }
    let got = common::to_vec::<f64>(&jit[3]);
    for (i, (g, v)) in got.iter().zip(&x).enumerate() {
        let want = f64::from(*v) * (1.0 / f64::from(by_row[at(i).0]));
        assert_eq!(g.to_bits(), want.to_bits(), "f64 element {i}");
    }
    // Somewhere the two roundings differ from the division's one.
    let divided = common::to_vec::<f32>(&interpreted[0]);
    assert_ne!(divided, common::to_vec::<f32>(&jit[0]));
}

#[test]
fn two_reductions_feeding_one_kernel_keep_their_own_values() {
    // A reduction may store its per-element values (softmax's exp) in the
    // output of the loop kernel that needs them again; a second reduction
    // stashing in the same kernel's output overwrote the first's, and the
    // kernel read one value for both (`softmax(x) * softmax(2x)`).
    type Body = fn(Sym) -> Sym;
    let bodies: [(&str, Body); 3] = [
        ("softmax(x) * softmax(2x)", |x| {
            softmax(x.clone()) * softmax(&x * 2.0)
        }),
        ("softmax(sin x) + softmax(cos x)", |x| {
            softmax(x.sin()) + softmax(x.cos())
        }),
        ("sin x · Σ sin x + cos x · Σ cos x", |x| {
            let (s, c) = (x.sin(), x.cos());
            let sum = |v: &Sym| v.reduce_sum(Some(&[1]), true);
            &s * &sum(&s) + &c * &sum(&c)
        }),
    ];
    let x = uniform(DType::F32, &[37, 300], 5);
    for (what, body) in bodies {
        let want = function(body).call(std::slice::from_ref(&x)).unwrap();
        let got = function(body)
            .jit_compile(true)
            .call(std::slice::from_ref(&x))
            .unwrap();
        let (w, g) = (
            common::to_vec::<f32>(&want[0]),
            common::to_vec::<f32>(&got[0]),
        );
        let worst = w
            .iter()
            .zip(&g)
            .map(|(a, b)| (a - b).abs() / (1e-6 + a.abs()))
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-4,
            "{what}: compiled differs from interpreted by {worst} (relative)"
        );
    }
}

/// Whether `axes` (None: all) are the trailing axes of `dims`.
fn axes_trailing(dims: &[usize], axes: Option<Vec<i64>>) -> bool {
    axes.is_none_or(|a| {
        let r = dims.len() as i64;
        a.iter()
            .rev()
            .enumerate()
            .all(|(i, &x)| x == r - 1 - i as i64)
    })
}

#[test]
fn long_f32_sums_are_accurate_when_compiled() {
    // A row's lanes add their elements in sequence: one row of 10^7 values
    // of 0.1 summed to 1,005,958.6 (6e-3 off). Split into rows near √n
    // (`passes::split_long_sums`), the sum is within 2e-5 of the exact one
    // (3e-7 with AVX-512's 64 chains; 3e-6 with SSE's 16, each adding 256
    // values of a row of 4096 in sequence; as one row these were 1e-4 to
    // 6e-3 off);
    // so are sums over the trailing axes, kept dims or not, and of lengths
    // no block divides.
    /// (dims, axes, keepdims)
    type Case<'a> = (&'a [usize], Option<&'a [i64]>, bool);
    let cases: [Case<'_>; 9] = [
        // Column and middle-axis sums over many rows, and a batch norm's
        // N·H·W (each column was added in row order).
        (&[1 << 17, 3], Some(&[0]), false),
        (&[2, 100_003, 5], Some(&[1]), true),
        (&[8, 64, 256, 4], Some(&[0, 1, 2]), false),
        (&[10_000_000], None, false),
        // Prime lengths: whole rows of 4096, plus the rest.
        (&[10_000_019], None, false),
        (&[3, 65_537], Some(&[1]), true),
        (&[4, 1 << 18], Some(&[1]), false),
        (&[3, 250, 1000], Some(&[1, 2]), true),
        (&[1 << 20], Some(&[0]), true),
    ];
    for (dims, axes, keep) in cases {
        let n: usize = dims.iter().product();
        let x = Tensor::from(ndarray::ArrayD::from_elem(ndarray::IxDyn(dims), 0.1f32));
        let axes_of: Option<Vec<i64>> = axes.map(<[i64]>::to_vec);
        let axes = axes_of.clone();
        let body = move |x: Sym| x.reduce_sum(axes.as_deref(), keep);
        let got = function(body.clone())
            .jit_compile(true)
            .call(std::slice::from_ref(&x))
            .unwrap();
        let want = function(body).call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(got[0].shape(), want[0].shape(), "{dims:?}");
        let (g, w) = (
            common::to_vec::<f32>(&got[0]),
            common::to_vec::<f32>(&want[0]),
        );
        // (A column sum adds each column's rows in sequence in both stages,
        // √n values each: 1e-4 where one stage of n rows was 1e-2 off.)
        let tol = match axes_trailing(dims, axes_of) {
            true => 2e-5,
            false => 1e-4,
        };
        for (a, b) in g.iter().zip(&w) {
            assert!(
                (a - b).abs() <= tol * b.abs(),
                "{dims:?} ({n} elements): compiled {a}, interpreted (f64 sum) {b}"
            );
        }
    }
}

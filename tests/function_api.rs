//! The user API: tracing closures into graphs, the trace cache, input
//! signatures, compiler_ir, and errors that name the op, the types and the
//! user's own line.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use ndarray::{ArrayD, arr1, arr2};
use tensorlift::{Code, DType, IrStage, Sym, Tensor, TensorMut, TensorSpec, function};

fn v32(v: &[f32]) -> Tensor {
    Tensor::from(arr1(v).into_dyn())
}

#[test]
fn traced_math_reads_like_math() {
    let f = function(|x: Sym| ((&x * 1.5 + 0.25) * &x - 0.75) * 0.5 + &x);
    let x = [0.0f32, 1.0, -2.0, 0.5];
    let y = f.call(&[v32(&x)]).unwrap();
    let want: Vec<f32> = x
        .iter()
        .map(|x| ((x * 1.5 + 0.25) * x - 0.75) * 0.5 + x)
        .collect();
    assert_eq!(common::to_vec::<f32>(&y[0]), want);
}

#[test]
fn softmax_mlp_and_multiple_outputs() {
    let softmax = function(|x: Sym| {
        let e = (&x - x.reduce_max(Some(&[-1]), true)).exp();
        &e / e.reduce_sum(Some(&[-1]), true)
    });
    let x = Tensor::from(arr2(&[[1.0f32, 2.0, 3.0], [0.0, 0.0, 0.0]]).into_dyn());
    let y = common::to_vec::<f32>(&softmax.call(&[x]).unwrap()[0]);
    let e: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| (v - 3.0).exp()).collect();
    let s: f32 = e.iter().sum();
    for (a, b) in y.iter().zip(e.iter().map(|v| v / s).chain([1.0 / 3.0; 3])) {
        assert!((a - b).abs() < 1e-6, "{y:?}");
    }
    let mlp = function(|x: Sym, w: Sym, b: Sym| {
        let h = (x.matmul(&w) + &b).maximum(0.0);
        (h.clone(), h.argmax(1))
    });
    let x = Tensor::from(arr2(&[[1.0f32, -1.0], [2.0, 0.5]]).into_dyn());
    let w = Tensor::from(arr2(&[[1.0f32, 0.0, -1.0], [0.0, 1.0, 2.0]]).into_dyn());
    let b = v32(&[0.0, 0.5, 0.0]);
    let out = mlp.call(&[x, w, b]).unwrap();
    assert_eq!(
        common::to_vec::<f32>(&out[0]),
        vec![1.0, 0.0, 0.0, 2.0, 1.0, 0.0]
    );
    assert_eq!(common::to_vec::<i64>(&out[1]), vec![0, 0]);
}

#[test]
fn traces_once_per_signature() {
    let f = function(|x: Sym| x.exp());
    f.call(&[v32(&[1.0])]).unwrap();
    f.call(&[v32(&[2.0])]).unwrap();
    assert_eq!(f.trace_count(), 1);
    f.call(&[v32(&[1.0, 2.0])]).unwrap();
    assert_eq!(f.trace_count(), 2);
    f.call(&[Tensor::from(arr1(&[1.0f64]).into_dyn())]).unwrap();
    assert_eq!(f.trace_count(), 3);
    f.call(&[v32(&[3.0])]).unwrap();
    assert_eq!(f.trace_count(), 3);
}

#[test]
fn concurrent_first_calls_trace_once() {
    // Eight threads make their first calls at once, half through the
    // function, half through its gradient (which traces the function):
    // the body runs once per signature, as tf.function's lock makes it.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    for jit in [false, true] {
        let bodies = Arc::new(AtomicUsize::new(0));
        let counted = bodies.clone();
        let f = Arc::new(
            function(move |x: Sym| {
                counted.fetch_add(1, Ordering::SeqCst);
                // (A body that takes a moment to trace widens the window.)
                std::thread::sleep(std::time::Duration::from_millis(5));
                (&x * 2.0).sin().reduce_sum(None, false)
            })
            .jit_compile(jit),
        );
        let g = Arc::new(f.grad(&[0]));
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (f, g, start) = (f.clone(), g.clone(), start.clone());
                std::thread::spawn(move || {
                    let x = v32(&[0.5, 1.0, 1.5]);
                    start.wait();
                    match i % 2 {
                        0 => f.call(&[x]).map(drop),
                        _ => g.call(&[x]).map(drop),
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(
            (
                f.trace_count(),
                g.trace_count(),
                bodies.load(Ordering::SeqCst)
            ),
            (1, 1, 1),
            "jit {jit}: traces of f and of its gradient, runs of the body"
        );
    }
}

#[test]
fn a_body_calling_its_own_function_while_traced_is_an_error() {
    // Not a deadlock on the signature's trace (or, compiled, on its
    // compile slot), nor a stack overflow.
    use std::sync::{Arc, OnceLock};
    for jit in [false, true] {
        let me: Arc<OnceLock<tensorlift::Function>> = Arc::new(OnceLock::new());
        let inner = me.clone();
        let f = function(move |x: Sym| {
            if let Some(f) = inner.get() {
                let err = f.call(&[v32(&[1.0])]).unwrap_err().to_string();
                assert!(err.contains("by its own body"), "jit {jit}: {err}");
            }
            &x + 1.0
        })
        .jit_compile(jit);
        let _ = me.set(f.clone());
        let y = f.call(&[v32(&[1.0])]).unwrap();
        assert_eq!(
            y[0].to_ndarray::<f32>().unwrap().as_slice().unwrap(),
            &[2.0]
        );
    }
}

#[test]
fn a_batch_of_unknown_size_broadcasts_against_known_dims() {
    // x: f32[?, 3] plus a bias f32[3] (a dense layer's `x·W + b`), minus
    // its column sums kept as [1, 3]: broadcast_in_dim cannot add a dim of
    // unknown size, so these broadcasts wait for the call's shapes (the
    // result keeps its rank and known dims for the ops after it). Any
    // batch size, interpreted and compiled, one trace.
    let bias = Tensor::from(arr1(&[1.0f32, 2.0, 3.0]).into_dyn());
    for jit in [false, true] {
        let b = bias.clone();
        let f = function(move |x: Sym| {
            let y = &x + &x.graph().constant(&b);
            assert_eq!(
                y.shape()
                    .and_then(|s| s.dims().map(<[Option<usize>]>::to_vec)),
                Some(vec![None, Some(3)])
            );
            // (The count of rows is not known at trace time: a sum here.)
            &y - y.reduce_sum(Some(&[0]), true)
        })
        .input_signature(vec![TensorSpec::new(DType::F32, &[None, Some(3)])])
        .jit_compile(jit);
        for n in [1usize, 4] {
            let rows: Vec<f32> = (0..n * 3).map(|i| i as f32).collect();
            let x = Tensor::from(ArrayD::from_shape_vec(vec![n, 3], rows.clone()).unwrap());
            let got = common::to_vec::<f32>(&f.call(&[x]).unwrap()[0]);
            // Column sums of x + b, subtracted.
            let want: Vec<f32> = (0..n * 3)
                .map(|i| {
                    let b = (i % 3 + 1) as f32;
                    let column: f32 = (0..n).map(|r| rows[r * 3 + i % 3] + b).sum();
                    rows[i] + b - column
                })
                .collect();
            assert_eq!(got, want, "jit {jit}, batch {n}");
        }
        assert_eq!(f.trace_count(), 1);
    }
}

#[test]
fn specializing_keeps_names_unique() {
    // x / sum(x) over [?, ?, 4] is a dynamic division (`unranked_div`);
    // specialized, it expands into a node named `div`, which the later
    // division by 4 (traced as `div`) then collided with: "a node named
    // 'div' already exists", under jit only.
    for jit in [false, true] {
        let f = function(|x: Sym| {
            let y = &x / &x.reduce_sum(Some(&[-1]), true);
            y.reduce_sum(Some(&[-1]), false) / 4.0
        })
        .input_signature(vec![TensorSpec::new(DType::F32, &[None, None, Some(4)])])
        .jit_compile(jit);
        let x = Tensor::from(ArrayD::from_elem(vec![2, 3, 4], 1.0f32));
        let y = f.call(&[x]).unwrap();
        assert_eq!(common::to_vec::<f32>(&y[0]), vec![0.25; 6], "jit {jit}");
    }
}

#[test]
fn a_relaxed_input_signature_traces_once() {
    let f = function(|x: Sym| (&x * 2.0).reduce_sum(Some(&[0]), false))
        .input_signature(vec![TensorSpec::new(DType::F32, &[None])]);
    for n in 1..5 {
        let y = f.call(&[v32(&vec![1.0; n])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&y[0]), vec![2.0 * n as f32]);
    }
    assert_eq!(f.trace_count(), 1);
    let ir = f
        .compiler_ir(&[TensorSpec::new(DType::F32, &[None])], IrStage::Traced)
        .unwrap();
    assert!(ir.contains("parameter 0 : f32[?]"), "{ir}");
    // Calls that do not fit the signature are errors naming the input.
    let e = f
        .call(&[Tensor::from(arr1(&[1i32]).into_dyn())])
        .unwrap_err();
    assert!(
        e.to_string().contains("input 0") && e.to_string().contains("input_signature"),
        "{e}"
    );
    let e = f
        .call(&[Tensor::from(arr2(&[[1.0f32]]).into_dyn())])
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[test]
fn compiler_ir_shows_traced_and_optimized_graphs() {
    let f = function(|x: Sym| {
        let c = x.graph().scalar(DType::F32, 2.0);
        let unused = x.sin();
        let _ = unused;
        (&x * (&c * 3.0)) * 1.0 + x.exp() + x.exp()
    });
    let spec = [TensorSpec::known(DType::F32, &[4])];
    let traced = f.compiler_ir(&spec, IrStage::Traced).unwrap();
    let optimized = f.compiler_ir(&spec, IrStage::Optimized).unwrap();
    assert!(
        traced.contains("sin(") && traced.matches("exp(").count() == 2,
        "{traced}"
    );
    // DCE removed sin, CSE merged the exps, folding computed 2*3; the
    // float x*1 stays (it quiets a signalling NaN: docs/ir.md, passes).
    assert!(!optimized.contains("sin("), "{optimized}");
    assert_eq!(optimized.matches("exp(").count(), 1, "{optimized}");
    assert!(optimized.contains("constant 6.0 : f32[]"), "{optimized}");
    // Both are valid text IR.
    tensorlift::ir::text::parse(&optimized, "o").unwrap();
}

#[test]
fn dtype_mismatch_names_op_types_and_user_line() {
    let f = function(|x: Sym, i: Sym| x + i);
    let line = line!() - 1;
    let e = f
        .call(&[v32(&[1.0]), Tensor::from(arr1(&[1i32]).into_dyn())])
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let d = e.detail().unwrap();
    let node = d.node.as_ref().unwrap();
    assert_eq!(node.op, "add");
    assert!(node.site.file.ends_with("function_api.rs"), "{}", node.site);
    assert_eq!(node.site.line, line);
    assert!(d.message.contains("f32[1] vs i32[1]"), "{e}");
    // Rust scalars take the other operand's dtype; a fraction is no integer.
    let g = function(|i: Sym| i * 1.5);
    let e = g
        .call(&[Tensor::from(arr1(&[1i32]).into_dyn())])
        .unwrap_err();
    assert!(
        e.to_string().contains("1.5 is not a valid int32 value"),
        "{e}"
    );
    let h = function(|i: Sym| i * 3 + 1);
    assert_eq!(
        common::to_vec::<i32>(&h.call(&[Tensor::from(arr1(&[2i32]).into_dyn())]).unwrap()[0]),
        vec![7]
    );
}

#[test]
fn bad_bodies_are_errors_not_panics() {
    let f = function(|x: Sym| x.reshape(&[5]));
    let e = f.call(&[v32(&[1.0, 2.0])]).unwrap_err();
    assert!(e.to_string().contains("cannot reshape"), "{e}");
    let f = function(|x: Sym| x.transpose(&[0, 0]));
    assert!(
        f.call(&[Tensor::from(arr2(&[[1.0f32]]).into_dyn())])
            .unwrap_err()
            .to_string()
            .contains("not a permutation")
    );
    let f = function(|x: Sym| x.reduce_sum(Some(&[3]), false));
    assert!(
        f.call(&[v32(&[1.0])])
            .unwrap_err()
            .to_string()
            .contains("out of range")
    );
    let f = function(|x: Sym| x.logical_not());
    assert!(
        f.call(&[v32(&[1.0])])
            .unwrap_err()
            .to_string()
            .contains("not is not defined on float32")
    );
    let f = function(|x: Sym, y: Sym| x + y);
    let e = f
        .call(&[v32(&[1.0, 2.0]), v32(&[1.0, 2.0, 3.0])])
        .unwrap_err();
    assert!(e.to_string().contains("cannot be broadcast"), "{e}");
    // Wrong number of arguments.
    let e = f.call(&[v32(&[1.0])]).unwrap_err();
    assert!(
        e.to_string()
            .contains("takes 2 argument(s), but 1 were given"),
        "{e}"
    );
    // A panic inside the body is caught and reported.
    let f = function(|_x: Sym| -> Sym { panic!("boom") });
    let e = f.call(&[v32(&[1.0])]).unwrap_err();
    assert!(
        e.to_string().contains("panicked while tracing: boom"),
        "{e}"
    );
    // Strings are opaque.
    let f = function(|s: Sym| s.exp());
    let strings = Tensor::from(ArrayD::from_shape_vec(vec![1], vec!["a".to_string()]).unwrap());
    assert!(
        f.call(std::slice::from_ref(&strings))
            .unwrap_err()
            .to_string()
            .contains("strings are opaque")
    );
    // ...but pass through.
    let f = function(|s: Sym| s);
    assert_eq!(
        f.call(std::slice::from_ref(&strings)).unwrap()[0].strings(),
        strings.strings()
    );
}

#[test]
fn every_method_traces() {
    let f = function(|x: Sym| {
        let i = x.cast(DType::I32);
        let b = x.greater(0.0);
        vec![
            x.neg(),
            x.abs(),
            x.sign(),
            x.floor(),
            x.ceil(),
            x.round(),
            x.abs().sqrt(),
            (x.abs() + 1.0).rsqrt(),
            x.exp(),
            x.expm1(),
            x.abs().log(),
            x.abs().log1p(),
            x.tanh(),
            x.sigmoid(),
            x.sin(),
            x.cos(),
            x.erf(),
            x.is_finite(),
            x.square(),
            x.reciprocal(),
            x.pow(2.0),
            x.minimum(0.0),
            x.rem(2.0),
            b.logical_and(&b),
            b.logical_or(&b),
            b.logical_xor(&b),
            !b.clone(),
            i.logical_not(),
            x.equal(0.0),
            x.not_equal(0.0),
            x.less(0.0),
            x.less_equal(0.0),
            x.greater_equal(0.0),
            b.select(&x, 0.0),
            x.clamp(-1.0, 1.0),
            x.broadcast_to(&[2, 4]),
            x.broadcast_in_dim(&[4, 2], &[0]),
            x.reshape(&[2, -1]),
            x.reshape(&[2, 2]).transpose(&[1, 0]),
            x.slice(&[1], &[4], &[2]),
            x.concat(std::slice::from_ref(&x), 0),
            x.pad(&[1], &[0], &[1], 9.0),
            x.reverse(&[0]),
            x.reduce_prod(None, true),
            x.reduce_min(None, false),
            b.reduce_all(None, false),
            b.reduce_any(None, false),
            x.argmin(0),
            x.reshape(&[2, 2]).matmul(&x.reshape(&[2, 2])),
            x.take(&x.graph().iota(DType::I32, &[2], 0), 0),
            (&i & 1) | 2,
            &i ^ 3,
            1.0 - &x,
            2.0 / &x,
            x.graph().constant(&Tensor::scalar(1u8)),
        ]
    });
    let out = f.call(&[v32(&[-1.5, 0.0, 2.5, 4.0])]).unwrap();
    assert_eq!(out.len(), 55);
    assert_eq!(common::to_vec::<f32>(&out[42]), vec![4.0, 2.5, 0.0, -1.5]);
    assert_eq!(
        common::to_vec::<f32>(&out[41]),
        vec![9.0, -1.5, 9.0, 0.0, 9.0, 2.5, 9.0, 4.0]
    );
}

#[test]
fn functions_are_shareable_across_threads() {
    let f = std::sync::Arc::new(function(|x: Sym| x.exp().reduce_sum(None, false)));
    let handles: Vec<_> = (0..8)
        .map(|k| {
            let f = f.clone();
            std::thread::spawn(move || f.call(&[v32(&vec![0.0; k + 1])]).unwrap())
        })
        .collect();
    for (k, h) in handles.into_iter().enumerate() {
        assert_eq!(
            common::to_vec::<f32>(&h.join().unwrap()[0]),
            vec![(k + 1) as f32]
        );
    }
}

/// Room for `n` bytes starting `skew` bytes past a 16-byte boundary, every
/// byte 0x5a.
fn buffer(n: usize, skew: usize) -> (Vec<u8>, usize) {
    (vec![0x5a; n + skew + 16], skew)
}

/// `n` bytes of `buf` at its skew past a 16-byte boundary.
fn bytes_of(buf: &mut (Vec<u8>, usize), n: usize) -> &mut [u8] {
    let start = buf.0.as_ptr().align_offset(16) + buf.1;
    &mut buf.0[start..start + n]
}

#[test]
fn call_into_writes_what_call_returns_and_reuses_the_buffers() {
    // Outputs the code computes (written in place when the buffer is
    // aligned, copied when it is not), an input returned as is, a value
    // returned twice and a reduction: every buffer holds what `call`
    // returns, interpreted and compiled, call after call.
    let body = |x: Sym, y: Sym| {
        let z = (&x * 2.0 + &y).tanh();
        vec![z.clone(), x.reduce_sum(Some(&[1]), false), y, z]
    };
    let (dims, sums) = ([64_usize, 48], [64_usize]);
    for jit in [false, true] {
        let f = function(body).jit_compile(jit);
        for skew in [0, 4] {
            let mut bufs: Vec<(Vec<u8>, usize)> = [64 * 48, 64, 64 * 48, 64 * 48]
                .iter()
                .map(|n| buffer(n * 4, skew))
                .collect();
            for round in 0..3 {
                let x = common::f32s(
                    &(0..64 * 48)
                        .map(|i| ((i * 7 + round) % 23) as f32 * 0.1 - 1.0)
                        .collect::<Vec<_>>(),
                    &dims,
                );
                let y = common::f32s(
                    &(0..64 * 48)
                        .map(|i| ((i * 3 + round) % 19) as f32 * 0.05)
                        .collect::<Vec<_>>(),
                    &dims,
                );
                let args = [x, y];
                let want = f.call(&args).unwrap();
                let shapes: [&[usize]; 4] = [&dims, &sums, &dims, &dims];
                let mut outs: Vec<TensorMut<'_>> = bufs
                    .iter_mut()
                    .zip(shapes)
                    .map(|(b, shape)| {
                        let n: usize = shape.iter().product();
                        TensorMut::new(DType::F32, shape, bytes_of(b, n * 4)).unwrap()
                    })
                    .collect();
                f.call_into(&args, &mut outs).unwrap();
                for (k, (out, w)) in outs.iter_mut().zip(&want).enumerate() {
                    let shape = out.shape().to_vec();
                    let got = Tensor::from_bytes(DType::F32, &shape, out.bytes_mut()).unwrap();
                    assert!(
                        common::same_bits(&got, w),
                        "jit {jit}, skew {skew}, round {round}: output {k} differs from call's"
                    );
                }
            }
        }
    }
}

#[test]
fn call_into_rejects_buffers_of_the_wrong_count_dtype_or_shape_untouched() {
    let f = function(|x: Sym| (&x * 2.0, x.reduce_sum(None, false))).jit_compile(true);
    let x = common::f32s(&[1.0, 2.0, 3.0], &[3]);
    let spec = [TensorSpec::known(DType::F32, &[3])];
    let compiled = f.compile(&spec).unwrap();
    // Each output's buffer (shape, dtype), and the error.
    type Case<'a> = (&'a [usize], DType, &'a [usize], DType, &'a str);
    let cases: [Case<'_>; 3] = [
        (
            &[3],
            DType::F32,
            &[2],
            DType::F32,
            "output 1 is f32[], but the buffer given for it is f32[2]",
        ),
        (
            &[3],
            DType::F64,
            &[],
            DType::F32,
            "output 0 is f32[3], but the buffer given for it is f64[3]",
        ),
        (
            &[4],
            DType::F32,
            &[],
            DType::F32,
            "output 0 is f32[3], but the buffer given for it is f32[4]",
        ),
    ];
    for (s0, d0, s1, d1, msg) in cases {
        let mut b0 = buffer(64, 0);
        let mut b1 = buffer(64, 0);
        let n0 = s0.iter().product::<usize>() * d0.size();
        let n1 = s1.iter().product::<usize>() * d1.size();
        let mut outs = [
            TensorMut::new(d0, s0, bytes_of(&mut b0, n0)).unwrap(),
            TensorMut::new(d1, s1, bytes_of(&mut b1, n1)).unwrap(),
        ];
        for e in [
            f.call_into(std::slice::from_ref(&x), &mut outs)
                .unwrap_err(),
            compiled
                .call_into(std::slice::from_ref(&x), &mut outs)
                .unwrap_err(),
        ] {
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.to_string().contains(msg), "{e}");
        }
        assert!(
            b0.0.iter().chain(&b1.0).all(|&b| b == 0x5a),
            "a rejected buffer was written"
        );
    }
    let mut b0 = buffer(12, 0);
    let mut one = [TensorMut::new(DType::F32, &[3], bytes_of(&mut b0, 12)).unwrap()];
    let e = compiled
        .call_into(std::slice::from_ref(&x), &mut one)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the function returns 2 output(s), but 1 buffer(s) were given"),
        "{e}"
    );
}

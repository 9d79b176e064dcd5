//! Defined results for the edge cases the interpreter documents
//! (docs/ir.md, "Semantics"): integer division by zero and `MIN / -1`,
//! wrapping overflow, NaN/inf/-0.0 propagation, saturating casts, empty
//! reductions and out-of-range `take` indices.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use ndarray::{ArrayD, arr0, arr1};
use tensorlift::{Code, DType, Sym, Tensor, function};

fn t<T: tensorlift::HostElement>(v: &[T]) -> Tensor {
    Tensor::from(arr1(v).into_dyn())
}

fn run1(f: &tensorlift::Function, inputs: &[Tensor]) -> Tensor {
    f.call(inputs).unwrap().remove(0)
}

#[test]
fn integer_division_by_zero_and_min_over_minus_one() {
    let div = function(|a: Sym, b: Sym| a / b);
    let rem = function(|a: Sym, b: Sym| a % b);
    let a = t(&[7i32, -7, i32::MIN, i32::MIN, 5, 0]);
    let b = t(&[0i32, 0, -1, 0, 2, 0]);
    assert_eq!(
        common::to_vec::<i32>(&run1(&div, &[a.clone(), b.clone()])),
        vec![-1, -1, i32::MIN, -1, 2, -1]
    );
    assert_eq!(
        common::to_vec::<i32>(&run1(&rem, &[a, b])),
        vec![7, -7, 0, i32::MIN, 1, 0]
    );
    // Unsigned: x / 0 is all bits set, x % 0 = x.
    let (a, b) = (t(&[9u8, 200]), t(&[0u8, 0]));
    assert_eq!(
        common::to_vec::<u8>(&run1(&div, &[a.clone(), b.clone()])),
        vec![255, 255]
    );
    assert_eq!(common::to_vec::<u8>(&run1(&rem, &[a, b])), vec![9, 200]);
    // Truncation toward zero, remainder with the dividend's sign.
    let (a, b) = (t(&[-7i64, 7, -7]), t(&[2i64, -2, -2]));
    assert_eq!(
        common::to_vec::<i64>(&run1(&div, &[a.clone(), b.clone()])),
        vec![-3, -3, 3]
    );
    assert_eq!(common::to_vec::<i64>(&run1(&rem, &[a, b])), vec![-1, 1, -1]);
}

#[test]
fn integer_overflow_wraps() {
    let f = function(|a: Sym, b: Sym| vec![&a + &b, &a * &b, -&a, a.abs(), a.pow(&b)]);
    let out = f
        .call(&[t(&[i8::MAX, i8::MIN, 100]), t(&[1i8, -1, 3])])
        .unwrap();
    assert_eq!(common::to_vec::<i8>(&out[0]), vec![i8::MIN, i8::MAX, 103]);
    assert_eq!(common::to_vec::<i8>(&out[1]), vec![127, i8::MIN, 44]);
    assert_eq!(common::to_vec::<i8>(&out[2]), vec![-127, i8::MIN, -100]);
    assert_eq!(common::to_vec::<i8>(&out[3]), vec![127, i8::MIN, 100]);
    // 127^1 = 127; (-128)^-1 = 0 (only ±1 have integer reciprocals); 100^3 wraps.
    assert_eq!(
        common::to_vec::<i8>(&out[4]),
        vec![127, 0, (1_000_000i64 as i8)]
    );
}

#[test]
fn nan_inf_and_signed_zero_propagate() {
    let f =
        function(|a: Sym, b: Sym| vec![a.maximum(&b), a.minimum(&b), a.sign(), &a + &b, a.round()]);
    let a = t(&[f32::NAN, 1.0, -0.0, 0.0, f32::INFINITY, 2.5]);
    let b = t(&[1.0f32, f32::NAN, 0.0, -0.0, f32::NEG_INFINITY, -2.5]);
    let out = f.call(&[a, b]).unwrap();
    let bits = |t: &Tensor| {
        common::to_vec::<f32>(t)
            .iter()
            .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
            .collect::<Vec<_>>()
    };
    let nan = u32::MAX;
    assert_eq!(
        bits(&out[0]),
        vec![
            nan,
            nan,
            0.0f32.to_bits(),
            0.0f32.to_bits(),
            f32::INFINITY.to_bits(),
            2.5f32.to_bits()
        ]
    );
    assert_eq!(
        bits(&out[1]),
        vec![
            nan,
            nan,
            (-0.0f32).to_bits(),
            (-0.0f32).to_bits(),
            f32::NEG_INFINITY.to_bits(),
            (-2.5f32).to_bits()
        ]
    );
    assert_eq!(
        bits(&out[2]),
        vec![
            nan,
            1.0f32.to_bits(),
            (-0.0f32).to_bits(),
            0.0f32.to_bits(),
            1.0f32.to_bits(),
            1.0f32.to_bits()
        ]
    );
    // inf + -inf = NaN
    assert!(common::to_vec::<f32>(&out[3])[4].is_nan());
    // Round half to even: 2.5 -> 2.
    assert_eq!(common::to_vec::<f32>(&out[4])[5], 2.0);
}

#[test]
fn float_to_int_saturates_and_nan_becomes_zero() {
    let f = function(|x: Sym| vec![x.cast(DType::I32), x.cast(DType::U8), x.cast(DType::Bool)]);
    let out = f
        .call(&[t(&[f64::NAN, 1e20, -1e20, -3.7, 3.7, -0.0])])
        .unwrap();
    assert_eq!(
        common::to_vec::<i32>(&out[0]),
        vec![0, i32::MAX, i32::MIN, -3, 3, 0]
    );
    assert_eq!(common::to_vec::<u8>(&out[1]), vec![0, 255, 0, 0, 3, 0]);
    assert_eq!(
        common::to_vec::<bool>(&out[2]),
        vec![true, true, true, true, true, false]
    );
}

#[test]
fn empty_reductions_give_the_identity() {
    let f = function(|x: Sym| {
        vec![
            x.reduce_sum(Some(&[0]), false),
            x.reduce_prod(Some(&[0]), false),
            x.reduce_max(Some(&[0]), false),
            x.reduce_min(Some(&[0]), false),
        ]
    });
    let x = Tensor::from(ArrayD::<f32>::zeros(vec![0, 2]));
    let out = f.call(&[x]).unwrap();
    assert_eq!(common::to_vec::<f32>(&out[0]), vec![0.0, 0.0]);
    assert_eq!(common::to_vec::<f32>(&out[1]), vec![1.0, 1.0]);
    assert_eq!(common::to_vec::<f32>(&out[2]), vec![f32::NEG_INFINITY; 2]);
    assert_eq!(common::to_vec::<f32>(&out[3]), vec![f32::INFINITY; 2]);
    let g = function(|x: Sym| x.reduce_max(None, false));
    assert_eq!(
        common::to_vec::<i16>(&run1(&g, &[Tensor::from(ArrayD::<i16>::zeros(vec![0]))])),
        vec![i16::MIN]
    );
}

#[test]
fn argmax_prefers_the_first_and_nan() {
    let f = function(|x: Sym| vec![x.argmax(0), x.argmin(0)]);
    let out = f
        .call(&[t(&[1.0f32, 3.0, 3.0, f32::NAN, 0.0, f32::NAN])])
        .unwrap();
    assert_eq!(common::to_vec::<i64>(&out[0]), vec![3]);
    assert_eq!(common::to_vec::<i64>(&out[1]), vec![3]);
    let out = f.call(&[t(&[2i32, 0, 5, 0, 5])]).unwrap();
    assert_eq!(common::to_vec::<i64>(&out[0]), vec![2]);
    assert_eq!(common::to_vec::<i64>(&out[1]), vec![1]);
}

#[test]
fn out_of_range_take_is_a_clear_error() {
    let f = function(|x: Sym, i: Sym| x.take(&i, 0));
    let x = t(&[1.0f32, 2.0, 3.0]);
    for bad in [3i32, -1] {
        let e = f.call(&[x.clone(), t(&[0i32, bad])]).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("indices[1] = {bad} is not in [0, 3)")),
            "{msg}"
        );
        assert!(
            msg.contains("take") && msg.contains("edge_cases.rs"),
            "error names the op and its creation site: {msg}"
        );
    }
    // The function keeps working after the error.
    assert_eq!(
        common::to_vec::<f32>(&run1(&f, &[x, t(&[2i32, 0])])),
        vec![3.0, 1.0]
    );
}

#[test]
fn take_of_no_indices_is_empty() {
    // No indices: an empty result, interpreted and compiled, whether the
    // take is copied out or read by a kernel.
    let ids = Tensor::from(ndarray::ArrayD::<i32>::zeros(vec![0]));
    let x = t(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .reshaped(&[3, 2])
        .unwrap();
    for jit in [false, true] {
        let f = function(|x: Sym, i: Sym| x.take(&i, 0)).jit_compile(jit);
        let out = f.call(&[x.clone(), ids.clone()]).unwrap();
        assert_eq!(out[0].shape(), &[0, 2]);
        let f =
            function(|x: Sym, i: Sym| x.take(&i, 0).reduce_sum(Some(&[0]), false)).jit_compile(jit);
        let out = f.call(&[x.clone(), ids.clone()]).unwrap();
        assert_eq!(common::to_vec::<f32>(&out[0]), vec![0.0, 0.0]);
    }
}

#[test]
fn scalars_and_zero_sized_tensors() {
    let f = function(|x: Sym| (&x * 2.0 + 1.0).exp().reduce_sum(None, false));
    let out = run1(&f, &[Tensor::from(arr0(0.0f64).into_dyn())]);
    assert_eq!(common::to_vec::<f64>(&out), vec![1.0f64.exp()]);
    let out = run1(&f, &[Tensor::from(ArrayD::<f64>::zeros(vec![3, 0]))]);
    assert_eq!(common::to_vec::<f64>(&out), vec![0.0]);
}

#[test]
fn complex_abs_is_real_and_complex_compare_is_equality_only() {
    use num_complex::Complex32;
    let f = function(|x: Sym| x.abs());
    let out = run1(&f, &[t(&[Complex32::new(3.0, 4.0)])]);
    assert_eq!(out.dtype(), DType::F32);
    assert_eq!(common::to_vec::<f32>(&out), vec![5.0]);
    let g = function(|x: Sym, y: Sym| x.less(&y));
    let e = g
        .call(&[
            t(&[Complex32::new(1.0, 0.0)]),
            t(&[Complex32::new(2.0, 0.0)]),
        ])
        .unwrap_err();
    assert!(
        e.to_string().contains("complex numbers are unordered"),
        "{e}"
    );
}

/// Fuzzer reproducers (issue 18): signalling NaNs through `pow(x, 0)`,
/// directly (bf16, whose JIT widening keeps a NaN signalling) and after a
/// `min` (f64, which the JIT quiets and the interpreter did not). Exact
/// mode is bit-identical, any NaN matching any NaN: pow(x, ±0) is 1 for
/// every x, a signalling NaN included, on both sides.
#[test]
fn signalling_nans_through_pow_agree_in_exact_mode() {
    use tensorlift::compiler::{self, JitOptions};
    use tensorlift::ir::text;
    let cases: [(&str, tensorlift::DType, Vec<u8>); 2] = [
        (
            "graph @g {\n  %x = parameter 0 : bf16[4]\n  %z = constant [0, 0, 0, 0] : bf16[4]\n  %y = pow(%x, %z) : bf16[4]\n  return %y as \"y\"\n}\n",
            tensorlift::DType::BF16,
            [0x7f81u16, 0xff81, 0x7fc1, 0x3f80]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            "graph @g {\n  %x = parameter 0 : f64[4]\n  %z = constant [0, 0, 0, 0] : f64[4]\n  %m = min(%x, %z) : f64[4]\n  %y = pow(%m, %z) : f64[4]\n  return %y as \"y\"\n}\n",
            tensorlift::DType::F64,
            [
                0x7ff0_0000_0000_0001u64,
                0xfff0_0000_0000_0001,
                0x7ff8_0000_0000_0001,
                0x3ff0_0000_0000_0000,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
    ];
    for (src, dtype, bytes) in cases {
        let g = text::parse(src, "snan.tlir").unwrap();
        let x = Tensor::from_bytes(dtype, &[4], &bytes).unwrap();
        let interp = tensorlift::runtime::interp::run(&g, std::slice::from_ref(&x)).unwrap();
        let exact = JitOptions {
            exact: true,
            ..Default::default()
        };
        let jit = compiler::compile(&g, &exact).unwrap().run(&[x]).unwrap();
        assert!(
            common::same_bits(&interp[0], &jit[0]),
            "{dtype}: interpreter {:02x?}, jit {:02x?}",
            interp[0].bytes(),
            jit[0].bytes()
        );
        // pow(anything, 0) is 1.
        let lit = interp[0].to_literal();
        for i in 0..lit.len() {
            let tensorlift::ir::Scalar::Float(v, _) = lit.element(i) else {
                panic!("not a float");
            };
            assert_eq!(v, 1.0, "{dtype} element {i}");
        }
    }
}

#[test]
fn shapes_whose_size_overflows_are_errors_not_empty_tensors() {
    // 2^62 × 4 elements: the product wraps to 0 unchecked (release
    // builds), which 0 bytes would match.
    let huge = [1usize << 62, 4];
    let invalid = |r: tensorlift::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e}");
        // The message names the shape.
        assert!(
            e.to_string().contains("4611686018427387904, 4]"),
            "{what}: {e}"
        );
    };
    invalid(
        Tensor::from_bytes(DType::F32, &huge, &[]).map(drop),
        "from_bytes",
    );
    let e = Tensor::from_bytes(DType::F32, &[usize::MAX, 2], &[]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    invalid(Tensor::zeros(DType::F32, &huge).map(drop), "zeros");
    invalid(
        Tensor::zeros(DType::String, &huge).map(drop),
        "string zeros",
    );
    invalid(
        Tensor::from_strings(&huge, Vec::new()).map(drop),
        "from_strings",
    );
    invalid(
        tensorlift::TensorRef::new(DType::F32, &huge, &[]).map(drop),
        "a view",
    );
    let empty = Tensor::from_bytes(DType::F32, &[0], &[]).unwrap();
    let e = empty.reshaped(&huge).expect_err("reshape");
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    // Traced, the reshape's type rule says so (its product wrapped to 0,
    // or panicked with overflow checks).
    let f = function(|x: Sym| x.reshape(&[1 << 62, 4]));
    let e = f.call(&[common::f32s(&[1.0], &[1])]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("overflows"), "{e}");
    // A zeros tensor that fits is one.
    let z = Tensor::zeros(DType::F64, &[2, 3]).unwrap();
    assert_eq!(common::to_vec::<f64>(&z), vec![0.0; 6]);
    assert!(
        Tensor::zeros(DType::String, &[2])
            .unwrap()
            .strings()
            .iter()
            .all(Vec::is_empty)
    );
}

#[test]
fn buffers_and_views_of_the_wrong_size_or_type_are_invalid_arguments() {
    let mut bytes = vec![0u8; 11];
    let e = tensorlift::TensorMut::new(DType::F32, &[3], &mut bytes)
        .map(drop)
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let x = t(&[1.0f32, 2.0]);
    let e = x.view::<f64>().map(drop).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
}

#[test]
fn switch_indices_of_every_integer_type_clamp_to_the_last_branch() {
    // Wide indices must not wrap into range on their way to int32: 2^32
    // is past the last branch, not branch 0.
    let make = || {
        function(|k: Sym, x: Sym| {
            tensorlift::switch(
                &k,
                &[
                    &|a: &[Sym]| vec![&a[0] + 10.0],
                    &|a: &[Sym]| vec![&a[0] + 20.0],
                    &|a: &[Sym]| vec![&a[0] + 30.0],
                ],
                &[x],
            )
        })
    };
    let x = Tensor::scalar(0.0f32);
    let cases: Vec<(Tensor, f32)> = vec![
        (Tensor::scalar(1i64), 20.0),
        (Tensor::scalar(1i64 << 32), 30.0),
        (Tensor::scalar((1i64 << 32) + 1), 30.0),
        (Tensor::scalar(-(1i64 << 32)), 30.0),
        (Tensor::scalar(i64::MIN), 30.0),
        (Tensor::scalar(0u64), 10.0),
        (Tensor::scalar((1u64 << 32) + 1), 30.0),
        (Tensor::scalar(u64::MAX), 30.0),
        (Tensor::scalar(u32::MAX), 30.0),
        (Tensor::scalar(1u32), 20.0),
        (Tensor::scalar(-1i8), 30.0),
        (Tensor::scalar(2u8), 30.0),
        (Tensor::scalar(300i16), 30.0),
    ];
    for f in [make(), make().jit_compile(true)] {
        for (k, want) in &cases {
            let out = f.call(&[k.clone(), x.clone()]).unwrap();
            assert_eq!(
                common::to_vec::<f32>(&out[0]),
                vec![*want],
                "index {:?} of {}",
                k,
                k.dtype()
            );
        }
    }
}

#[test]
fn rust_integer_scalars_keep_every_bit() {
    // An f64 holds integers exactly only up to 2^53.
    let big = 9_007_199_254_740_993_i64;
    let z64 = t(&[0i64, 1]);
    let zu64 = t(&[0u64, 1]);
    type Case<'a> = (fn(Sym) -> Sym, &'a Tensor, Vec<i128>);
    let make: [Case<'_>; 6] = [
        (
            |a| &a + 9_007_199_254_740_993_i64,
            &z64,
            vec![big.into(), (big + 1).into()],
        ),
        (
            |a| 9_007_199_254_740_993_i64 - &a,
            &z64,
            vec![big.into(), (big - 1).into()],
        ),
        (
            |a| &a + i64::MAX - 1i64,
            &z64,
            vec![(i64::MAX - 1).into(), i64::MAX.into()],
        ),
        (
            |a| a.maximum(u64::MAX),
            &zu64,
            vec![u64::MAX.into(), u64::MAX.into()],
        ),
        (|a| &a * 4_294_967_297u64, &zu64, vec![0, 4_294_967_297]),
        (
            |a| a.minimum(i64::MIN),
            &z64,
            vec![i64::MIN.into(), i64::MIN.into()],
        ),
    ];
    for (i, (body, x, want)) in make.into_iter().enumerate() {
        for f in [function(body), function(body).jit_compile(true)] {
            let out = run1(&f, std::slice::from_ref(x));
            let got: Vec<i128> = if out.dtype() == DType::I64 {
                common::to_vec::<i64>(&out)
                    .into_iter()
                    .map(i128::from)
                    .collect()
            } else {
                common::to_vec::<u64>(&out)
                    .into_iter()
                    .map(i128::from)
                    .collect()
            };
            assert_eq!(got, want, "case {i}");
        }
    }
    // Integers still convert into float tensors, and out of an integer
    // type's range they are an error naming the value.
    let f = function(|a: Sym| &a + 3i64);
    assert_eq!(common::to_vec::<f32>(&run1(&f, &[t(&[0.5f32])])), vec![3.5]);
    let f = function(|a: Sym| &a + (1i64 << 40));
    let e = f.call(&[t(&[0i32])]).unwrap_err();
    assert!(e.to_string().contains("1099511627776"), "{e}");
}

#[test]
fn float32_sums_do_not_stall_at_two_to_the_24() {
    // 2^24 then 1000 ones: a running f32 sum rounds every +1 away.
    let mut v = vec![1.0f32; 1001];
    v[0] = 16_777_216.0;
    let x = Tensor::from(ArrayD::from_shape_vec(vec![1, 1001], v.clone()).unwrap());
    let xt = Tensor::from(ArrayD::from_shape_vec(vec![1001, 1], v).unwrap());
    let want = 16_778_216.0f32;
    let rows = || function(|x: Sym| x.reduce_sum(Some(&[1]), false));
    let cols = || function(|x: Sym| x.reduce_sum(Some(&[0]), false));
    let mean = || function(|x: Sym| x.reduce_sum(None, false) / 1001.0);
    let exact = tensorlift::JitOptions {
        exact: true,
        ..Default::default()
    };
    for (make, x) in [(rows as fn() -> tensorlift::Function, &x), (cols, &xt)] {
        let interp = run1(&make(), std::slice::from_ref(x));
        assert_eq!(common::to_vec::<f32>(&interp), vec![want]);
        // Exact mode: the interpreter's sum, bit for bit.
        let jit = run1(&make().jit_options(exact), std::slice::from_ref(x));
        assert!(common::same_bits(&interp, &jit), "{interp:?} vs {jit:?}");
        // Compiled: f32 vector accumulators, which a huge first element
        // can still stall (docs/ir.md).
        let fast =
            common::to_vec::<f32>(&run1(&make().jit_compile(true), std::slice::from_ref(x)))[0];
        assert!((16_777_216.0..=want).contains(&fast), "{fast}");
    }
    let m = common::to_vec::<f32>(&run1(&mean(), &[x]))[0];
    assert_eq!(m, want / 1001.0);
}

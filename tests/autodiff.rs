//! Automatic differentiation through the public API, interpreted and
//! compiled: every rule against finite differences (`check_grads`, which
//! checks both modes), exact gradients of polynomials, loops of 0, 1 and
//! many iterations (counted and data-dependent), branches, nesting, grad of
//! grad, and the errors for what has no gradient.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use tensorlift::ir::{BinaryOp, UnaryOp};
use tensorlift::{
    Code, DType, DotDims, Function, GradCheck, Mode, Sym, Tensor, check_grads, cond, custom_vjp,
    fori_loop, function, scan, switch, while_loop,
};

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v.to_vec()).unwrap())
}

fn i32s(v: &[i32], shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v.to_vec()).unwrap())
}

/// Deterministic values in `[lo, hi)`.
fn ramp(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let h = ((i as u64 + 1) ^ seed.wrapping_mul(0xd1b5_4a32_d192_ed03))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let u = (h >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// `f` both ways: interpreted and compiled.
fn both(f: Function) -> [Function; 2] {
    [f.clone().jit_compile(false), f.jit_compile(true)]
}

fn check(f: Function, inputs: &[Tensor], wrt: &[usize], what: &str) {
    for f in both(f) {
        check_grads(&f, inputs, wrt, &GradCheck::default())
            .unwrap_or_else(|e| panic!("{what} ({f:?}): {e}"));
    }
}

#[test]
fn polynomial_gradient_is_exact() {
    let x = f64s(&[1.0, -2.0, 0.5, 3.0], &[4]);
    for f in both(function(|x: Sym| (&x * &x * &x).reduce_sum(None, false))) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        let got: Vec<f64> = common::to_vec(&g[0]);
        assert_eq!(got, vec![3.0, 12.0, 0.75, 27.0]);
        let vg = f
            .value_and_grad(&[0])
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_eq!(
            common::to_vec::<f64>(&vg[0]),
            vec![1.0 - 8.0 + 0.125 + 27.0]
        );
        assert_eq!(common::to_vec::<f64>(&vg[1]), got);
    }
}

#[test]
fn every_unary_rule_matches_finite_differences() {
    for &u in UnaryOp::ALL {
        // Inputs inside the op's domain, away from kinks.
        let (lo, hi) = match u {
            UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Log | UnaryOp::Reciprocal => (0.5, 2.0),
            UnaryOp::Log1p => (-0.5, 2.0),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => (0.1, 0.4),
            UnaryOp::Not | UnaryOp::IsFinite => continue,
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sign
            | UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Erf
            | UnaryOp::Square => (-2.0, 2.0),
        };
        let x = f64s(&ramp(6, lo, hi, 1), &[2, 3]);
        let w = f64s(&ramp(6, -1.0, 1.0, 2), &[2, 3]);
        let f = function(move |x: Sym, w: Sym| {
            let y = x.unary(u);
            (y * &w).reduce_sum(None, false)
        });
        check(f, &[x, w], &[0, 1], u.name());
    }
}

#[test]
fn every_binary_rule_matches_finite_differences() {
    for &b in BinaryOp::ALL {
        let (lo, hi) = match b {
            BinaryOp::Pow => (0.5, 2.0),
            BinaryOp::Div | BinaryOp::Rem => (0.6, 2.0),
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min => {
                (-2.0, 2.0)
            }
            BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => continue,
        };
        let x = f64s(&ramp(6, lo, hi, 3), &[2, 3]);
        let y = f64s(&ramp(6, lo, hi, 4), &[2, 3]);
        let s = f64s(&[1.25], &[]);
        let w = f64s(&ramp(6, -1.0, 1.0, 5), &[2, 3]);
        let f = function(move |x: Sym, y: Sym, s: Sym, w: Sym| {
            // Full-shaped operands, and a rank-0 one splatted.
            let a = x.binary(b, &y);
            let c = a.binary(b, &s);
            (c * &w).reduce_sum(None, false)
        });
        check(f, &[x, y, s, w], &[0, 1, 2], b.name());
    }
}

#[test]
fn max_and_min_split_ties_as_jax_does() {
    // jax.grad(lambda x: jnp.maximum(x, 1.))(1.) == 0.5; reduce_max splits
    // equally among the tied positions.
    let x = f64s(&[1.0, 3.0, 3.0, -1.0], &[4]);
    for f in both(function(|x: Sym| x.maximum(1.0).reduce_sum(None, false))) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f64>(&g[0]), vec![0.5, 1.0, 1.0, 0.0]);
    }
    for f in both(function(|x: Sym| x.reduce_max(None, false))) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f64>(&g[0]), vec![0.0, 0.5, 0.5, 0.0]);
    }
}

#[test]
fn select_clamp_and_convert() {
    let x = f64s(&ramp(8, -2.0, 2.0, 6), &[8]);
    let f = function(|x: Sym| {
        let p = x.greater(0.0);
        let y = p.select(x.exp(), x.sin());
        let z = x.clamp(-1.0, 1.0) * &y;
        let lo = z.cast(DType::F32).cast(DType::F64);
        (lo + &z).reduce_sum(None, false)
    });
    // f32 round trip: looser tolerance.
    let opts = GradCheck {
        eps: Some(1e-3),
        rtol: Some(1e-4),
        atol: Some(1e-5),
        ..GradCheck::default()
    };
    for f in both(f) {
        check_grads(&f, std::slice::from_ref(&x), &[0], &opts).unwrap();
    }
}

#[test]
fn layout_ops() {
    let x = f64s(&ramp(24, -1.0, 1.0, 7), &[2, 3, 4]);
    let f = function(|x: Sym| {
        let a = x.transpose(&[2, 0, 1]).reshape(&[4, 6]);
        let b = a.slice(&[1, 0], &[4, 6], &[2, 3]);
        let c = b.broadcast_to(&[3, 2, 2]);
        let d = x.reverse(&[1]).concat(std::slice::from_ref(&x), 1);
        let e = d.pad(&[1, -1, 0], &[0, 2, -1], &[0, 1, 1], 0.5);
        let bi = a.broadcast_in_dim(&[4, 5, 6], &[0, 2]);
        c.reduce_sum(None, false) * 2.0
            + (e.square()).reduce_sum(None, false)
            + bi.sin().reduce_sum(None, false)
    });
    check(f, &[x], &[0], "layout");
}

#[test]
fn reductions_with_and_without_keepdims() {
    let x = f64s(&ramp(24, 0.5, 1.5, 8), &[2, 3, 4]);
    let f = function(|x: Sym| {
        let s = x.reduce_sum(Some(&[1]), true);
        let p = x.reduce_prod(Some(&[0, 2]), false);
        let m = x.reduce_max(Some(&[2]), false);
        let n = x.reduce_min(Some(&[0]), true);
        (x * s).reduce_sum(None, false)
            + p.reduce_sum(None, false)
            + m.sin().reduce_sum(None, false)
            + n.exp().reduce_sum(None, false)
    });
    check(f, &[x], &[0], "reductions");
}

#[test]
fn prod_gradient_at_zeros_is_exact() {
    // d/dx_i prod(x) = product of the others, with one zero and with two.
    for (x, want) in [
        (vec![2.0, 0.0, 3.0], vec![0.0, 6.0, 0.0]),
        (vec![0.0, 0.0, 3.0], vec![0.0, 0.0, 0.0]),
        (vec![2.0, 4.0, 3.0], vec![12.0, 6.0, 8.0]),
    ] {
        for f in both(function(|x: Sym| x.reduce_prod(None, false))) {
            let g = f.grad(&[0]).call(&[f64s(&x, &[3])]).unwrap();
            assert_eq!(common::to_vec::<f64>(&g[0]), want, "x = {x:?}");
        }
    }
}

#[test]
fn dot_general_in_every_layout() {
    let a = f64s(&ramp(2 * 3 * 4, -1.0, 1.0, 9), &[2, 3, 4]);
    let b = f64s(&ramp(4 * 2 * 5, -1.0, 1.0, 10), &[4, 2, 5]);
    let layouts = [
        // batch 0/1, contract 2/0.
        DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![1],
            lhs_contract: vec![2],
            rhs_contract: vec![0],
        },
        // No batch, contract two dims.
        DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![0, 2],
            rhs_contract: vec![1, 0],
        },
    ];
    for dims in layouts {
        let d = dims.clone();
        let f = function(move |a: Sym, b: Sym| {
            a.dot_general(&b, d.clone()).tanh().reduce_sum(None, false)
        });
        check(f, &[a.clone(), b.clone()], &[0, 1], &format!("{dims:?}"));
    }
    let m = f64s(&ramp(12, -1.0, 1.0, 11), &[3, 4]);
    let n = f64s(&ramp(8, -1.0, 1.0, 12), &[4, 2]);
    let f = function(|m: Sym, n: Sym| m.matmul(&n).square().reduce_sum(None, false));
    check(f, &[m, n], &[0, 1], "matmul");
}

#[test]
fn gathers_scatters_and_dynamic_slices() {
    let x = f64s(&ramp(12, -1.0, 1.0, 13), &[4, 3]);
    let idx = i32s(&[3, 0, 3, 1], &[2, 2]);
    let start = i32s(&[2], &[]);
    let far = i32s(&[7], &[]);
    let f = function(|x: Sym, idx: Sym, s: Sym, far: Sym| {
        let t = x.take(&idx, 0).sin().reduce_sum(None, false);
        let d = x
            .dynamic_slice(&[&s, &s], &[2, 2])
            .exp()
            .reduce_sum(None, false);
        // A start past the end is clamped, in the gradient too.
        let c = x
            .dynamic_slice(&[&far, &s], &[3, 1])
            .square()
            .reduce_sum(None, false);
        let u = x.dynamic_update_slice(&(x.slice(&[0, 0], &[2, 2], &[1, 1]) * 3.0), &[&s, &s]);
        let k = i32s_sym(&x, &[1, 2]);
        let sa = x.scatter(
            &k,
            &(x.slice(&[0, 0], &[2, 3], &[1, 1]) * 2.0),
            0,
            tensorlift::Combiner::Add,
        );
        let ss = x.scatter(
            &k,
            &x.slice(&[2, 0], &[4, 3], &[1, 1]).cos(),
            0,
            tensorlift::Combiner::Set,
        );
        t + d
            + c
            + u.square().reduce_sum(None, false)
            + sa.sin().reduce_sum(None, false)
            + ss.square().reduce_sum(None, false)
    });
    check(f, &[x, idx, start, far], &[0], "gather/scatter/dynamic");
}

fn i32s_sym(like: &Sym, v: &[i32]) -> Sym {
    like.graph().constant(&i32s(v, &[v.len()]))
}

#[test]
fn argmax_as_an_index_carries_no_gradient() {
    let x = f64s(&[0.1, 0.9, 0.3], &[3]);
    for f in both(function(|x: Sym| {
        let i = x.argmax(0);
        x.take(&i, 0) * 2.0
    })) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f64>(&g[0]), vec![0.0, 2.0, 0.0]);
    }
}

#[test]
fn fori_loops_of_zero_one_and_many_iterations() {
    for n in [0, 1, 5] {
        let x = f64s(&ramp(6, -1.0, 1.0, 14), &[2, 3]);
        let w = f64s(&ramp(9, -0.5, 0.5, 15), &[3, 3]);
        let b = f64s(&ramp(3, -0.5, 0.5, 16), &[3]);
        let f = function(move |x: Sym, w: Sym, b: Sym| {
            let out = fori_loop(0, n, |_i, c| vec![(c[0].matmul(&w) + &b).tanh()], &[x]);
            out[0].square().reduce_sum(None, false)
        });
        check(f, &[x, w, b], &[0, 1, 2], &format!("fori {n}"));
    }
}

#[test]
fn fori_loop_reading_its_counter() {
    let x = f64s(&ramp(3, -1.0, 1.0, 17), &[3]);
    let f = function(|x: Sym| {
        let out = fori_loop(
            2,
            6,
            |i, c| vec![&c[0] * i.cast(DType::F64).sin() + c[0].cos()],
            &[x],
        );
        out[0].reduce_sum(None, false)
    });
    check(f, &[x], &[0], "fori with counter");
}

#[test]
fn while_with_data_dependent_trip_count() {
    // x grows until its squared norm passes 10: 0, 1 and several trips.
    for start in [4.0, 2.0, 0.3] {
        let x = f64s(&[start, start * 0.5], &[2]);
        let c = f64s(&[0.25, -0.125], &[2]);
        let f = function(|x: Sym, c: Sym| {
            let out = while_loop(
                |s| s[0].square().reduce_sum(None, false).less(10.0),
                |s| vec![&s[0] * 1.5 + &s[1], s[1].clone()],
                &[x, c],
            );
            out[0].sin().reduce_sum(None, false)
        });
        check(f, &[x, c], &[0, 1], &format!("while from {start}"));
    }
}

#[test]
fn branches_and_switch() {
    let x = f64s(&ramp(4, -1.0, 1.0, 18), &[4]);
    for p in [0, 1] {
        let f = function(move |x: Sym| {
            let pred = x.graph().scalar(DType::Bool, p as f64);
            let y = cond(
                &pred,
                |o| vec![o[0].exp() * &o[0]],
                |o| vec![o[0].sin()],
                &[x],
            );
            y[0].reduce_sum(None, false)
        });
        check(f, std::slice::from_ref(&x), &[0], &format!("cond {p}"));
    }
    for k in [0, 1, 2, 7] {
        let f = function(move |x: Sym| {
            let i = x.graph().scalar(DType::I32, k as f64);
            let b0 = |o: &[Sym]| vec![o[0].square()];
            let b1 = |o: &[Sym]| vec![o[0].tanh()];
            let b2 = |o: &[Sym]| vec![&o[0] * 3.0];
            let y = switch(&i, &[&b0, &b1, &b2], &[x]);
            y[0].reduce_sum(None, false)
        });
        check(f, std::slice::from_ref(&x), &[0], &format!("switch {k}"));
    }
}

#[test]
fn scan_and_nested_loops() {
    let xs = f64s(&ramp(12, -1.0, 1.0, 19), &[4, 3]);
    let h = f64s(&ramp(3, -1.0, 1.0, 20), &[3]);
    let f = function(|xs: Sym, h: Sym| {
        let (carry, ys) = scan(
            |c, x| {
                let n = (&c[0] * &x[0] + x[0].sin()).tanh();
                (vec![n.clone()], vec![n * 2.0])
            },
            &[h],
            &[xs],
            None,
            false,
        );
        carry[0].reduce_sum(None, false) + ys[0].square().reduce_sum(None, false)
    });
    check(f, &[xs.clone(), h.clone()], &[0, 1], "scan");
    let f = function(|h: Sym| {
        let out = fori_loop(
            0,
            3,
            |_i, c| fori_loop(0, 2, |_j, d| vec![d[0].sin() * 1.1], &[c[0].clone()]),
            &[h],
        );
        out[0].reduce_sum(None, false)
    });
    check(f, &[h], &[0], "nested fori");
}

#[test]
fn grad_of_grad() {
    // d²/dx² sum(sin x) = -sin x; d²/dx² x³ = 6x.
    let x = f64s(&[0.3], &[]);
    for f in both(function(|x: Sym| x.sin())) {
        let gg = f
            .grad(&[0])
            .grad(&[0])
            .call(std::slice::from_ref(&x))
            .unwrap();
        let got = common::to_vec::<f64>(&gg[0])[0];
        assert!((got + 0.3f64.sin()).abs() < 1e-15, "{got}");
    }
    for f in both(function(|x: Sym| &x * &x * &x)) {
        let ggg = f
            .grad(&[0])
            .grad(&[0])
            .grad(&[0])
            .call(std::slice::from_ref(&x))
            .unwrap();
        assert_eq!(common::to_vec::<f64>(&ggg[0]), vec![6.0]);
    }
    // Second derivatives through a loop, against finite differences.
    let f = function(|x: Sym| fori_loop(0, 3, |_i, c| vec![c[0].sin() * 1.5], &[x]).remove(0));
    check(f.grad(&[0]), &[x], &[0], "grad of grad through a loop");
}

#[test]
fn errors_name_what_has_no_gradient() {
    let f = function(|x: Sym| x.cast(DType::F64).square().reduce_sum(None, false));
    let e = f.grad(&[0]).call(&[i32s(&[1, 2], &[2])]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(
        e.to_string()
            .contains("integer and bool values carry no gradient"),
        "{e}"
    );
    let f = function(|x: Sym| x.square().reduce_sum(None, false));
    let e = f.grad(&[3]).call(&[f64s(&[1.0], &[1])]).unwrap_err();
    assert!(e.to_string().contains("wrt[0] is 3"), "{e}");
    let f = function(|x: Sym| x.square());
    let e = f.grad(&[0]).call(&[f64s(&[1.0, 2.0], &[2])]).unwrap_err();
    assert!(e.to_string().contains("real floating scalar"), "{e}");
    let f = function(|x: Sym| {
        let y = x
            .graph()
            .host_fn(|ts| Ok(ts.to_vec()), &[&x], &[DType::F64], false);
        y[0].set_shape(&[Some(1)]).reduce_sum(None, false)
    });
    let e = f.grad(&[0]).call(&[f64s(&[1.0], &[1])]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("not differentiable") && msg.contains("autodiff.rs"),
        "{msg}"
    );
    // Compiling a gradient ahead of time needs known dims.
    let f = function(|x: Sym| x.square().reduce_sum(None, false));
    let spec = tensorlift::TensorSpec::new(DType::F64, &[None]);
    let msg = f.grad(&[0]).compile(&[spec]).unwrap_err().to_string();
    assert!(
        msg.contains("concrete shapes") && msg.contains("f64[?]"),
        "{msg}"
    );
    let spec = tensorlift::TensorSpec::new(DType::F64, &[Some(3)]);
    assert!(f.grad(&[0]).jit_compile(true).compile(&[spec]).is_ok());
}

#[test]
fn vjp_and_jvp_agree_with_each_other() {
    // ⟨Jᵀu, v⟩ = ⟨u, Jv⟩ for a function with two outputs.
    let x = f64s(&ramp(6, -1.0, 1.0, 21), &[2, 3]);
    let f = function(|x: Sym| vec![x.sin().reduce_sum(Some(&[1]), false), x.exp()]);
    let u0 = f64s(&[0.5, -1.0], &[2]);
    let u1 = f64s(&ramp(6, -1.0, 1.0, 22), &[2, 3]);
    let v = f64s(&ramp(6, -1.0, 1.0, 23), &[2, 3]);
    for f in both(f) {
        let r = f
            .vjp(&[0])
            .call(&[x.clone(), u0.clone(), u1.clone()])
            .unwrap();
        let t = f.jvp(&[0]).call(&[x.clone(), v.clone()]).unwrap();
        let dot = |a: &Tensor, b: &Tensor| -> f64 {
            common::to_vec::<f64>(a)
                .iter()
                .zip(common::to_vec::<f64>(b))
                .map(|(p, q)| p * q)
                .sum()
        };
        let lhs = dot(&r[2], &v);
        let rhs = dot(&u0, &t[2]) + dot(&u1, &t[3]);
        assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
    }
}

#[test]
fn stop_gradient_blocks_the_gradient() {
    // d/dx sum(x * stop_gradient(x)) = x, not 2x.
    let x = f64s(&[1.0, -2.0, 3.0], &[3]);
    for f in both(function(|x: Sym| {
        (&x * x.stop_gradient()).reduce_sum(None, false)
    })) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f64>(&g[0]), vec![1.0, -2.0, 3.0]);
        // The value is the identity's.
        let v = f.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(common::to_vec::<f64>(&v[0]), vec![14.0]);
    }
}

/// softplus(x) = log(1 + e^x) with the stable gradient sigmoid(x).
fn softplus(x: &Sym) -> Sym {
    custom_vjp(
        |a| vec![a[0].exp().log1p()],
        |a, _out, ct| vec![&ct[0] * a[0].sigmoid()],
        std::slice::from_ref(x),
    )
    .remove(0)
}

#[test]
fn custom_vjp_replaces_the_gradient() {
    // Large x: the naive gradient e^x / (1 + e^x) overflows to NaN; the
    // custom one is sigmoid(x) = 1.
    let x = f64s(&[0.5, -1.0, 800.0], &[3]);
    for f in both(function(|x: Sym| softplus(&x).reduce_sum(None, false))) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        let got = common::to_vec::<f64>(&g[0]);
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        assert_eq!(got, vec![sig(0.5), sig(-1.0), 1.0]);
    }
    let x = f64s(&ramp(5, -2.0, 2.0, 24), &[5]);
    let f = function(|x: Sym| (softplus(&x) * &x).reduce_sum(None, false));
    check(f, &[x], &[0], "custom softplus");
}

#[test]
fn a_callback_result_of_unknown_shape_is_named_when_differentiated() {
    // The forward callback's result is not declared: the rule that needs
    // its shape (reduce_sum's, to broadcast the cotangent back) fails, and
    // the error names that op, the callback whose result has no shape, and
    // what to do.
    let x = f64s(&ramp(4, -2.0, 2.0, 25), &[4]);
    let f = function(|x: Sym| {
        custom_vjp(
            |a| {
                a[0].graph()
                    .host_fn(|ts| Ok(vec![ts[0].clone()]), &[&a[0]], &[DType::F64], false)
            },
            |a, _, _| vec![a[0].cos()],
            std::slice::from_ref(&x),
        )
        .remove(0)
        .sin()
        .reduce_sum(None, false)
    });
    let err = f
        .grad(&[0])
        .call(std::slice::from_ref(&x))
        .unwrap_err()
        .to_string();
    for part in [
        "reduce_sum '",
        "its operand 0 is f64[*], the result of host_fn 'host_fn' (created at tests/autodiff.rs:",
        "inside custom_vjp 'custom_vjp' (created at tests/autodiff.rs:",
        "differentiation needs static shapes: declare the shape (set_shape",
    ] {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
}

#[test]
fn a_callback_with_a_custom_gradient_is_differentiable() {
    // y = x³ computed on the host; its gradient 3x²·ct on the host too.
    let x = f64s(&ramp(4, -2.0, 2.0, 25), &[4]);
    let cube = |x: &Sym| -> Sym {
        custom_vjp(
            |a| {
                let y = a[0].graph().host_fn(
                    |ts| {
                        let v = ts[0].to_ndarray::<f64>()?;
                        Ok(vec![Tensor::from(v.mapv(|e| e * e * e))])
                    },
                    &[&a[0]],
                    &[DType::F64],
                    false,
                );
                vec![y[0].set_shape(&[Some(4)])]
            },
            |a, _out, ct| {
                let g = a[0].graph().host_fn(
                    |ts| {
                        let (x, c) = (ts[0].to_ndarray::<f64>()?, ts[1].to_ndarray::<f64>()?);
                        Ok(vec![Tensor::from(&x * &x * 3.0 * &c)])
                    },
                    &[&a[0], &ct[0]],
                    &[DType::F64],
                    false,
                );
                vec![g[0].set_shape(&[Some(4)])]
            },
            std::slice::from_ref(x),
        )
        .remove(0)
    };
    for f in both(function(move |x: Sym| {
        cube(&x).sin().reduce_sum(None, false)
    })) {
        let g = f.grad(&[0]).call(std::slice::from_ref(&x)).unwrap();
        let want: Vec<f64> = common::to_vec::<f64>(&x)
            .iter()
            .map(|v| (v * v * v).cos() * 3.0 * v * v)
            .collect();
        let got = common::to_vec::<f64>(&g[0]);
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-12, "{got:?} vs {want:?}");
        }
        let opts = GradCheck {
            only: Some(Mode::Reverse),
            ..GradCheck::default()
        };
        check_grads(&f, std::slice::from_ref(&x), &[0], &opts).unwrap();
    }
}

#[test]
fn check_grads_catches_a_wrong_custom_gradient() {
    // The gradient of sin given as +sin: check_grads must say so.
    let x = f64s(&ramp(3, -1.0, 1.0, 26), &[3]);
    let f = function(|x: Sym| {
        custom_vjp(
            |a| vec![a[0].sin()],
            |a, _o, ct| vec![&ct[0] * a[0].sin()],
            &[x],
        )
        .remove(0)
        .reduce_sum(None, false)
    });
    for f in both(f) {
        let e = check_grads(&f, std::slice::from_ref(&x), &[0], &GradCheck::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not match finite differences"), "{e}");
    }
}

#[test]
fn while_with_an_iteration_bound_stacks_instead_of_recomputing() {
    // `while |x|² < 10 and i < 6`: exits early or at the bound. The bound
    // gives the stacks their size, so the gradient runs in linear time: a
    // forward and a backward loop, no recomputing loop inside.
    for start in [4.0, 1.5, 0.3, 0.001] {
        let x = f64s(&[start, start * 0.5], &[2]);
        let c = f64s(&[0.25, -0.125], &[2]);
        let f = function(|x: Sym, c: Sym| {
            let i = x.graph().scalar(DType::I32, 0.0);
            let out = while_loop(
                |s| {
                    let small = s[1].square().reduce_sum(None, false).less(10.0);
                    small.logical_and(s[0].less(6))
                },
                |s| vec![&s[0] + 1, (&s[1] * 1.5 + &s[2]).sin() * 2.0, s[2].clone()],
                &[i, x, c],
            );
            out[1].sin().reduce_sum(None, false)
        });
        check(
            f.clone(),
            &[x.clone(), c.clone()],
            &[0, 1],
            &format!("bounded while from {start}"),
        );
        let specs = [&x, &c].map(tensorlift::TensorSpec::of);
        let ir = f
            .grad(&[0, 1])
            .compiler_ir(&specs, tensorlift::IrStage::Optimized)
            .unwrap();
        assert_eq!(ir.matches("= while(").count(), 2, "{ir}");
    }
}

#[test]
fn hessian_vector_products_forward_over_reverse() {
    // H·v of f(x) = sum(sin(x)·x²) through f.grad(..).jvp(..), against the
    // analytic Hessian (diagonal: 2 sin x + 4x cos x - x² sin x).
    let xs = [0.3, -1.2, 2.0];
    let vs = [1.0, 0.5, -2.0];
    let f = function(|x: Sym| (x.sin() * x.square()).reduce_sum(None, false));
    for f in both(f) {
        let hvp = f.grad(&[0]).jvp(&[0]);
        let out = hvp.call(&[f64s(&xs, &[3]), f64s(&vs, &[3])]).unwrap();
        let got = common::to_vec::<f64>(&out[1]);
        for i in 0..3 {
            let x: f64 = xs[i];
            let h = 2.0 * x.sin() + 4.0 * x * x.cos() - x * x * x.sin();
            assert!((got[i] - h * vs[i]).abs() < 1e-12, "{got:?}");
        }
        // Both modes of the gradient against finite differences: second
        // derivatives through check_grads.
        check_grads(
            &f.grad(&[0]),
            &[f64s(&xs, &[3])],
            &[0],
            &GradCheck::default(),
        )
        .unwrap();
    }
}

#[test]
fn nested_control_flow_branches_in_loops_and_loops_in_branches() {
    let x = f64s(&ramp(3, -1.0, 1.0, 27), &[3]);
    // A cond inside a fori_loop (switching on the counter's parity), and a
    // fori_loop inside a branch.
    let f = function(|x: Sym| {
        let out = fori_loop(
            0,
            4,
            |i, c| {
                let odd = (i % 2).equal(1);
                cond(
                    &odd,
                    |o| vec![o[0].sin() * 1.3],
                    |o| {
                        fori_loop(
                            0,
                            2,
                            |_j, d| vec![d[0].tanh() + &d[0] * 0.5],
                            &[o[0].clone()],
                        )
                    },
                    &[c[0].clone()],
                )
            },
            &[x],
        );
        out[0].square().reduce_sum(None, false)
    });
    check(f, &[x], &[0], "nested cond/fori");
}

/// `vjp_in_trace`: a gradient taken inside a trace is ordinary traced code
/// (what a gradient tape inside a function needs): it matches the
/// function's own gradient, captures get none, and it differentiates
/// again (a second derivative through a nested vjp_in_trace).
#[test]
fn vjp_in_trace_is_differentiable_traced_code() {
    let x = f64s(&[0.3, -1.2, 2.0], &[3]);
    for f in both(function(|x: Sym| {
        let w = x.cos(); // captured by the inner function: no gradient through it
        let ct = x.graph().scalar(DType::F64, 1.0).broadcast_to(&[3]);
        let dy = tensorlift::vjp_in_trace(
            |p| vec![&p[0] * &p[0] * &p[0] * &w],
            std::slice::from_ref(&x),
            &[ct],
        );
        dy[0].clone()
    })) {
        let g = f.call(std::slice::from_ref(&x)).unwrap()[0]
            .to_ndarray::<f64>()
            .unwrap();
        for (i, v) in [0.3f64, -1.2, 2.0].iter().enumerate() {
            assert!((g[i] - 3.0 * v * v * v.cos()).abs() < 1e-12, "{g}");
        }
        // d/dx of sum(dy): 6x·cos(x) - 3x²·sin(x) through the capture now
        // that the outer function differentiates its own cos.
        let h = function(move |x: Sym| {
            let w = x.cos();
            let ct = x.graph().scalar(DType::F64, 1.0).broadcast_to(&[3]);
            let dy = tensorlift::vjp_in_trace(
                |p| vec![&p[0] * &p[0] * &p[0]],
                std::slice::from_ref(&x),
                &[ct],
            );
            (&dy[0] * &w).reduce_sum(None, false)
        });
        let d2 = h.grad(&[0]).call(std::slice::from_ref(&x)).unwrap()[0]
            .to_ndarray::<f64>()
            .unwrap();
        for (i, v) in [0.3f64, -1.2, 2.0].iter().enumerate() {
            let want = 6.0 * v * v.cos() - 3.0 * v * v * v.sin();
            assert!((d2[i] - want).abs() < 1e-12, "{d2}");
        }
    }
}

#[test]
fn vjp_in_trace_checks_the_cotangents() {
    let f = function(|x: Sym| {
        let wrong = x.graph().scalar(DType::F64, 1.0);
        tensorlift::vjp_in_trace(|p| vec![p[0].sin()], std::slice::from_ref(&x), &[wrong])[0]
            .clone()
    });
    let e = f.call(&[f64s(&[1.0, 2.0], &[2])]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let text = e.to_string();
    assert!(
        text.contains("cotangents") && text.contains("f64[2]"),
        "{text}"
    );
}

/// A front end names its own source positions, and finds the trace under
/// way also in a function without inputs.
#[test]
fn front_end_sites_and_the_active_trace() {
    use tensorlift::ir::Site;
    assert!(tensorlift::Tracer::active().is_none());
    let f = function(|_: &[Sym]| {
        let t = tensorlift::Tracer::active().expect("a trace is under way");
        Site::scoped(Site::at("model.py", 42, 1), || {
            t.scalar(DType::F32, 2.0).exp()
        })
    });
    let ir = f.compiler_ir(&[], tensorlift::IrStage::Traced).unwrap();
    assert!(ir.contains("\"model.py\":42:1"), "{ir}");
    let y = f.call(&[]).unwrap();
    assert!((y[0].to_ndarray::<f32>().unwrap()[[]] - 2f32.exp()).abs() < 1e-6);
    assert!(tensorlift::Tracer::active().is_none());
}

/// Reverse mode keeps a data-dependent loop's carries on a run-time tape
/// (linear time): the gradient's IR pushes and pops them; a gradient of
/// the gradient (which recomputes instead) still matches finite
/// differences; threads calling one compiled gradient at once, with
/// different trip counts, each get their own tape.
#[test]
fn data_dependent_loops_keep_their_carries_on_a_run_time_tape() {
    let f = function(|x: Sym, c: Sym| {
        let out = while_loop(
            |s| s[0].square().reduce_sum(None, false).less(10.0),
            |s| vec![&s[0] * 1.5 + s[0].sin() * &s[1], s[1].clone()],
            &[x, c],
        );
        out[0].sin().reduce_sum(None, false)
    });
    let c = f64s(&[0.25, -0.125], &[2]);
    let xs: Vec<Tensor> = [0.3, 0.7, 1.5, 4.0]
        .iter()
        .map(|s| f64s(&[*s, s * 0.5], &[2]))
        .collect();
    let g = f.grad(&[0, 1]);
    let specs = [
        tensorlift::TensorSpec::of(&xs[0]),
        tensorlift::TensorSpec::of(&c),
    ];
    let ir = g
        .compiler_ir(&specs, tensorlift::IrStage::Optimized)
        .unwrap();
    assert!(
        ir.contains("__tensorlift_tape_") && ir.contains("_push") && ir.contains("_pop"),
        "{ir}"
    );
    // The gradient of the gradient: a Hessian through the loop.
    let gx = f.grad(&[0]);
    check(
        gx,
        &[xs[0].clone(), c.clone()],
        &[0],
        "grad of grad through a while",
    );
    // Threads: each its own trip count, each its own tape.
    let gj = f.grad(&[0, 1]).jit_compile(true);
    let want: Vec<Vec<Tensor>> = xs
        .iter()
        .map(|x| gj.call(&[x.clone(), c.clone()]).unwrap())
        .collect();
    std::thread::scope(|s| {
        for (x, w) in xs.iter().zip(&want) {
            let (gj, c) = (&gj, &c);
            s.spawn(move || {
                for _ in 0..25 {
                    let got = gj.call(&[x.clone(), c.clone()]).unwrap();
                    for (a, b) in got.iter().zip(w) {
                        assert_eq!(a.bytes(), b.bytes());
                    }
                }
            });
        }
    });
}

/// `vjp_of_values`: a gradient of values inside a trace with respect to
/// other values of it (not only inputs), through a branch and a loop body
/// that capture the source; `None` for a source the target does not use.
#[test]
fn vjp_of_values_sees_every_path_including_captures() {
    for f in both(function(|x: Sym| {
        let s = x.sin(); // a source that is not a parameter
        let pred = x.reduce_sum(None, false).greater(0.0);
        let b = cond(&pred, |_| vec![&s * 3.0], |_| vec![&s * 5.0], &[]);
        let w = while_loop(
            |c| c[0].less(3.0),
            |c| vec![&c[0] + 1.0, &c[1] + &s * &s],
            &[
                x.graph().scalar(DType::F64, 0.0),
                x.graph().scalar(DType::F64, 0.0).broadcast_to(&[2]),
            ],
        );
        let y = (&b[0] + &w[1]).reduce_sum(None, false);
        let unrelated = x.graph().scalar(DType::F64, 2.0);
        let ct = x.graph().scalar(DType::F64, 1.0);
        let g = tensorlift::vjp_of_values(&[y], &[s.clone(), x.clone(), unrelated], &[ct]);
        if let Some(e) = x.graph().error() {
            panic!("{e}");
        }
        assert!(g[2].is_none());
        vec![g[0].clone().unwrap(), g[1].clone().unwrap()]
    })) {
        let x = f64s(&[0.5, 1.0], &[2]);
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        let ds = out[0].to_ndarray::<f64>().unwrap();
        let dx = out[1].to_ndarray::<f64>().unwrap();
        for (i, v) in [0.5f64, 1.0].iter().enumerate() {
            // y = sum(3 s + 3 s²) with s = sin x (x sums to > 0; 3 trips).
            let want_s = 3.0 + 6.0 * v.sin();
            assert!((ds[i] - want_s).abs() < 1e-12, "{ds}");
            assert!((dx[i] - want_s * v.cos()).abs() < 1e-12, "{dx}");
        }
    }
}

#[test]
fn check_grads_names_an_input_that_has_no_gradient() {
    let f = function(|x: Sym, y: Sym| x.cast(DType::F64) * y);
    let args = [i32s(&[3, 4], &[2]), f64s(&[1.0, 2.0], &[2])];
    for f in both(f) {
        let e = check_grads(&f, &args, &[1, 0], &GradCheck::default()).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("cannot differentiate with respect to parameter 0, which is i32[2]")
                && msg.contains("integer and bool values carry no gradient"),
            "{msg}"
        );
        // The float input alone checks.
        check_grads(&f, &args, &[1], &GradCheck::default()).unwrap();
    }
}

#[test]
fn a_custom_vjp_whose_gradient_has_the_wrong_type_reports_it() {
    // The gradient returns f64[] for an f64[3] input: `y[0]` of the
    // user's code must not panic, and the error names the custom_vjp.
    let line = line!() + 2;
    let f = function(|x: Sym| {
        let y = custom_vjp(
            |a| vec![a[0].sin()],
            |_a, _o, ct| vec![ct[0].reduce_sum(None, false)],
            &[x],
        );
        y[0].reduce_sum(None, false)
    });
    let x = f64s(&[1.0, 2.0, 3.0], &[3]);
    for f in both(f) {
        for g in [f.clone(), f.grad(&[0])] {
            let msg = g.call(std::slice::from_ref(&x)).unwrap_err().to_string();
            assert!(!msg.contains("panicked"), "{msg}");
            assert!(
                msg.contains("custom_vjp") && msg.contains("f64[3]") && msg.contains("(f64[])"),
                "{msg}"
            );
            assert!(
                msg.contains(&format!("autodiff.rs:{line}:")),
                "{msg} (expected line {line})"
            );
        }
    }
}

/// The second-derivative examples of docs/autodiff.md and the README, run
/// as written.
#[test]
fn the_second_derivative_examples_of_the_docs_run() {
    let examples = [
        (
            include_str!("../docs/autodiff.md"),
            "let d2 = function(|x: Sym| x.sin()).grad(&[0]).grad(&[0]); // -sin(x), x a scalar",
        ),
        (
            include_str!("../docs/autodiff.md"),
            "let hvp = function(|x: Sym| x.sin().reduce_sum(None, false)).grad(&[0]).jvp(&[0]);",
        ),
        (
            include_str!("../README.md"),
            "let second = function(|x: Sym| x.sin()).grad(&[0]).grad(&[0]); // -sin(x), x a scalar",
        ),
    ];
    for (doc, e) in examples {
        assert!(doc.contains(e), "the docs no longer read `{e}`");
    }
    let d2 = function(|x: Sym| x.sin()).grad(&[0]).grad(&[0]); // -sin(x), x a scalar
    let hvp = function(|x: Sym| x.sin().reduce_sum(None, false))
        .grad(&[0])
        .jvp(&[0]);
    let xs = [0.3, -1.2, 2.0];
    let vs = [1.0, 0.5, -2.0];
    let second = function(|x: Sym| x.sin()).grad(&[0]).grad(&[0]); // -sin(x), x a scalar
    let all = both(d2).into_iter().zip(both(second)).zip(both(hvp));
    for ((d2, second), hvp) in all {
        let got = second.call(&[f64s(&xs[..1], &[])]).unwrap();
        assert!((common::to_vec::<f64>(&got[0])[0] + xs[0].sin()).abs() < 1e-15);
        let got = d2.call(&[f64s(&xs[..1], &[])]).unwrap();
        assert!((common::to_vec::<f64>(&got[0])[0] + xs[0].sin()).abs() < 1e-15);
        // (x, v) → (∇f(x) = cos x, H·v = -sin(x)·v): H is diagonal here.
        let out = hvp.call(&[f64s(&xs, &[3]), f64s(&vs, &[3])]).unwrap();
        let (grad, hv) = (
            common::to_vec::<f64>(&out[0]),
            common::to_vec::<f64>(&out[1]),
        );
        for i in 0..3 {
            assert!((grad[i] - xs[i].cos()).abs() < 1e-15, "{grad:?}");
            assert!((hv[i] + xs[i].sin() * vs[i]).abs() < 1e-15, "{hv:?}");
        }
    }
}

//! `check_grads`: a function's derivatives against finite differences, as
//! `jax.test_util.check_grads` and `torch.autograd.gradcheck` do, for
//! users to run on their own functions and custom gradients.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tensorlift_ir::{DType, Error, Literal, Scalar, TensorType};
use tensorlift_runtime::Tensor;

use crate::Function;

/// Step and tolerances of [`check_grads`]; `None` picks the defaults for
/// the inputs' dtype (f64: step 1e-6, rtol 1e-5, atol 1e-6; f32: 1e-3,
/// 2e-2, 2e-3; f16/bf16: 1e-1, 1e-1, 1e-1).
#[derive(Clone, Debug, Default)]
pub struct GradCheck {
    /// Finite-difference step.
    pub eps: Option<f64>,
    /// Relative tolerance.
    pub rtol: Option<f64>,
    /// Absolute tolerance.
    pub atol: Option<f64>,
    /// Seed of the random directions (0 by default).
    pub seed: u64,
    /// Check only this mode (`None`: both). A function whose custom
    /// gradient passes the cotangent to a host callback has no forward
    /// mode: check [`Mode::Reverse`].
    pub only: Option<Mode>,
}

/// A mode of differentiation, for [`GradCheck::only`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward mode ([`Function::jvp`]).
    Forward,
    /// Reverse mode ([`Function::vjp`]).
    Reverse,
}

/// Checks `f`'s forward mode ([`Function::jvp`]) and reverse mode
/// ([`Function::vjp`]) at `inputs` with respect to the inputs in `wrt`:
/// along a random direction `v`, `J·v` against the central difference
/// `(f(x + εv) - f(x - εv)) / 2ε` of every real floating output, and, for
/// a random cotangent `u`, `⟨Jᵀu, v⟩` against `⟨u, J·v⟩`. An error names
/// the check, the output and the largest mismatch. To check second
/// derivatives, check `f.grad(..)` the same way.
pub fn check_grads(
    f: &Function,
    inputs: &[Tensor],
    wrt: &[usize],
    options: &GradCheck,
) -> Result<(), Error> {
    let dtype = wrt
        .iter()
        .filter_map(|&i| inputs.get(i).map(Tensor::dtype))
        .min_by_key(|d| d.size())
        .unwrap_or(DType::F64);
    // Defaults by the precision of the narrowest input differentiated.
    let (eps, rtol, atol) = if dtype == DType::F64 {
        (1e-6, 1e-5, 1e-6)
    } else if dtype == DType::F32 {
        (1e-3, 2e-2, 2e-3)
    } else {
        (1e-1, 1e-1, 1e-1)
    };
    let eps = options.eps.unwrap_or(eps);
    let rtol = options.rtol.unwrap_or(rtol);
    let atol = options.atol.unwrap_or(atol);
    let mut rng = SmallRng::seed_from_u64(options.seed);
    for &i in wrt {
        let Some(x) = inputs.get(i) else {
            return Err(Error::invalid(format!(
                "check_grads: input {i} (in wrt) does not exist: {} input(s) were given",
                inputs.len()
            )));
        };
        // Checked before any input is moved (an integer input cannot be).
        if let Some(why) = tensorlift_ir::autodiff::no_gradient_reason(x.dtype()) {
            let t = TensorType::known(x.dtype(), x.shape());
            return Err(Error::invalid(format!(
                "check_grads of {}: cannot differentiate with respect to parameter {i}, which is {t}: {why}",
                f.label()
            )));
        }
    }
    let v: Vec<Tensor> = (wrt.iter())
        .map(|&i| random_like(&inputs[i], &mut rng))
        .collect::<Result<_, _>>()?;
    let shifted = |sign: f64| -> Result<Vec<Tensor>, Error> {
        let mut xs = inputs.to_vec();
        for (k, &i) in wrt.iter().enumerate() {
            let x = values(&inputs[i]);
            let d = values(&v[k]);
            let moved: Vec<f64> = x.iter().zip(&d).map(|(a, b)| a + sign * eps * b).collect();
            xs[i] = tensor_like(&inputs[i], &moved)?;
        }
        Ok(xs)
    };
    let plus = f.call(&shifted(1.0)?)?;
    let minus = f.call(&shifted(-1.0)?)?;
    let base = f.call(inputs)?;
    let float_outs: Vec<usize> = (0..base.len())
        .filter(|&j| base[j].dtype().is_float())
        .collect();
    let fd: Vec<Vec<f64>> = (float_outs.iter())
        .map(|&j| {
            let (p, m) = (values(&plus[j]), values(&minus[j]));
            p.iter()
                .zip(&m)
                .map(|(a, b)| (a - b) / (2.0 * eps))
                .collect()
        })
        .collect();
    if options.only != Some(Mode::Reverse) {
        let mut args = inputs.to_vec();
        args.extend(v.iter().cloned());
        let jvp = f.jvp(wrt).call(&args)?;
        for (k, &j) in float_outs.iter().enumerate() {
            let got = values(&jvp[base.len() + k]);
            compare(
                &got,
                &fd[k],
                rtol,
                atol,
                &format!("forward mode (jvp), output {j}"),
            )?;
        }
    }
    if options.only == Some(Mode::Forward) {
        return Ok(());
    }
    // Reverse mode: ⟨Jᵀu, v⟩ = ⟨u, J·v⟩.
    let u: Vec<Tensor> = (float_outs.iter())
        .map(|&j| random_like(&base[j], &mut rng))
        .collect::<Result<_, _>>()?;
    let mut args = inputs.to_vec();
    args.extend(u.iter().cloned());
    let vjp = f.vjp(wrt).call(&args)?;
    let lhs: f64 = (0..wrt.len())
        .map(|k| dot(&values(&vjp[base.len() + k]), &values(&v[k])))
        .sum();
    let rhs: f64 = (0..float_outs.len())
        .map(|k| dot(&values(&u[k]), &fd[k]))
        .sum();
    compare(
        &[lhs],
        &[rhs],
        rtol,
        atol,
        "reverse mode (vjp), ⟨Jᵀu, v⟩ against ⟨u, J·v⟩",
    )
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn compare(got: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) -> Result<(), Error> {
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        let within = err <= atol + rtol * w.abs() || (g.is_nan() && w.is_nan());
        let bad = !within;
        if bad && worst.is_none_or(|(_, _, _, e)| err > e || e.is_nan()) {
            worst = Some((i, *g, *w, err));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, g, w, err)) => Err(Error::invalid(format!(
            "check_grads: {what} does not match finite differences: at element {i}, {g} against {w} (error {err:e}, rtol {rtol:e}, atol {atol:e})"
        ))),
    }
}

/// A tensor's elements as f64 (real floats; others are 0).
fn values(t: &Tensor) -> Vec<f64> {
    let lit = t.to_literal();
    (0..lit.len())
        .map(|i| match lit.element(i) {
            Scalar::Float(v, _) => v,
            Scalar::Int(v) => v as f64,
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::Complex(re, _) => re,
        })
        .collect()
}

fn tensor_like(like: &Tensor, v: &[f64]) -> Result<Tensor, Error> {
    let scalars: Vec<Scalar> = v.iter().map(|x| Scalar::Float(*x, None)).collect();
    let lit = Literal::from_scalars(like.dtype(), like.shape(), &scalars)?;
    Tensor::from_literal(&lit)
}

fn random_like(like: &Tensor, rng: &mut SmallRng) -> Result<Tensor, Error> {
    let v: Vec<f64> = (0..like.len())
        .map(|_| rng.random::<f64>() * 2.0 - 1.0)
        .collect();
    tensor_like(like, &v)
}

//! The ops of the Python package, by TensorFlow's names: one table that
//! builds each op on symbolic values. Eager execution runs the same table
//! through a one-op interpreted function per signature, so an op means the
//! same thing eagerly, traced and compiled.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorlift::ir::{BinaryOp, Combiner, UnaryOp};
use tensorlift::{DType, Error, Function, Site, Sym, Tensor, TensorType, function};

/// The attributes an op takes besides its tensors (TensorFlow's keyword
/// arguments), parsed once: part of the eager cache key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attrs {
    /// Axes (`axis` of reductions, gather, concat, argmax, reverse).
    pub axis: Option<Vec<i64>>,
    /// `keepdims` of reductions.
    pub keepdims: bool,
    /// Target dtype (`cast`).
    pub dtype: Option<DType>,
    /// A shape (`reshape`, `broadcast_to`); -1 infers one dimension.
    pub shape: Option<Vec<i64>>,
    /// A permutation (`transpose`); signed so that a negative entry is an
    /// error naming the op, not a failed conversion.
    pub perm: Option<Vec<i64>>,
    /// `slice`: first index, one past the last index, step per axis.
    pub start: Option<Vec<usize>>,
    /// See `start`.
    pub limit: Option<Vec<usize>>,
    /// See `start`.
    pub stride: Option<Vec<usize>>,
    /// `pad`: elements added before each axis (negative: removed).
    pub low: Option<Vec<i64>>,
    /// `pad`: elements added after each axis (negative: removed).
    pub high: Option<Vec<i64>>,
    /// `strided_slice`: start per dim (None: omitted), Python's rules.
    pub begin: Option<Vec<Option<i64>>>,
    /// `strided_slice`: end per dim (None: omitted).
    pub end: Option<Vec<Option<i64>>>,
    /// `strided_slice`: step per dim.
    pub step: Option<Vec<i64>>,
    /// `argsort`: largest first.
    pub descending: bool,
    /// `cumsum`: from the last element.
    pub reverse: bool,
    /// `cumsum`: each element left out of its own sum.
    pub exclusive: bool,
    /// `scatter`: how an update combines with the element.
    pub combiner: Option<Combiner>,
}

impl Attrs {
    /// Reads the attributes from a dict of keyword arguments; unknown keys
    /// are an error naming them.
    pub fn from_dict(op: &str, d: Option<&Bound<'_, PyDict>>) -> PyResult<Attrs> {
        let mut a = Attrs::default();
        let Some(d) = d else {
            return Ok(a);
        };
        for (k, v) in d.iter() {
            let key: String = k.extract()?;
            if v.is_none() {
                continue;
            }
            match key.as_str() {
                "axis" => {
                    a.axis = Some(match v.extract::<i64>() {
                        Ok(i) => vec![i],
                        Err(_) => v.extract::<Vec<i64>>()?,
                    })
                }
                "keepdims" => a.keepdims = v.extract()?,
                "dtype" => {
                    let name: String = v.extract()?;
                    a.dtype = Some(DType::from_name(&name).ok_or_else(|| {
                        pyo3::exceptions::PyTypeError::new_err(format!(
                            "{op}: unknown dtype '{name}'"
                        ))
                    })?)
                }
                "shape" => a.shape = Some(v.extract()?),
                "perm" => a.perm = Some(v.extract()?),
                "start" => a.start = Some(v.extract()?),
                "limit" => a.limit = Some(v.extract()?),
                "stride" => a.stride = Some(v.extract()?),
                "low" => a.low = Some(v.extract()?),
                "high" => a.high = Some(v.extract()?),
                "descending" => a.descending = v.extract()?,
                "reverse" => a.reverse = v.extract()?,
                "exclusive" => a.exclusive = v.extract()?,
                "begin" => a.begin = Some(v.extract()?),
                "end" => a.end = Some(v.extract()?),
                "step" => a.step = Some(v.extract()?),
                "combiner" => {
                    let name: String = v.extract()?;
                    a.combiner = Some(Combiner::from_name(&name).ok_or_else(|| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "{op}: unknown combiner '{name}' (set, add, min or max)"
                        ))
                    })?)
                }
                other => {
                    return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                        "{op}: unexpected attribute '{other}'"
                    )));
                }
            }
        }
        Ok(a)
    }
}

/// The unary ops by TensorFlow's name.
fn unary(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "negative" => UnaryOp::Neg,
        "abs" => UnaryOp::Abs,
        "sign" => UnaryOp::Sign,
        "floor" => UnaryOp::Floor,
        "ceil" => UnaryOp::Ceil,
        "round" => UnaryOp::Round,
        "sqrt" => UnaryOp::Sqrt,
        "rsqrt" => UnaryOp::Rsqrt,
        "exp" => UnaryOp::Exp,
        "expm1" => UnaryOp::Expm1,
        "log" => UnaryOp::Log,
        "log1p" => UnaryOp::Log1p,
        "tanh" => UnaryOp::Tanh,
        "sigmoid" => UnaryOp::Logistic,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "erf" => UnaryOp::Erf,
        "logical_not" => UnaryOp::Not,
        "is_finite" => UnaryOp::IsFinite,
        "square" => UnaryOp::Square,
        "reciprocal" => UnaryOp::Reciprocal,
        _ => return None,
    })
}

/// The binary ops by TensorFlow's name.
fn binary(name: &str) -> Option<BinaryOp> {
    Some(match name {
        "add" => BinaryOp::Add,
        "subtract" => BinaryOp::Sub,
        "multiply" => BinaryOp::Mul,
        // C's truncated remainder; `floormod` is built from it in `apply`.
        "truncatemod" => BinaryOp::Rem,
        "pow" => BinaryOp::Pow,
        "maximum" => BinaryOp::Max,
        "minimum" => BinaryOp::Min,
        "logical_and" => BinaryOp::And,
        "logical_or" => BinaryOp::Or,
        "logical_xor" => BinaryOp::Xor,
        _ => return None,
    })
}

/// Every op name [`apply`] knows (the Python layer checks its table
/// against it).
pub const NAMES: &[&str] = &[
    "negative",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "sqrt",
    "rsqrt",
    "exp",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "sigmoid",
    "sin",
    "cos",
    "erf",
    "logical_not",
    "is_finite",
    "square",
    "reciprocal",
    "add",
    "subtract",
    "multiply",
    "divide",
    "floordiv",
    "floormod",
    "truncatemod",
    "pow",
    "maximum",
    "minimum",
    "logical_and",
    "logical_or",
    "logical_xor",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "reduce_sum",
    "reduce_prod",
    "reduce_max",
    "reduce_min",
    "reduce_all",
    "reduce_any",
    "reduce_mean",
    "argmax",
    "argmin",
    "argsort",
    "cumsum",
    "take_along_axis",
    "scatter",
    "matmul",
    "transpose",
    "reshape",
    "broadcast_to",
    "cast",
    "concat",
    "gather",
    "where",
    "clip_by_value",
    "reverse",
    "slice",
    "strided_slice",
    "dynamic_slice",
    "pad",
    "stop_gradient",
    "identity",
];

fn one_axis(name: &str, a: &Attrs) -> Result<i64, Error> {
    match a.axis.as_deref() {
        None => Ok(0),
        Some([i]) => Ok(*i),
        Some(more) => Err(Error::invalid(format!(
            "{name} takes one axis, got {more:?}"
        ))),
    }
}

fn arity(name: &str, inputs: &[Sym], n: usize) -> Result<(), Error> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{name} takes {n} tensor(s), got {}",
            inputs.len()
        )))
    }
}

/// The float dtype TensorFlow's `truediv` casts integer operands to
/// (`int8`/`int16`/`uint8`/`uint16` -> float32, wider -> float64); None for
/// the dtypes it divides as they are.
fn truediv_float(d: DType) -> Option<DType> {
    match d {
        DType::I8 | DType::I16 | DType::U8 | DType::U16 => Some(DType::F32),
        DType::I32 | DType::I64 | DType::U32 | DType::U64 => Some(DType::F64),
        DType::Bool
        | DType::F16
        | DType::BF16
        | DType::F32
        | DType::F64
        | DType::C64
        | DType::C128
        | DType::String => None,
    }
}

/// `x / y` as TensorFlow's `truediv`: integers (of one dtype) are cast to a
/// float dtype first, so `7 / 2` is 3.5.
fn truediv(x: &Sym, y: &Sym) -> Sym {
    match (x.dtype(), y.dtype()) {
        (Some(a), Some(b)) if a == b => match truediv_float(a) {
            Some(f) => x.cast(f) / y.cast(f),
            None => x / y,
        },
        _ => x / y,
    }
}

/// Where C's truncated quotient and remainder of `x` by `y` differ from
/// the floored ones: the remainder `r` is non-zero and its sign is not
/// `y`'s.
fn floor_fix(r: &Sym, y: &Sym) -> Sym {
    r.not_equal(0).logical_and(r.less(0).logical_xor(y.less(0)))
}

/// `x mod y` with the sign of `y` (TensorFlow's `floormod`, Python's `%`):
/// the truncated remainder, plus `y` where the two differ.
fn floormod(x: &Sym, y: &Sym) -> Sym {
    let r = x.rem(y);
    floor_fix(&r, y).select(&r + y, &r)
}

/// `floor(x / y)` (TensorFlow's `floordiv`, Python's `//`): integers take
/// the truncated quotient minus one where the remainder's sign is not
/// `y`'s; floats floor the quotient.
fn floordiv(x: &Sym, y: &Sym) -> Sym {
    match x.dtype() {
        Some(d) if d.is_int() => {
            let q = x / y;
            floor_fix(&x.rem(y), y).select(&q - 1, &q)
        }
        _ => (x / y).floor(),
    }
}

/// Builds op `name` on `inputs`. Errors the builder finds (shapes, dtypes)
/// are recorded in the trace, as for any traced op; errors in the call
/// itself (unknown op, wrong count) are returned.
pub fn apply(name: &str, inputs: &[Sym], a: &Attrs) -> Result<Vec<Sym>, Error> {
    if let Some(u) = unary(name) {
        arity(name, inputs, 1)?;
        return Ok(vec![inputs[0].unary(u)]);
    }
    if let Some(b) = binary(name) {
        arity(name, inputs, 2)?;
        return Ok(vec![inputs[0].binary(b, &inputs[1])]);
    }
    let axes = a.axis.as_deref();
    let out = match name {
        "divide" | "floordiv" | "floormod" => {
            arity(name, inputs, 2)?;
            let (x, y) = (&inputs[0], &inputs[1]);
            match name {
                "divide" => truediv(x, y),
                "floordiv" => floordiv(x, y),
                _ => floormod(x, y),
            }
        }
        "equal" | "not_equal" | "less" | "less_equal" | "greater" | "greater_equal" => {
            arity(name, inputs, 2)?;
            let (x, y) = (&inputs[0], &inputs[1]);
            match name {
                "equal" => x.equal(y),
                "not_equal" => x.not_equal(y),
                "less" => x.less(y),
                "less_equal" => x.less_equal(y),
                "greater" => x.greater(y),
                _ => x.greater_equal(y),
            }
        }
        "reduce_sum" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_sum(axes, a.keepdims)
        }
        "reduce_prod" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_prod(axes, a.keepdims)
        }
        "reduce_max" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_max(axes, a.keepdims)
        }
        "reduce_min" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_min(axes, a.keepdims)
        }
        "reduce_all" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_all(axes, a.keepdims)
        }
        "reduce_any" => {
            arity(name, inputs, 1)?;
            inputs[0].reduce_any(axes, a.keepdims)
        }
        "reduce_mean" => {
            arity(name, inputs, 1)?;
            reduce_mean(&inputs[0], axes, a.keepdims)
        }
        "argmax" => {
            arity(name, inputs, 1)?;
            inputs[0].argmax(one_axis(name, a)?)
        }
        "argmin" => {
            arity(name, inputs, 1)?;
            inputs[0].argmin(one_axis(name, a)?)
        }
        "argsort" => {
            arity(name, inputs, 1)?;
            inputs[0].argsort(one_axis(name, a)?, a.descending)
        }
        "cumsum" => {
            arity(name, inputs, 1)?;
            inputs[0].cumsum(one_axis(name, a)?, a.reverse, a.exclusive)
        }
        "take_along_axis" => {
            arity(name, inputs, 2)?;
            inputs[0].take_along_axis(&inputs[1], one_axis(name, a)?)
        }
        "scatter" => {
            // XLA's scatter along one axis: x, indices, updates (shaped
            // like gather(x, indices, axis)); indices out of range skipped.
            arity(name, inputs, 3)?;
            let combiner = a.combiner.unwrap_or(Combiner::Set);
            inputs[0].scatter(&inputs[1], &inputs[2], one_axis(name, a)?, combiner)
        }
        "matmul" => {
            arity(name, inputs, 2)?;
            // (TensorFlow 2's BatchMatMulV2: the builder broadcasts the
            // batch dims, `tensorlift_ir::builder::matmul`.)
            inputs[0].matmul(&inputs[1])
        }
        "transpose" => {
            arity(name, inputs, 1)?;
            let rank = inputs[0].shape().and_then(|s| s.rank());
            let perm = match &a.perm {
                // TensorFlow takes no negative entries (it wants dims in [0, rank)).
                Some(p) => p
                    .iter()
                    .map(|&d| usize::try_from(d))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        let rank = rank.map_or("unknown".to_string(), |r| r.to_string());
                        Error::invalid(format!(
                            "transpose: perm {p:?} must hold the dims 0..rank of a tensor of rank {rank}"
                        ))
                    })?,
                None => (0..rank.unwrap_or(0)).rev().collect(),
            };
            inputs[0].transpose(&perm)
        }
        "reshape" | "broadcast_to" => {
            arity(name, inputs, 1)?;
            let shape = a
                .shape
                .as_deref()
                .ok_or_else(|| Error::invalid(format!("{name} needs a shape")))?;
            if name == "reshape" {
                inputs[0].reshape(shape)
            } else {
                let dims = shape
                    .iter()
                    .map(|&d| usize::try_from(d))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| Error::invalid(format!("broadcast_to: bad shape {shape:?}")))?;
                inputs[0].broadcast_to(&dims)
            }
        }
        "cast" => {
            arity(name, inputs, 1)?;
            let d = a
                .dtype
                .ok_or_else(|| Error::invalid("cast needs a dtype"))?;
            inputs[0].cast(d)
        }
        "concat" => {
            let (first, rest) = inputs
                .split_first()
                .ok_or_else(|| Error::invalid("concat needs at least one tensor"))?;
            first.concat(rest, one_axis(name, a)?)
        }
        "gather" => {
            arity(name, inputs, 2)?;
            inputs[0].take(&inputs[1], one_axis(name, a)?)
        }
        "where" => {
            arity(name, inputs, 3)?;
            inputs[0].select(&inputs[1], &inputs[2])
        }
        "clip_by_value" => {
            arity(name, inputs, 3)?;
            let x = &inputs[0];
            x.clamp(bound_like(&inputs[1], x), bound_like(&inputs[2], x))
        }
        "reverse" => {
            arity(name, inputs, 1)?;
            inputs[0].reverse(axes.unwrap_or(&[]))
        }
        "slice" => {
            arity(name, inputs, 1)?;
            let (Some(start), Some(limit)) = (&a.start, &a.limit) else {
                return Err(Error::invalid("slice needs start and limit"));
            };
            let stride = a.stride.clone().unwrap_or_else(|| vec![1; start.len()]);
            inputs[0].slice(start, limit, &stride)
        }
        "dynamic_slice" => {
            // TensorFlow's `slice` with traced starts (one scalar per dim,
            // clamped as XLA's `dynamic_slice` clamps) and static sizes.
            let (Some(x), starts) = (inputs.first(), &inputs[1.min(inputs.len())..]) else {
                return Err(Error::invalid("dynamic_slice needs an operand"));
            };
            let Some(sizes) = &a.shape else {
                return Err(Error::invalid("dynamic_slice needs sizes"));
            };
            let sizes = sizes
                .iter()
                .map(|&d| usize::try_from(d))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    Error::invalid(format!("dynamic_slice: sizes {sizes:?} must be >= 0"))
                })?;
            let refs: Vec<&Sym> = starts.iter().collect();
            x.dynamic_slice(&refs, &sizes)
        }
        "pad" => {
            // XLA's pad without interior padding: the second tensor is the
            // scalar value added; a negative amount crops, which is how a
            // slice of a dim of unknown size is traced.
            arity(name, inputs, 2)?;
            let (Some(low), Some(high)) = (&a.low, &a.high) else {
                return Err(Error::invalid("pad needs low and high"));
            };
            inputs[0].pad(low, high, &vec![0; low.len()], &inputs[1])
        }
        "strided_slice" => {
            // Python's slice per dim, also on dims of unknown size.
            arity(name, inputs, 1)?;
            let (Some(begin), Some(end), Some(step)) = (&a.begin, &a.end, &a.step) else {
                return Err(Error::invalid("strided_slice needs begin, end and step"));
            };
            inputs[0].strided_slice(begin, end, step)
        }
        "stop_gradient" => {
            arity(name, inputs, 1)?;
            inputs[0].stop_gradient()
        }
        "identity" => {
            arity(name, inputs, 1)?;
            inputs[0].clone()
        }
        other => return Err(Error::invalid(format!("unknown op '{other}'"))),
    };
    Ok(vec![out])
}

/// TensorFlow's `reduce_mean`: the sum over `axes` divided by the number of
/// elements summed. When a reduced dim (or the rank) is unknown until the
/// function runs, that number is counted then, as a sum of ones of `x`'s
/// shape over the same axes.
fn reduce_mean(x: &Sym, axes: Option<&[i64]>, keepdims: bool) -> Sym {
    // Half precision in f32, as TensorFlow's mean accumulates it: a sum or
    // a count past 65504 is inf in f16 (the mean of 70000 ones was NaN).
    if let Some(d @ (DType::F16 | DType::BF16)) = x.dtype() {
        return reduce_mean(&x.cast(DType::F32), axes, keepdims).cast(d);
    }
    // Narrow integers in int64, truncated as before: a count may not fit
    // the dtype (256 elements of uint8 was an error about a constant the
    // user never made), nor may the sum.
    if let Some(d @ (DType::I8 | DType::U8 | DType::I16 | DType::U16)) = x.dtype() {
        return reduce_mean(&x.cast(DType::I64), axes, keepdims).cast(d);
    }
    let sum = x.reduce_sum(axes, keepdims);
    let dims = x.shape().and_then(|s| s.dims().map(|d| d.to_vec()));
    let known_count = dims.and_then(|dims| {
        let rank = dims.len() as i64;
        let all: Vec<i64> = (0..rank).collect();
        axes.unwrap_or(&all)
            .iter()
            .map(|&i| {
                let i = if i < 0 { i + rank } else { i };
                usize::try_from(i)
                    .ok()
                    .and_then(|i| dims.get(i).copied().flatten())
            })
            .product::<Option<usize>>()
    });
    if let Some(n) = known_count {
        return sum / n as f64;
    }
    let Some(d) = x.dtype() else {
        return sum; // `x` is poisoned: its error is recorded already
    };
    // Ones that do not depend on `x`'s values (`x * 0 + 1` would be NaN
    // where `x` is NaN or infinite), counted in int64 so that the count is
    // exact.
    let ones = x.cast(DType::Bool).logical_and(0).cast(DType::I64) + 1;
    sum / ones.reduce_sum(axes, keepdims).cast(d)
}

/// A bound of `clip_by_value`, broadcast to `x`'s shape: TensorFlow takes
/// a scalar or any shape that broadcasts to `t`'s, while `clamp` takes a
/// scalar or `x`'s own shape. A bound that would change `x`'s shape is left
/// for `clamp` to refuse.
fn bound_like(bound: &Sym, x: &Sym) -> Sym {
    let (Some(bs), Some(xs)) = (bound.shape(), x.shape()) else {
        return bound.clone();
    };
    let known = xs
        .dims()
        .and_then(|d| d.iter().copied().collect::<Option<Vec<usize>>>());
    match (bs.rank(), known) {
        (Some(r), Some(dims)) if r > 0 && bs != xs && r <= dims.len() => bound.broadcast_to(&dims),
        _ => bound.clone(),
    }
}

type EagerKey = (String, Attrs, Vec<TensorType>);

/// How many one-op functions [`eager_cache`] keeps: past it, the cache
/// starts over (a loop of `big[i]` over 20,000 indices, or an op over
/// 20,000 shapes, kept one traced function each: 95 MB, and slower calls).
const EAGER_KEPT: usize = 1024;

/// One interpreted function per op, attributes and input types (at most
/// [`EAGER_KEPT`]).
fn eager_cache() -> &'static Mutex<HashMap<EagerKey, Function>> {
    static CACHE: OnceLock<Mutex<HashMap<EagerKey, Function>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// How many one-op functions the eager cache holds.
pub fn eager_cache_size() -> usize {
    eager_cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .len()
}

/// Runs op `name` on concrete tensors (interpreted). An error names `site`
/// (the Python line that ran the op) as its node's creation site: the
/// one-op function is cached, so its nodes carry the site of no call.
pub fn eager(
    name: &str,
    inputs: &[Tensor],
    a: &Attrs,
    site: Option<Site>,
) -> Result<Vec<Tensor>, Error> {
    if inputs.is_empty() {
        return Err(Error::invalid(format!("{name} needs at least one tensor")));
    }
    let key: EagerKey = (
        name.to_string(),
        a.clone(),
        inputs.iter().map(Tensor::ty).collect(),
    );
    let f = {
        let mut cache = eager_cache().lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= EAGER_KEPT && !cache.contains_key(&key) {
            cache.clear();
        }
        cache
            .entry(key)
            .or_insert_with(|| {
                let (op, attrs) = (name.to_string(), a.clone());
                function(move |args: &[Sym]| match apply(&op, args, &attrs) {
                    Ok(out) => out,
                    Err(e) => {
                        if let Some(first) = args.first() {
                            first.graph().fail(e);
                        }
                        Vec::new()
                    }
                })
                .name(name.to_string())
            })
            .clone()
    };
    f.call(inputs).map_err(|e| match (site, e.detail()) {
        (Some(site), Some(d)) if d.node.is_some() => {
            let mut d = d.clone();
            if let Some(node) = d.node.as_mut() {
                node.site = site;
            }
            Error::new(e.code(), d)
        }
        _ => e,
    })
}

//! Shape and dtype inference: one function per op family, used by the
//! builder (so an ill-typed graph cannot be built) and by the verifier.

use crate::{
    BinaryOp, CmpOp, DType, Dim, DynamicOp, Op, ReduceOp, Region, Shape, TensorType, UnaryOp,
};

/// Inference failure: a message; the caller attaches the node.
pub type InferResult<T> = std::result::Result<T, String>;

/// Infers the result types of `op` applied to operands of types `ins`.
/// Parameters and callbacks have declared types and are not inferred.
pub fn infer(op: &Op, ins: &[&TensorType]) -> InferResult<Vec<TensorType>> {
    if !takes_strings(op)
        && let Some(i) = ins.iter().position(|t| t.dtype == DType::String)
    {
        return Err(format!(
            "operand {i} is a string; strings are opaque and only parameters, constants, results and callbacks may use them"
        ));
    }
    let ty = match op {
        Op::Parameter { .. } | Op::Callback(_) => {
            return Err(format!(
                "{} has declared result types and is not inferred",
                op.name()
            ));
        }
        Op::Constant(lit) => {
            arity(ins, 0)?;
            lit.ty()
        }
        Op::Iota { dtype, dims, dim } => {
            arity(ins, 0)?;
            if !(dtype.is_numeric()) {
                return Err(format!("iota needs a numeric dtype, got {dtype}"));
            }
            if *dim >= dims.len() {
                return Err(format!(
                    "iota dimension {dim} is out of range for rank {}",
                    dims.len()
                ));
            }
            TensorType::known(*dtype, dims)
        }
        Op::Unary(u) => {
            arity(ins, 1)?;
            unary(*u, ins[0])?
        }
        Op::Binary(b) => {
            arity(ins, 2)?;
            binary(*b, ins[0], ins[1])?
        }
        Op::Compare(c) => {
            arity(ins, 2)?;
            same_dtype(ins[0], ins[1])?;
            let ordering = match c {
                CmpOp::Eq | CmpOp::Ne => false,
                CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => true,
            };
            if ins[0].dtype.is_complex() && ordering {
                return Err(format!(
                    "compare {} is not defined on {}: complex numbers are unordered",
                    c.name(),
                    ins[0].dtype
                ));
            }
            TensorType::new(
                DType::Bool,
                elementwise_shape(&ins[0].shape, &ins[1].shape)?,
            )
        }
        Op::Select => {
            arity(ins, 3)?;
            if ins[0].dtype != DType::Bool {
                return Err(format!("select predicate must be bool, got {}", ins[0]));
            }
            same_dtype(ins[1], ins[2])?;
            let shape = merge_shapes(&ins[1].shape, &ins[2].shape)?;
            if ins[0].shape.rank() != Some(0) {
                merge_shapes(&ins[0].shape, &shape)?;
            }
            TensorType::new(ins[1].dtype, shape)
        }
        Op::Clamp => {
            arity(ins, 3)?;
            same_dtype(ins[0], ins[1])?;
            same_dtype(ins[0], ins[2])?;
            if !ins[0].dtype.is_real() {
                return Err(format!(
                    "clamp needs an integer or real float dtype, got {}",
                    ins[0].dtype
                ));
            }
            for b in &ins[1..] {
                if b.shape.rank() != Some(0) {
                    merge_shapes(&ins[0].shape, &b.shape)?;
                }
            }
            ins[0].clone()
        }
        Op::Convert(to) => {
            arity(ins, 1)?;
            if *to == DType::String {
                return Err("cannot convert to string".into());
            }
            TensorType::new(*to, ins[0].shape.clone())
        }
        Op::BroadcastInDim { shape, dims } => {
            arity(ins, 1)?;
            broadcast_in_dim(ins[0], shape, dims)?
        }
        Op::Reshape(shape) => {
            arity(ins, 1)?;
            reshape(ins[0], shape)?
        }
        Op::Transpose(perm) => {
            arity(ins, 1)?;
            let d = ranked(ins[0])?;
            check_perm(perm, d.len())?;
            TensorType::new(
                ins[0].dtype,
                Shape::Ranked(perm.iter().map(|&p| d[p]).collect()),
            )
        }
        Op::Slice {
            start,
            limit,
            stride,
        } => {
            arity(ins, 1)?;
            slice(ins[0], start, limit, stride)?
        }
        Op::Concatenate { axis } => concatenate(ins, *axis)?,
        Op::Pad {
            low,
            high,
            interior,
        } => {
            arity(ins, 2)?;
            pad(ins[0], ins[1], low, high, interior)?
        }
        Op::Reverse(axes) => {
            arity(ins, 1)?;
            let d = ranked(ins[0])?;
            check_axes(axes, d.len())?;
            ins[0].clone()
        }
        Op::Reduce { op, axes, keepdims } => {
            arity(ins, 1)?;
            reduce(*op, ins[0], axes, *keepdims)?
        }
        Op::ArgMax { axis, index_dtype } | Op::ArgMin { axis, index_dtype } => {
            arity(ins, 1)?;
            let d = ranked(ins[0])?;
            if !ins[0].dtype.is_real() {
                return Err(format!(
                    "{} needs an integer or real float operand, got {}",
                    op.name(),
                    ins[0].dtype
                ));
            }
            if !matches!(index_dtype, DType::I32 | DType::I64) {
                return Err(format!(
                    "index dtype must be int32 or int64, got {index_dtype}"
                ));
            }
            if *axis >= d.len() {
                return Err(format!("axis {axis} is out of range for {}", ins[0]));
            }
            if d[*axis] == Some(0) {
                return Err(format!(
                    "{} over an empty axis {axis} of {} has no answer",
                    op.name(),
                    ins[0]
                ));
            }
            let mut out = d.to_vec();
            out.remove(*axis);
            TensorType::new(*index_dtype, Shape::Ranked(out))
        }
        Op::Cumsum { axis, .. } => {
            arity(ins, 1)?;
            let d = ranked(ins[0])?;
            if !ins[0].dtype.is_numeric() {
                return Err(format!("cumsum needs a numeric operand, got {}", ins[0]));
            }
            if *axis >= d.len() {
                return Err(format!("axis {axis} is out of range for {}", ins[0]));
            }
            ins[0].clone()
        }
        Op::ArgSort {
            axis,
            index_dtype,
            descending: _,
        } => {
            arity(ins, 1)?;
            let d = ranked(ins[0])?;
            if !ins[0].dtype.is_real() && ins[0].dtype != DType::Bool {
                return Err(format!(
                    "argsort needs a bool, integer or real float operand, got {}",
                    ins[0].dtype
                ));
            }
            if *axis >= d.len() {
                return Err(format!("axis {axis} is out of range for {}", ins[0]));
            }
            let fits = match index_dtype {
                DType::I32 => d[*axis].is_none_or(|n| i32::try_from(n).is_ok()),
                DType::I64 => true,
                DType::Bool
                | DType::I8
                | DType::I16
                | DType::U8
                | DType::U16
                | DType::U32
                | DType::U64
                | DType::F16
                | DType::BF16
                | DType::F32
                | DType::F64
                | DType::C64
                | DType::C128
                | DType::String => {
                    return Err(format!(
                        "index dtype must be int32 or int64, got {index_dtype}"
                    ));
                }
            };
            if !fits {
                return Err(format!(
                    "argsort of {} along axis {axis}: its indices do not fit int32",
                    ins[0]
                ));
            }
            TensorType::new(*index_dtype, ins[0].shape.clone())
        }
        Op::DotGeneral(dd) => {
            arity(ins, 2)?;
            dot_general(ins[0], ins[1], dd)?
        }
        Op::Take { axis } => {
            arity(ins, 2)?;
            let d = ranked(ins[0])?;
            if !ins[1].dtype.is_int() {
                return Err(format!("take indices must be integers, got {}", ins[1]));
            }
            if *axis >= d.len() {
                return Err(format!("axis {axis} is out of range for {}", ins[0]));
            }
            let idx = ranked(ins[1])?;
            let mut out = d[..*axis].to_vec();
            out.extend_from_slice(idx);
            out.extend_from_slice(&d[axis + 1..]);
            TensorType::new(ins[0].dtype, Shape::Ranked(out))
        }
        Op::DynamicSlice { sizes } => dynamic_slice(ins, sizes)?,
        Op::DynamicUpdateSlice => dynamic_update_slice(ins)?,
        Op::Scatter { axis, combiner } => scatter(ins, *axis, *combiner)?,
        Op::BitcastConvert(to) => {
            arity(ins, 1)?;
            bitcast_convert(ins[0], *to)?
        }
        Op::Dynamic(d) => dynamic(d, ins)?,
        Op::While { cond, body } => return while_types(cond, body, ins),
        Op::Case { branches } => return case_types(branches, ins),
        Op::StopGradient => {
            arity(ins, 1)?;
            ins[0].clone()
        }
        Op::CustomVjp { inputs, body, vjp } => return custom_vjp_types(*inputs, body, vjp, ins),
    };
    Ok(vec![ty])
}

fn types_str(ts: &[TensorType]) -> String {
    let parts: Vec<String> = ts.iter().map(|t| t.to_string()).collect();
    format!("({})", parts.join(", "))
}

/// A region's parameters must be the values passed in, exactly.
fn check_params(region: &Region, what: &str, ins: &[&TensorType]) -> InferResult<()> {
    let params = region.param_types();
    if params.len() != ins.len() {
        return Err(format!(
            "the {what} takes {} value(s), but {} are passed in",
            params.len(),
            ins.len()
        ));
    }
    for (i, (p, t)) in params.iter().zip(ins).enumerate() {
        if p != *t {
            return Err(format!(
                "the {what}'s parameter {i} is {p}, but the value passed in is {t}"
            ));
        }
    }
    Ok(())
}

fn while_types(cond: &Region, body: &Region, ins: &[&TensorType]) -> InferResult<Vec<TensorType>> {
    check_params(cond, "while condition", ins)?;
    check_params(body, "while body", ins)?;
    let pred = cond.output_types();
    if pred.len() != 1 || pred[0] != TensorType::known(DType::Bool, &[]) {
        return Err(format!(
            "the while condition must return one bool[], not {}",
            types_str(&pred)
        ));
    }
    let next = body.output_types();
    if next.len() != ins.len() {
        return Err(format!(
            "the while body returns {} value(s), but the loop carries {}",
            next.len(),
            ins.len()
        ));
    }
    for (i, (n, t)) in next.iter().zip(ins).enumerate() {
        if n != *t {
            return Err(format!(
                "the while body returns {n} for carry {i}, which is {t}: a carry keeps its type"
            ));
        }
    }
    Ok(ins.iter().map(|t| (*t).clone()).collect())
}

fn case_types(branches: &[Region], ins: &[&TensorType]) -> InferResult<Vec<TensorType>> {
    let Some((index, args)) = ins.split_first() else {
        return Err("case needs a branch index operand".into());
    };
    if **index != TensorType::known(DType::I32, &[]) {
        return Err(format!("the branch index must be int32[], not {index}"));
    }
    let Some(first) = branches.first() else {
        return Err("case needs at least one branch".into());
    };
    let out = first.output_types();
    for (b, region) in branches.iter().enumerate() {
        check_params(region, &format!("branch {b}"), args)?;
        let got = region.output_types();
        if got != out {
            return Err(format!(
                "branch {b} returns {}, but branch 0 returns {}: every branch must return the same types",
                types_str(&got),
                types_str(&out)
            ));
        }
    }
    Ok(out)
}

fn custom_vjp_types(
    inputs: usize,
    body: &Region,
    vjp: &Region,
    ins: &[&TensorType],
) -> InferResult<Vec<TensorType>> {
    if inputs > ins.len() {
        return Err(format!(
            "custom_vjp has {inputs} inputs but only {} operands",
            ins.len()
        ));
    }
    check_params(body, "custom_vjp body", ins)?;
    let out = body.output_types();
    let mut args: Vec<TensorType> = ins.iter().map(|t| (*t).clone()).collect();
    args.extend(out.iter().cloned());
    args.extend(out.iter().filter(|t| t.dtype.is_float()).cloned());
    let args: Vec<&TensorType> = args.iter().collect();
    check_params(
        vjp,
        "custom_vjp gradient (operands, results, cotangents)",
        &args,
    )?;
    let want: Vec<TensorType> = (ins[..inputs].iter())
        .filter(|t| t.dtype.is_float())
        .map(|t| (*t).clone())
        .collect();
    let got = vjp.output_types();
    if got != want {
        return Err(format!(
            "the gradient returns {}, but the real floating inputs are {}: it must return one cotangent per real floating input",
            types_str(&got),
            types_str(&want)
        ));
    }
    Ok(out)
}

/// The shape of a dynamic elementwise op's result: the broadcast of its
/// operands' shapes where both ranks are known (dims known where either
/// side knows them), else unranked.
fn dynamic_broadcast(a: &TensorType, b: &TensorType) -> InferResult<Shape> {
    match (a.shape.rank(), b.shape.rank()) {
        (Some(_), Some(_)) => broadcast_shapes(&a.shape, &b.shape),
        _ => Ok(Shape::Unranked),
    }
}

/// The type of a [`DynamicOp`]: what is known before its operands' ranks
/// are (dtypes are checked now; shapes when it is expanded).
fn dynamic(d: &DynamicOp, ins: &[&TensorType]) -> InferResult<TensorType> {
    let same = |ins: &[&TensorType]| -> InferResult<DType> {
        arity(ins, 2)?;
        same_dtype(ins[0], ins[1])?;
        Ok(ins[0].dtype)
    };
    Ok(match d {
        DynamicOp::Binary(b) => {
            let dt = same(ins)?;
            let s = TensorType::scalar(dt);
            let t = binary(*b, &s, &s)?;
            TensorType::new(t.dtype, dynamic_broadcast(ins[0], ins[1])?)
        }
        DynamicOp::Compare(c) => {
            let s = TensorType::scalar(same(ins)?);
            let t = infer(&Op::Compare(*c), &[&s, &s])?.remove(0);
            TensorType::new(t.dtype, dynamic_broadcast(ins[0], ins[1])?)
        }
        DynamicOp::Reduce { op, axes, keepdims } => {
            arity(ins, 1)?;
            reduce(*op, &TensorType::scalar(ins[0].dtype), &[], false)?;
            let shape = if axes.is_none() && !keepdims {
                Shape::scalar()
            } else {
                Shape::Unranked
            };
            TensorType::new(ins[0].dtype, shape)
        }
        DynamicOp::Arg { .. } => {
            arity(ins, 1)?;
            TensorType::new(DType::I64, Shape::Unranked)
        }
        DynamicOp::MatMul => TensorType::new(same(ins)?, Shape::Unranked),
        DynamicOp::Transpose(perm) => {
            arity(ins, 1)?;
            TensorType::new(ins[0].dtype, Shape::Ranked(vec![None; perm.len()]))
        }
        DynamicOp::Select => {
            arity(ins, 3)?;
            if ins[0].dtype != DType::Bool {
                return Err(format!("select predicate must be bool, got {}", ins[0]));
            }
            same_dtype(ins[1], ins[2])?;
            let shape = match dynamic_broadcast(ins[0], ins[1])? {
                Shape::Unranked => Shape::Unranked,
                s => dynamic_broadcast(&TensorType::new(ins[1].dtype, s), ins[2])?,
            };
            TensorType::new(ins[1].dtype, shape)
        }
        DynamicOp::BroadcastTo(dims) => {
            arity(ins, 1)?;
            TensorType::known(ins[0].dtype, dims)
        }
        DynamicOp::Slice {
            start,
            limit,
            stride,
        } => {
            arity(ins, 1)?;
            if start.len() != limit.len() || start.len() != stride.len() {
                return Err("slice needs one start, limit and stride per dim".into());
            }
            TensorType::new(ins[0].dtype, Shape::Ranked(vec![None; start.len()]))
        }
        DynamicOp::Reverse(_) => {
            arity(ins, 1)?;
            TensorType::new(ins[0].dtype, Shape::Unranked)
        }
        DynamicOp::StridedSlice { begin, end, step } => {
            arity(ins, 1)?;
            let shape = crate::builder::strided_slice_shape(&ins[0].shape, begin, end, step)?;
            TensorType::new(ins[0].dtype, shape)
        }
        DynamicOp::Concatenate { .. } => {
            let first = ins
                .first()
                .ok_or("concatenate needs at least one operand")?;
            for t in &ins[1..] {
                same_dtype(first, t)?;
            }
            TensorType::new(first.dtype, Shape::Unranked)
        }
        DynamicOp::Take { .. } => {
            arity(ins, 2)?;
            if !ins[1].dtype.is_int() {
                return Err(format!("take indices must be integers, got {}", ins[1]));
            }
            TensorType::new(ins[0].dtype, Shape::Unranked)
        }
        DynamicOp::TakeAlongAxis { .. } => {
            arity(ins, 2)?;
            if !ins[1].dtype.is_int() {
                return Err(format!(
                    "take_along_axis indices must be integers, got {}",
                    ins[1]
                ));
            }
            // The indices' shape (x's but along the axis).
            TensorType::new(ins[0].dtype, ins[1].shape.clone())
        }
    })
}

fn arity(ins: &[&TensorType], n: usize) -> InferResult<()> {
    if ins.len() == n {
        Ok(())
    } else {
        Err(format!("expects {n} operand(s), got {}", ins.len()))
    }
}

fn same_dtype(a: &TensorType, b: &TensorType) -> InferResult<()> {
    if a.dtype == b.dtype {
        Ok(())
    } else {
        Err(format!(
            "operand dtypes differ: {a} vs {b} (binary ops need equal dtypes; cast one operand with convert/cast)"
        ))
    }
}

fn ranked(t: &TensorType) -> InferResult<&[Dim]> {
    t.shape.dims().ok_or_else(|| {
        format!("operand {t} has unknown rank; declare its shape (set_shape / output_shapes)")
    })
}

/// Merges two shapes that must describe the same tensor (elementwise ops);
/// unknown dims take the known side.
pub fn merge_shapes(a: &Shape, b: &Shape) -> InferResult<Shape> {
    match (a, b) {
        (Shape::Unranked, s) | (s, Shape::Unranked) => Ok(s.clone()),
        (Shape::Ranked(x), Shape::Ranked(y)) => {
            if x.len() != y.len() {
                return Err(format!("operand shapes {a} and {b} differ in rank"));
            }
            x.iter()
                .zip(y)
                .map(|(p, q)| match (p, q) {
                    (Some(m), Some(n)) if m != n => {
                        Err(format!("operand shapes {a} and {b} are incompatible"))
                    }
                    (Some(m), _) | (None, Some(m)) => Ok(Some(*m)),
                    (None, None) => Ok(None),
                })
                .collect::<InferResult<Vec<_>>>()
                .map(Shape::Ranked)
        }
    }
}

/// The result shape of a two-operand elementwise op: equal shapes, or a
/// rank-0 operand that is splat over the other (the builder makes every
/// other broadcast explicit with `broadcast_in_dim`).
pub fn elementwise_shape(a: &Shape, b: &Shape) -> InferResult<Shape> {
    match (a.rank(), b.rank()) {
        (Some(0), _) => Ok(b.clone()),
        (_, Some(0)) => Ok(a.clone()),
        _ => merge_shapes(a, b),
    }
}

/// NumPy's broadcasting rule: align trailing dims; a dim of 1 stretches.
/// A dim unknown at trace time is assumed to match the other side.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> InferResult<Shape> {
    let (Some(x), Some(y)) = (a.dims(), b.dims()) else {
        return merge_shapes(a, b);
    };
    let rank = x.len().max(y.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let p = if i + x.len() >= rank {
            x[i + x.len() - rank]
        } else {
            Some(1)
        };
        let q = if i + y.len() >= rank {
            y[i + y.len() - rank]
        } else {
            Some(1)
        };
        out.push(match (p, q) {
            (Some(1), d) | (d, Some(1)) => d,
            (Some(m), Some(n)) if m == n => Some(m),
            (Some(_), Some(_)) => {
                return Err(format!("shapes {a} and {b} cannot be broadcast together"));
            }
            (Some(m), None) | (None, Some(m)) => Some(m),
            (None, None) => None,
        });
    }
    Ok(Shape::Ranked(out))
}

/// True for the ops strings may flow through (strings are opaque):
/// callbacks, and parameters and constants, which have no operands.
fn takes_strings(op: &Op) -> bool {
    match op {
        Op::Parameter { .. } | Op::Constant(_) | Op::Callback(_) => true,
        Op::Iota { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BroadcastInDim { .. }
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Concatenate { .. }
        | Op::Pad { .. }
        | Op::Reverse(_)
        | Op::Reduce { .. }
        | Op::ArgMax { .. }
        | Op::ArgMin { .. }
        | Op::ArgSort { .. }
        | Op::Cumsum { .. }
        | Op::DotGeneral(_)
        | Op::Take { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Scatter { .. }
        | Op::BitcastConvert(_)
        | Op::Dynamic(_)
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient
        | Op::CustomVjp { .. } => false,
    }
}

fn unary(u: UnaryOp, t: &TensorType) -> InferResult<TensorType> {
    use UnaryOp::*;
    let d = t.dtype;
    let ok = match u {
        Neg | Abs | Sign | Square => d.is_numeric(),
        Floor | Ceil | Round | Erf | IsFinite => d.is_float(),
        Sqrt | Rsqrt | Exp | Expm1 | Log | Log1p | Tanh | Logistic | Sin | Cos | Reciprocal => {
            d.is_inexact()
        }
        Not => d == DType::Bool || d.is_int(),
    };
    if !ok {
        return Err(format!("{} is not defined on {d}", u.name()));
    }
    Ok(match u {
        IsFinite => TensorType::new(DType::Bool, t.shape.clone()),
        Abs => TensorType::new(d.real_part(), t.shape.clone()),
        Neg | Sign | Floor | Ceil | Round | Sqrt | Rsqrt | Exp | Expm1 | Log | Log1p | Tanh
        | Logistic | Sin | Cos | Erf | Not | Square | Reciprocal => t.clone(),
    })
}

fn binary(b: BinaryOp, x: &TensorType, y: &TensorType) -> InferResult<TensorType> {
    use BinaryOp::*;
    same_dtype(x, y)?;
    let d = x.dtype;
    let ok = match b {
        Add | Sub | Mul | Div | Pow => d.is_numeric(),
        Rem | Max | Min => d.is_real(),
        And | Or | Xor => d == DType::Bool || d.is_int(),
        ShiftLeft | ShiftRightLogical | ShiftRightArithmetic => d.is_int(),
    };
    if !ok {
        return Err(format!("{} is not defined on {d}", b.name()));
    }
    Ok(TensorType::new(d, elementwise_shape(&x.shape, &y.shape)?))
}

/// The start-index operands of `dynamic_slice`/`dynamic_update_slice`:
/// one scalar integer per dim of `x`, all of one dtype (int32 or int64).
fn start_indices(op: &str, x: &TensorType, starts: &[&TensorType]) -> InferResult<()> {
    let rank = ranked(x)?.len();
    if starts.len() != rank {
        return Err(format!(
            "{op} of {x} needs {rank} start index operand(s), one per dim, got {}",
            starts.len()
        ));
    }
    for (i, t) in starts.iter().enumerate() {
        if !matches!(t.dtype, DType::I32 | DType::I64) || t.shape.rank() != Some(0) {
            return Err(format!(
                "{op}: start index {i} must be an int32[] or int64[] scalar, got {t}"
            ));
        }
        if t.dtype != starts[0].dtype {
            return Err(format!(
                "{op}: start indices must share one dtype, but index 0 is {} and index {i} is {}",
                starts[0], t
            ));
        }
    }
    Ok(())
}

fn dynamic_slice(ins: &[&TensorType], sizes: &[usize]) -> InferResult<TensorType> {
    let Some((x, starts)) = ins.split_first() else {
        return Err("dynamic_slice needs an operand".into());
    };
    let d = ranked(x)?;
    if sizes.len() != d.len() {
        return Err(format!(
            "dynamic_slice of {x} needs {} sizes, one per dim, got {sizes:?}",
            d.len()
        ));
    }
    start_indices("dynamic_slice", x, starts)?;
    for (i, (&s, n)) in sizes.iter().zip(d).enumerate() {
        if let Some(n) = n
            && s > *n
        {
            return Err(format!(
                "dynamic_slice size {s} exceeds size {n} of dim {i} of {x}"
            ));
        }
    }
    Ok(TensorType::known(x.dtype, sizes))
}

fn dynamic_update_slice(ins: &[&TensorType]) -> InferResult<TensorType> {
    let [x, u, starts @ ..] = ins else {
        return Err("dynamic_update_slice needs an operand and an update".into());
    };
    let (d, ud) = (ranked(x)?, ranked(u)?);
    if x.dtype != u.dtype {
        return Err(format!(
            "dynamic_update_slice: update {u} must have the dtype of operand {x}"
        ));
    }
    if d.len() != ud.len() {
        return Err(format!(
            "dynamic_update_slice: update {u} must have the rank of operand {x}"
        ));
    }
    start_indices("dynamic_update_slice", x, starts)?;
    for (i, (m, n)) in ud.iter().zip(d).enumerate() {
        if let (Some(m), Some(n)) = (m, n)
            && m > n
        {
            return Err(format!(
                "dynamic_update_slice: update {u} is larger than operand {x} in dim {i}"
            ));
        }
    }
    Ok((*x).clone())
}

fn scatter(ins: &[&TensorType], axis: usize, combiner: crate::Combiner) -> InferResult<TensorType> {
    arity(ins, 3)?;
    let (x, idx, upd) = (ins[0], ins[1], ins[2]);
    let d = ranked(x)?;
    if !idx.dtype.is_int() {
        return Err(format!("scatter indices must be integers, got {idx}"));
    }
    if axis >= d.len() {
        return Err(format!("axis {axis} is out of range for {x}"));
    }
    if upd.dtype != x.dtype {
        return Err(format!(
            "scatter: updates {upd} must have the dtype of operand {x}"
        ));
    }
    let ok = match combiner {
        crate::Combiner::Set => true,
        crate::Combiner::Add => x.dtype.is_numeric(),
        crate::Combiner::Min | crate::Combiner::Max => x.dtype.is_real(),
    };
    if !ok {
        return Err(format!(
            "scatter combiner {} is not defined on {}",
            combiner.name(),
            x.dtype
        ));
    }
    let mut want = d[..axis].to_vec();
    want.extend_from_slice(ranked(idx)?);
    want.extend_from_slice(&d[axis + 1..]);
    let want = Shape::Ranked(want);
    merge_shapes(&want, &upd.shape).map_err(|_| {
        format!(
            "scatter: updates {upd} must have shape {want} (x's dims with dim {axis} replaced by the indices' shape {})",
            idx.shape
        )
    })?;
    Ok(x.clone())
}

fn bitcast_convert(t: &TensorType, to: DType) -> InferResult<TensorType> {
    let from = t.dtype;
    let ok = from != DType::Bool
        && to != DType::Bool
        && to != DType::String
        && from.size() == to.size()
        && from.is_complex() == to.is_complex();
    if !ok {
        return Err(format!(
            "bitcast_convert from {from} to {to}: both must be non-bool types of one element size ({} vs {} bytes), and complex only to complex",
            from.size(),
            to.size()
        ));
    }
    Ok(TensorType::new(to, t.shape.clone()))
}

fn broadcast_in_dim(t: &TensorType, shape: &Shape, dims: &[usize]) -> InferResult<TensorType> {
    let from = ranked(t)?;
    let Some(to) = shape.dims() else {
        return Err("broadcast_in_dim needs a ranked result shape".into());
    };
    if from.len() != dims.len() {
        return Err(format!(
            "broadcast_in_dim: operand {t} has rank {}, but {} dims were given",
            from.len(),
            dims.len()
        ));
    }
    if dims.windows(2).any(|w| w[0] >= w[1]) || dims.iter().any(|&d| d >= to.len()) {
        return Err(format!(
            "broadcast_in_dim: dims {dims:?} must be strictly increasing and below rank {}",
            to.len()
        ));
    }
    let mut out = to.to_vec();
    for (i, &d) in dims.iter().enumerate() {
        match (from[i], to[d]) {
            (Some(1), _) => {}
            (Some(m), Some(n)) if m != n => {
                return Err(format!(
                    "broadcast_in_dim: operand dim {i} of size {m} cannot become size {n}"
                ));
            }
            (f, None) => out[d] = f,
            _ => {}
        }
    }
    for (d, o) in out.iter().enumerate() {
        if o.is_none() && !dims.contains(&d) {
            return Err(format!(
                "broadcast_in_dim: result dim {d} is unknown and no operand dim maps to it"
            ));
        }
    }
    Ok(TensorType::new(t.dtype, Shape::Ranked(out)))
}

fn reshape(t: &TensorType, shape: &Shape) -> InferResult<TensorType> {
    let Some(to) = shape.dims() else {
        return Err("reshape needs a ranked result shape".into());
    };
    let unknown = to.iter().filter(|d| d.is_none()).count();
    if unknown > 1 {
        return Err(format!(
            "reshape to {shape}: at most one dim may be unknown"
        ));
    }
    let Some(known) = to
        .iter()
        .flatten()
        .try_fold(1usize, |a, d| a.checked_mul(*d))
    else {
        return Err(format!(
            "reshape to {shape}: the number of elements overflows"
        ));
    };
    if let Some(n) = t.shape.num_elements() {
        if unknown == 0 && known != n {
            return Err(format!(
                "cannot reshape {t} ({n} elements) to {shape} ({known} elements)"
            ));
        }
        if unknown == 1 {
            if known == 0 || n % known != 0 {
                return Err(format!("cannot reshape {t} ({n} elements) to {shape}"));
            }
            let filled = to.iter().map(|d| Some(d.unwrap_or(n / known))).collect();
            return Ok(TensorType::new(t.dtype, Shape::Ranked(filled)));
        }
    }
    Ok(TensorType::new(t.dtype, shape.clone()))
}

fn check_perm(perm: &[usize], rank: usize) -> InferResult<()> {
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(format!(
            "permutation {perm:?} has length {}, rank is {rank}",
            perm.len()
        ));
    }
    for &p in perm {
        if p >= rank || std::mem::replace(&mut seen[p], true) {
            return Err(format!("{perm:?} is not a permutation of 0..{rank}"));
        }
    }
    Ok(())
}

fn check_axes(axes: &[usize], rank: usize) -> InferResult<()> {
    if axes.windows(2).any(|w| w[0] >= w[1]) || axes.iter().any(|&a| a >= rank) {
        return Err(format!(
            "axes {axes:?} must be sorted, unique and below rank {rank}"
        ));
    }
    Ok(())
}

fn slice(
    t: &TensorType,
    start: &[usize],
    limit: &[usize],
    stride: &[usize],
) -> InferResult<TensorType> {
    let d = ranked(t)?;
    if start.len() != d.len() || limit.len() != d.len() || stride.len() != d.len() {
        return Err(format!(
            "slice of {t} needs start/limit/stride of length {}",
            d.len()
        ));
    }
    let mut out = Vec::with_capacity(d.len());
    for i in 0..d.len() {
        if stride[i] == 0 {
            return Err(format!("slice stride in dim {i} must be at least 1"));
        }
        if start[i] > limit[i] {
            return Err(format!(
                "slice start {} exceeds limit {} in dim {i}",
                start[i], limit[i]
            ));
        }
        if let Some(n) = d[i]
            && limit[i] > n
        {
            return Err(format!(
                "slice limit {} exceeds size {n} of dim {i} of {t}",
                limit[i]
            ));
        }
        out.push(Some((limit[i] - start[i]).div_ceil(stride[i])));
    }
    Ok(TensorType::new(t.dtype, Shape::Ranked(out)))
}

fn concatenate(ins: &[&TensorType], axis: usize) -> InferResult<TensorType> {
    let Some(first) = ins.first() else {
        return Err("concatenate needs at least one operand".into());
    };
    let d0 = ranked(first)?;
    if axis >= d0.len() {
        return Err(format!("axis {axis} is out of range for {first}"));
    }
    let mut out = d0.to_vec();
    for (k, t) in ins.iter().enumerate().skip(1) {
        same_dtype(first, t)?;
        let d = ranked(t)?;
        if d.len() != d0.len() {
            return Err(format!(
                "concatenate operand {k} {t} differs in rank from {first}"
            ));
        }
        for i in 0..d.len() {
            if i == axis {
                out[i] = match (out[i], d[i]) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
            } else {
                match (out[i], d[i]) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(format!(
                            "concatenate operand {k} {t} differs from {first} in dim {i}"
                        ));
                    }
                    (None, b) => out[i] = b,
                    _ => {}
                }
            }
        }
    }
    Ok(TensorType::new(first.dtype, Shape::Ranked(out)))
}

fn pad(
    t: &TensorType,
    v: &TensorType,
    low: &[i64],
    high: &[i64],
    interior: &[usize],
) -> InferResult<TensorType> {
    let d = ranked(t)?;
    same_dtype(t, v)?;
    if v.shape.rank() != Some(0) {
        return Err(format!("pad value must be a scalar, got {v}"));
    }
    if low.len() != d.len() || high.len() != d.len() || interior.len() != d.len() {
        return Err(format!(
            "pad of {t} needs low/high/interior of length {}",
            d.len()
        ));
    }
    let mut out = Vec::with_capacity(d.len());
    for i in 0..d.len() {
        out.push(match d[i] {
            None => None,
            Some(n) => {
                let size = i64::try_from(interior[i])
                    .ok()
                    .and_then(|gap| (n.max(1) as i64 - 1).checked_mul(gap))
                    .and_then(|gaps| gaps.checked_add(n as i64))
                    .and_then(|inner| inner.checked_add(low[i]))
                    .and_then(|s| s.checked_add(high[i]))
                    .ok_or_else(|| {
                        format!(
                            "pad of {n} elements by low {}, high {}, interior {} in dim {i} \
                             overflows a 64-bit size",
                            low[i], high[i], interior[i]
                        )
                    })?;
                if size < 0 {
                    return Err(pad_too_small(n, low[i], high[i], size, i));
                }
                Some(size as usize)
            }
        });
    }
    Ok(TensorType::new(t.dtype, Shape::Ranked(out)))
}

fn reduce(op: ReduceOp, t: &TensorType, axes: &[usize], keepdims: bool) -> InferResult<TensorType> {
    let d = ranked(t)?;
    check_axes(axes, d.len())?;
    let ok = match op {
        ReduceOp::Sum | ReduceOp::Prod => t.dtype.is_numeric(),
        ReduceOp::Max | ReduceOp::Min => t.dtype.is_real(),
        ReduceOp::And | ReduceOp::Or => t.dtype == DType::Bool,
    };
    if !ok {
        return Err(format!(
            "reduce_{} is not defined on {}",
            op.name(),
            t.dtype
        ));
    }
    let out = d
        .iter()
        .enumerate()
        .filter_map(|(i, &n)| match (axes.contains(&i), keepdims) {
            (true, true) => Some(Some(1)),
            (true, false) => None,
            (false, _) => Some(n),
        })
        .collect();
    Ok(TensorType::new(t.dtype, Shape::Ranked(out)))
}

fn dot_general(l: &TensorType, r: &TensorType, dd: &crate::DotDims) -> InferResult<TensorType> {
    same_dtype(l, r)?;
    if !l.dtype.is_numeric() {
        return Err(format!("dot_general is not defined on {}", l.dtype));
    }
    let (ld, rd) = (ranked(l)?, ranked(r)?);
    if dd.lhs_batch.len() != dd.rhs_batch.len() || dd.lhs_contract.len() != dd.rhs_contract.len() {
        return Err("dot_general: batch and contracting dims must pair up".into());
    }
    let check = |dims: &[&[usize]], rank: usize, side: &str| -> InferResult<()> {
        let mut seen = vec![false; rank];
        for &d in dims.iter().flat_map(|d| d.iter()) {
            if d >= rank || std::mem::replace(&mut seen[d], true) {
                return Err(format!(
                    "dot_general: {side} dims {dims:?} must be unique and below rank {rank}"
                ));
            }
        }
        Ok(())
    };
    check(&[&dd.lhs_batch, &dd.lhs_contract], ld.len(), "lhs")?;
    check(&[&dd.rhs_batch, &dd.rhs_contract], rd.len(), "rhs")?;
    let pairs = dd
        .lhs_batch
        .iter()
        .zip(&dd.rhs_batch)
        .chain(dd.lhs_contract.iter().zip(&dd.rhs_contract));
    for (&a, &b) in pairs {
        if let (Some(m), Some(n)) = (ld[a], rd[b])
            && m != n
        {
            return Err(format!(
                "dot_general: lhs dim {a} (size {m}) does not match rhs dim {b} (size {n}) of {l} and {r}"
            ));
        }
    }
    let mut out: Vec<Dim> = dd
        .lhs_batch
        .iter()
        .zip(&dd.rhs_batch)
        .map(|(&a, &b)| ld[a].or(rd[b]))
        .collect();
    for (i, &n) in ld.iter().enumerate() {
        if !dd.lhs_batch.contains(&i) && !dd.lhs_contract.contains(&i) {
            out.push(n);
        }
    }
    for (i, &n) in rd.iter().enumerate() {
        if !dd.rhs_batch.contains(&i) && !dd.rhs_contract.contains(&i) {
            out.push(n);
        }
    }
    Ok(TensorType::new(l.dtype, Shape::Ranked(out)))
}

/// The error of a pad that leaves fewer than no elements in `dim` (of `n`):
/// a crop (negative `low`/`high`, as a slice of a dim of unknown size is
/// traced) larger than the dim.
pub fn pad_too_small(n: usize, low: i64, high: i64, size: i64, dim: usize) -> String {
    if low < 0 || high < 0 {
        format!(
            "cropping {} element(s) from the start and {} from the end of dim {dim}, which \
             has {n}, leaves {size} (a slice of a dim of unknown size, x[a:b], crops a and \
             n - b: the dim is shorter than the slice needs)",
            (-low).max(0),
            (-high).max(0)
        )
    } else {
        format!("pad gives a negative size {size} in dim {dim}")
    }
}

//! The `{name=value, ...}` attributes of the text format: one schema,
//! [`attributes`], walked by the printer ([`write`]) and by the parser
//! ([`read`]), so that an attribute is written and read under one name
//! and as one kind, and an op has both or neither.

use std::convert::Infallible;
use std::fmt::Write as _;

use crate::{
    BinaryOp, CmpOp, Combiner, DotDims, DynamicOp, Error, Op, ReduceOp, Result, Shape, TensorType,
    TextPos, UnaryOp,
};

use super::error_at;

/// An attribute value as the parser found it, before its kind is known.
#[derive(Debug)]
pub(super) enum AttrVal {
    Int(i64),
    Bool(bool),
    /// `[1,?,3]` (`?` is `None`).
    List(Vec<Option<i64>>),
    /// `[*]`.
    Star,
    /// A bare word (`combiner=add`).
    Word(String),
}

/// One way of walking the schema: the writer reads each field, the reader
/// sets it.
trait Attrs {
    type Error;
    /// Visits attribute `name`, held in `field`.
    fn attr<T: AttrKind>(&mut self, name: &'static str, field: &mut T) -> Result<(), Self::Error>;
}

/// The attributes of `op`, in the order they are printed: each one's name
/// and the field holding it, whose type is the attribute's kind. Every
/// other field of an op is carried by its name (`reduce_sum`'s function)
/// or its result type (`convert`'s dtype, `iota`'s shape; see
/// [`blank_op`]); parameters, constants, callbacks and regions have syntax
/// of their own.
fn attributes<A: Attrs>(op: &mut Op, a: &mut A) -> Result<(), A::Error> {
    match op {
        Op::Iota { dim, .. } => a.attr("dim", dim),
        Op::BroadcastInDim { shape, dims } => {
            a.attr("shape", shape)?;
            a.attr("dims", dims)
        }
        Op::Reshape(shape) => a.attr("shape", shape),
        Op::Transpose(perm) => a.attr("perm", perm),
        Op::Slice {
            start,
            limit,
            stride,
        } => {
            a.attr("start", start)?;
            a.attr("limit", limit)?;
            a.attr("stride", stride)
        }
        Op::Concatenate { axis }
        | Op::Take { axis }
        | Op::ArgMax { axis, .. }
        | Op::ArgMin { axis, .. } => a.attr("axis", axis),
        Op::Cumsum {
            axis,
            reverse,
            exclusive,
        } => {
            a.attr("axis", axis)?;
            a.attr("reverse", reverse)?;
            a.attr("exclusive", exclusive)
        }
        Op::ArgSort {
            axis, descending, ..
        } => {
            a.attr("axis", axis)?;
            a.attr("descending", descending)
        }
        Op::Pad {
            low,
            high,
            interior,
        } => {
            a.attr("low", low)?;
            a.attr("high", high)?;
            a.attr("interior", interior)
        }
        Op::Reverse(axes) => a.attr("axes", axes),
        Op::Reduce { axes, keepdims, .. } => {
            a.attr("axes", axes)?;
            a.attr("keepdims", keepdims)
        }
        Op::DotGeneral(d) => {
            a.attr("lhs_batch", &mut d.lhs_batch)?;
            a.attr("rhs_batch", &mut d.rhs_batch)?;
            a.attr("lhs_contract", &mut d.lhs_contract)?;
            a.attr("rhs_contract", &mut d.rhs_contract)
        }
        Op::DynamicSlice { sizes } => a.attr("sizes", sizes),
        Op::Scatter { axis, combiner } => {
            a.attr("axis", axis)?;
            a.attr("combiner", combiner)
        }
        Op::Dynamic(d) => match d {
            DynamicOp::Reduce { axes, keepdims, .. } => {
                a.attr("axes", axes)?;
                a.attr("keepdims", keepdims)
            }
            DynamicOp::Arg { axis, .. }
            | DynamicOp::Concatenate { axis }
            | DynamicOp::Take { axis }
            | DynamicOp::TakeAlongAxis { axis } => a.attr("axis", axis),
            DynamicOp::Transpose(perm) => a.attr("perm", perm),
            DynamicOp::BroadcastTo(dims) => a.attr("shape", dims),
            DynamicOp::Slice {
                start,
                limit,
                stride,
            } => {
                a.attr("start", start)?;
                a.attr("limit", limit)?;
                a.attr("stride", stride)
            }
            DynamicOp::Reverse(axes) => a.attr("axes", axes),
            DynamicOp::StridedSlice { begin, end, step } => {
                a.attr("begin", begin)?;
                a.attr("end", end)?;
                a.attr("step", step)
            }
            DynamicOp::Binary(_)
            | DynamicOp::Compare(_)
            | DynamicOp::MatMul
            | DynamicOp::Select => Ok(()),
        },
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BitcastConvert(_)
        | Op::DynamicUpdateSlice
        | Op::Callback(_)
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient => Ok(()),
        Op::CustomVjp { inputs, .. } => a.attr("inputs", inputs),
    }
}

/// The op named `name` with result type `ty`, its attributes holding
/// placeholders (zero, empty, the first combiner) until [`attributes`]
/// reads them.
fn blank_op(name: &str, pos: TextPos, ty: &TensorType) -> Result<Op> {
    let unknown = || error_at(pos, format!("unknown op '{name}'"));
    if let Some(rest) = name.strip_prefix("unranked_") {
        let d = if let Some(b) = BinaryOp::from_name(rest) {
            DynamicOp::Binary(b)
        } else if let Some(c) = rest.strip_prefix("compare_").and_then(CmpOp::from_name) {
            DynamicOp::Compare(c)
        } else if let Some(r) = rest.strip_prefix("reduce_").and_then(ReduceOp::from_name) {
            DynamicOp::Reduce {
                op: r,
                axes: None,
                keepdims: false,
            }
        } else {
            match rest {
                "argmax" => DynamicOp::Arg { max: true, axis: 0 },
                "argmin" => DynamicOp::Arg {
                    max: false,
                    axis: 0,
                },
                "matmul" => DynamicOp::MatMul,
                "transpose" => DynamicOp::Transpose(vec![]),
                "select" => DynamicOp::Select,
                "broadcast_to" => DynamicOp::BroadcastTo(vec![]),
                "slice" => DynamicOp::Slice {
                    start: vec![],
                    limit: vec![],
                    stride: vec![],
                },
                "reverse" => DynamicOp::Reverse(vec![]),
                "concatenate" => DynamicOp::Concatenate { axis: 0 },
                "take" => DynamicOp::Take { axis: 0 },
                "take_along_axis" => DynamicOp::TakeAlongAxis { axis: 0 },
                "strided_slice" => DynamicOp::StridedSlice {
                    begin: vec![],
                    end: vec![],
                    step: vec![],
                },
                _ => return Err(unknown()),
            }
        };
        return Ok(Op::Dynamic(d));
    }
    if let Some(u) = UnaryOp::from_name(name) {
        return Ok(Op::Unary(u));
    }
    if let Some(b) = BinaryOp::from_name(name) {
        return Ok(Op::Binary(b));
    }
    if let Some(c) = name.strip_prefix("compare_").and_then(CmpOp::from_name) {
        return Ok(Op::Compare(c));
    }
    if let Some(r) = name.strip_prefix("reduce_").and_then(ReduceOp::from_name) {
        return Ok(Op::Reduce {
            op: r,
            axes: vec![],
            keepdims: false,
        });
    }
    Ok(match name {
        "select" => Op::Select,
        "clamp" => Op::Clamp,
        "convert" => Op::Convert(ty.dtype),
        "bitcast_convert" => Op::BitcastConvert(ty.dtype),
        "dynamic_slice" => Op::DynamicSlice { sizes: vec![] },
        "dynamic_update_slice" => Op::DynamicUpdateSlice,
        "stop_gradient" => Op::StopGradient,
        "scatter" => Op::Scatter {
            axis: 0,
            combiner: Combiner::Set,
        },
        "iota" => Op::Iota {
            dtype: ty.dtype,
            dims: ty
                .shape
                .as_known()
                .ok_or_else(|| error_at(pos, "iota needs a static result shape"))?,
            dim: 0,
        },
        "broadcast_in_dim" => Op::BroadcastInDim {
            shape: Shape::Ranked(vec![]),
            dims: vec![],
        },
        "reshape" => Op::Reshape(Shape::Ranked(vec![])),
        "transpose" => Op::Transpose(vec![]),
        "slice" => Op::Slice {
            start: vec![],
            limit: vec![],
            stride: vec![],
        },
        "concatenate" => Op::Concatenate { axis: 0 },
        "take" => Op::Take { axis: 0 },
        "argmax" => Op::ArgMax {
            axis: 0,
            index_dtype: ty.dtype,
        },
        "argmin" => Op::ArgMin {
            axis: 0,
            index_dtype: ty.dtype,
        },
        "cumsum" => Op::Cumsum {
            axis: 0,
            reverse: false,
            exclusive: false,
        },
        "argsort" => Op::ArgSort {
            axis: 0,
            descending: false,
            index_dtype: ty.dtype,
        },
        "pad" => Op::Pad {
            low: vec![],
            high: vec![],
            interior: vec![],
        },
        "reverse" => Op::Reverse(vec![]),
        "dot_general" => Op::DotGeneral(DotDims {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![],
            rhs_contract: vec![],
        }),
        _ => return Err(unknown()),
    })
}

/// Appends ` {name=value, ...}` for `op`'s attributes (nothing when it has
/// none).
pub(super) fn write(op: &Op, out: &mut String) {
    struct Writer<'a> {
        out: &'a mut String,
        count: usize,
    }
    impl Attrs for Writer<'_> {
        type Error = Infallible;
        fn attr<T: AttrKind>(
            &mut self,
            name: &'static str,
            field: &mut T,
        ) -> Result<(), Infallible> {
            self.out.push_str(if self.count == 0 { " {" } else { ", " });
            self.out.push_str(name);
            self.out.push('=');
            field.write(self.out);
            self.count += 1;
            Ok(())
        }
    }
    let mut w = Writer { out, count: 0 };
    // The schema hands out `&mut` fields for the reader; the writer walks a copy.
    let Ok(()) = attributes(&mut op.clone(), &mut w);
    if w.count > 0 {
        w.out.push('}');
    }
}

/// The op named `name` (at `pos`) with result type `ty` and the parsed
/// `attrs`. Each error names the op, the attribute and the position.
pub(super) fn read(
    name: &str,
    pos: TextPos,
    attrs: &[(String, AttrVal, TextPos)],
    ty: &TensorType,
) -> Result<Op> {
    read_into(blank_op(name, pos, ty)?, pos, attrs)
}

/// `op` (a placeholder from the parser) with the attributes read into it.
pub(super) fn read_into(
    mut op: Op,
    pos: TextPos,
    attrs: &[(String, AttrVal, TextPos)],
) -> Result<Op> {
    let name = op.name();
    let name = name.as_str();
    struct Reader<'a> {
        op: &'a str,
        pos: TextPos,
        attrs: &'a [(String, AttrVal, TextPos)],
        used: Vec<bool>,
    }
    impl Attrs for Reader<'_> {
        type Error = Error;
        fn attr<T: AttrKind>(&mut self, name: &'static str, field: &mut T) -> Result<()> {
            let op = self.op;
            let i = self
                .attrs
                .iter()
                .position(|(k, _, _)| k == name)
                .ok_or_else(|| error_at(self.pos, format!("{op} needs attribute '{name}'")))?;
            self.used[i] = true;
            *field = T::read(&self.attrs[i].1).ok_or_else(|| {
                error_at(
                    self.pos,
                    format!("attribute '{name}' of {op} must be {}", T::what()),
                )
            })?;
            Ok(())
        }
    }
    let mut r = Reader {
        op: name,
        pos,
        attrs,
        used: vec![false; attrs.len()],
    };
    attributes(&mut op, &mut r)?;
    if let Some(i) = r.used.iter().position(|u| !u) {
        return Err(error_at(
            attrs[i].2,
            format!("{name} has no attribute '{}'", attrs[i].0),
        ));
    }
    Ok(op)
}

/// A kind of attribute value: how it is written, and how it is read back
/// from what the parser found.
trait AttrKind: Sized {
    /// What a value of the kind looks like, for errors.
    fn what() -> String;
    fn write(&self, out: &mut String);
    fn read(v: &AttrVal) -> Option<Self>;
}

fn write_list<T: std::fmt::Display>(v: &[T], out: &mut String) {
    out.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out.push(']');
}

impl AttrKind for usize {
    fn what() -> String {
        "a non-negative integer".into()
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Int(i) => usize::try_from(*i).ok(),
            AttrVal::Bool(_) | AttrVal::List(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

impl AttrKind for i64 {
    fn what() -> String {
        "an integer".into()
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Int(i) => Some(*i),
            AttrVal::Bool(_) | AttrVal::List(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

impl AttrKind for bool {
    fn what() -> String {
        "true or false".into()
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Bool(b) => Some(*b),
            AttrVal::Int(_) | AttrVal::List(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

impl AttrKind for Vec<usize> {
    fn what() -> String {
        "a list of non-negative integers".into()
    }
    fn write(&self, out: &mut String) {
        write_list(self, out);
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::List(items) => items
                .iter()
                .map(|i| i.and_then(|i| usize::try_from(i).ok()))
                .collect(),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

impl AttrKind for Vec<i64> {
    fn what() -> String {
        "a list of integers".into()
    }
    fn write(&self, out: &mut String) {
        write_list(self, out);
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::List(items) => items.iter().copied().collect(),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

/// Slice bounds: `?` where omitted (`[1,?,-2]`).
impl AttrKind for Vec<Option<i64>> {
    fn what() -> String {
        "a list of integers and ? (omitted)".into()
    }
    fn write(&self, out: &mut String) {
        out.push('[');
        for (i, x) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match x {
                Some(x) => {
                    let _ = write!(out, "{x}");
                }
                None => out.push('?'),
            }
        }
        out.push(']');
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::List(items) => Some(items.clone()),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::Star | AttrVal::Word(_) => None,
        }
    }
}

/// Axes as given, or `[*]` for every axis.
impl AttrKind for Option<Vec<i64>> {
    fn what() -> String {
        Vec::<i64>::what()
    }
    fn write(&self, out: &mut String) {
        match self {
            Some(axes) => axes.write(out),
            None => out.push_str("[*]"),
        }
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Star => Some(None),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::List(_) | AttrVal::Word(_) => {
                Vec::<i64>::read(v).map(Some)
            }
        }
    }
}

impl AttrKind for Shape {
    fn what() -> String {
        "a shape like [2,?,3]".into()
    }
    fn write(&self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Star => Some(Shape::Unranked),
            AttrVal::List(items) => items
                .iter()
                .map(|i| match i {
                    None => Some(None),
                    Some(i) => usize::try_from(*i).ok().map(Some),
                })
                .collect::<Option<Vec<_>>>()
                .map(Shape::Ranked),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::Word(_) => None,
        }
    }
}

impl AttrKind for Combiner {
    fn what() -> String {
        let names: Vec<&str> = Combiner::ALL.iter().map(|c| c.name()).collect();
        format!("one of {}", names.join(", "))
    }
    fn write(&self, out: &mut String) {
        out.push_str(self.name());
    }
    fn read(v: &AttrVal) -> Option<Self> {
        match v {
            AttrVal::Word(w) => Combiner::from_name(w),
            AttrVal::Int(_) | AttrVal::Bool(_) | AttrVal::List(_) | AttrVal::Star => None,
        }
    }
}

//! The op set: a closed enum of small `Copy` sub-enums with one text-name
//! table per sub-enum.

use std::sync::Arc;

use crate::{DType, Effect, Graph, Literal, Shape, TensorType};

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident => $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $var),* }
        impl $name {
            /// Every variant.
            pub const ALL: &'static [$name] = &[$($name::$var),*];
            /// The text name.
            pub fn name(self) -> &'static str { match self { $($name::$var => $text),* } }
            /// Parses a text name.
            pub fn from_name(s: &str) -> Option<Self> { match s { $($text => Some($name::$var),)* _ => None } }
        }
    };
}

named_enum!(
    /// Elementwise functions of one operand.
    UnaryOp {
        /// `-x` (wrapping for integers).
        Neg => "neg",
        /// `|x|` (complex → its real type; wrapping for `MIN`).
        Abs => "abs",
        /// -1, 0 or 1 (`x/|x|` for complex; NaN stays NaN).
        Sign => "sign",
        /// Round toward -inf.
        Floor => "floor",
        /// Round toward +inf.
        Ceil => "ceil",
        /// Round half to even.
        Round => "round",
        /// Square root.
        Sqrt => "sqrt",
        /// `1/sqrt(x)`.
        Rsqrt => "rsqrt",
        /// `e^x`.
        Exp => "exp",
        /// `e^x - 1`.
        Expm1 => "expm1",
        /// Natural logarithm.
        Log => "log",
        /// `log(1 + x)`.
        Log1p => "log1p",
        /// Hyperbolic tangent.
        Tanh => "tanh",
        /// `1 / (1 + e^-x)` (sigmoid).
        Logistic => "logistic",
        /// Sine.
        Sin => "sin",
        /// Cosine.
        Cos => "cos",
        /// Error function.
        Erf => "erf",
        /// Logical not (bool) or bitwise not (integers).
        Not => "not",
        /// True for values that are neither NaN nor infinite.
        IsFinite => "is_finite",
        /// `x * x`.
        Square => "square",
        /// `1 / x`.
        Reciprocal => "reciprocal",
    }
);

named_enum!(
    /// Elementwise functions of two operands of one dtype.
    BinaryOp {
        /// Addition (wrapping for integers).
        Add => "add",
        /// Subtraction.
        Sub => "sub",
        /// Multiplication.
        Mul => "mul",
        /// Division (truncating for integers; `x/0` and `MIN/-1` defined).
        Div => "div",
        /// Remainder with the sign of the dividend (C `fmod`).
        Rem => "rem",
        /// `x^y`.
        Pow => "pow",
        /// Maximum (NaN-propagating).
        Max => "max",
        /// Minimum (NaN-propagating).
        Min => "min",
        /// Logical/bitwise and.
        And => "and",
        /// Logical/bitwise or.
        Or => "or",
        /// Logical/bitwise exclusive or.
        Xor => "xor",
        /// `x << y` (integers). A shift amount outside `[0, bits)` (read as
        /// unsigned) gives 0, as in XLA.
        ShiftLeft => "shift_left",
        /// `x >> y` shifting in zeros, signed types included (integers).
        /// A shift amount outside `[0, bits)` gives 0.
        ShiftRightLogical => "shift_right_logical",
        /// `x >> y` shifting in copies of the sign bit (integers). A shift
        /// amount outside `[0, bits)` gives every bit the sign bit (0 or
        /// -1; 0 for unsigned types).
        ShiftRightArithmetic => "shift_right_arithmetic",
    }
);

named_enum!(
    /// Comparison directions.
    CmpOp {
        /// `==`.
        Eq => "eq",
        /// `!=`.
        Ne => "ne",
        /// `<`.
        Lt => "lt",
        /// `<=`.
        Le => "le",
        /// `>`.
        Gt => "gt",
        /// `>=`.
        Ge => "ge",
    }
);

named_enum!(
    /// Reduction functions.
    ReduceOp {
        /// Sum (0 for an empty reduction).
        Sum => "sum",
        /// Product (1 when empty).
        Prod => "prod",
        /// Maximum (-inf or `MIN` when empty; NaN-propagating).
        Max => "max",
        /// Minimum (+inf or `MAX` when empty; NaN-propagating).
        Min => "min",
        /// Logical and (true when empty).
        And => "and",
        /// Logical or (false when empty).
        Or => "or",
    }
);

named_enum!(
    /// How `scatter` combines an update with the element it lands on.
    Combiner {
        /// The update replaces the element; of several updates to one
        /// element, the last in row-major order of the indices wins.
        Set => "set",
        /// Sum (wrapping for integers).
        Add => "add",
        /// Minimum (NaN-propagating, as `min`).
        Min => "min",
        /// Maximum (NaN-propagating, as `max`).
        Max => "max",
    }
);

named_enum!(
    /// The kinds of host callback.
    CallbackKind {
        /// `tf.numpy_function`: NumPy arrays in and out.
        NumpyFunction => "numpy_function",
        /// `tf.compat.v1.py_func`: same semantics, TF1 name.
        PyFunc => "py_func",
        /// `tf.py_function`: eager tensors; cannot be compiled.
        PyFunction => "py_function",
        /// A Rust closure over ndarray views.
        HostFn => "host_fn",
    }
);

/// Dimension numbers of `dot_general`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DotDims {
    /// Batch dimensions of the left operand.
    pub lhs_batch: Vec<usize>,
    /// Batch dimensions of the right operand (same sizes, same order).
    pub rhs_batch: Vec<usize>,
    /// Contracting dimensions of the left operand.
    pub lhs_contract: Vec<usize>,
    /// Contracting dimensions of the right operand.
    pub rhs_contract: Vec<usize>,
}

impl DotDims {
    /// The dims `group` of a row-major operand of shape `dims` as one
    /// strided dim, `(size, stride)` in elements, when each of them steps
    /// over the next exactly (`None` otherwise): how a GEMM reads a batch,
    /// free or contracted group without a copy (`(1, 0)` for no dims).
    pub fn collapse(dims: &[usize], group: &[usize]) -> Option<(usize, isize)> {
        let stride = |d: usize| dims[d + 1..].iter().product::<usize>() as isize;
        let Some(&last) = group.last() else {
            return Some((1, 0));
        };
        let adjacent = group
            .windows(2)
            .all(|w| stride(w[0]) == stride(w[1]) * dims[w[1]] as isize);
        adjacent.then(|| (group.iter().map(|&d| dims[d]).product(), stride(last)))
    }
}

/// An opaque reference to a callable, bound by name. The IR never looks
/// inside; the runtime downcasts it.
#[derive(Clone)]
pub struct CallbackRef(pub Arc<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for CallbackRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallbackRef(..)")
    }
}

/// A host-callback node's attributes. The callable itself is not part of
/// the op (it is not serialized); the graph binds it by `target` name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallbackOp {
    /// Which API made it.
    pub kind: CallbackKind,
    /// The name the callable is bound under (unique within a graph).
    pub target: String,
}

/// An op traced over an operand of unknown rank (a callback result with no
/// declared shape), held as the user called it, with NumPy's conventions
/// (broadcasting, negative axes, matmul's batch rule). It becomes ordinary
/// ops as soon as its operands' ranks are known: when the graph is
/// specialized or rewritten ([`crate::builder::expand`]), and in the
/// interpreter, which expands it for the tensors it gets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DynamicOp {
    /// An elementwise binary op; operands broadcast.
    Binary(BinaryOp),
    /// An elementwise comparison; operands broadcast.
    Compare(CmpOp),
    /// A reduction over `axes` (every axis when `None`; negative axes count
    /// from the end).
    Reduce {
        /// The function.
        op: ReduceOp,
        /// Axes as given.
        axes: Option<Vec<i64>>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
    },
    /// Index of the maximum (or minimum) along `axis` (int64).
    Arg {
        /// Maximum when true.
        max: bool,
        /// Axis as given.
        axis: i64,
    },
    /// `matmul` (last two dims; batch dims lead; rank-1 operands are vectors).
    MatMul,
    /// A permutation of the (as yet unknown) operand's dims.
    Transpose(Vec<usize>),
    /// `select(pred, on_true, on_false)`; operands broadcast.
    Select,
    /// Broadcast to a static shape with NumPy's rule.
    BroadcastTo(Vec<usize>),
    /// Strided slice (one entry per dim: the rank is `start`'s length).
    Slice {
        /// Start per dim.
        start: Vec<usize>,
        /// Limit (exclusive) per dim.
        limit: Vec<usize>,
        /// Stride per dim.
        stride: Vec<usize>,
    },
    /// Reverse along `axes` as given.
    Reverse(Vec<i64>),
    /// Join the operands along `axis` as given.
    Concatenate {
        /// Axis as given.
        axis: i64,
    },
    /// Gather along `axis` (as given) at the second operand's indices.
    Take {
        /// Axis as given.
        axis: i64,
    },
    /// NumPy's `take_along_axis` (as given) on operands whose dims are not
    /// all known yet: expanded into [`crate::builder::take_along_axis`]'s
    /// gather once they are.
    TakeAlongAxis {
        /// Axis as given.
        axis: i64,
    },
    /// Python's (and NumPy's, TensorFlow's) slice `x[b:e:s]` per dim, on
    /// dims whose sizes may be unknown: a bound counts from the end when
    /// negative, is clamped into the dim, and is the whole dim's start or
    /// end when omitted (`None`); a negative step walks backwards. One
    /// entry per dim of the operand (its rank must be known). Expanded
    /// into `reverse` and `slice` once the sizes are known.
    StridedSlice {
        /// Start per dim (`None`: from the first, or the last if `step < 0`).
        begin: Vec<Option<i64>>,
        /// End (exclusive) per dim (`None`: to the end in `step`'s direction).
        end: Vec<Option<i64>>,
        /// Step per dim (not 0).
        step: Vec<i64>,
    },
}

impl DynamicOp {
    /// The text name (`unranked_add`, `unranked_reduce_sum`, ...): the op's
    /// own name prefixed with `unranked_` (`dynamic_` names XLA's
    /// `dynamic_slice` family).
    pub fn name(&self) -> String {
        match self {
            DynamicOp::Binary(b) => format!("unranked_{}", b.name()),
            DynamicOp::Compare(c) => format!("unranked_compare_{}", c.name()),
            DynamicOp::Reduce { op, .. } => format!("unranked_reduce_{}", op.name()),
            DynamicOp::Arg { max: true, .. } => "unranked_argmax".into(),
            DynamicOp::Arg { max: false, .. } => "unranked_argmin".into(),
            DynamicOp::MatMul => "unranked_matmul".into(),
            DynamicOp::Transpose(_) => "unranked_transpose".into(),
            DynamicOp::Select => "unranked_select".into(),
            DynamicOp::BroadcastTo(_) => "unranked_broadcast_to".into(),
            DynamicOp::Slice { .. } => "unranked_slice".into(),
            DynamicOp::Reverse(_) => "unranked_reverse".into(),
            DynamicOp::Concatenate { .. } => "unranked_concatenate".into(),
            DynamicOp::Take { .. } => "unranked_take".into(),
            DynamicOp::StridedSlice { .. } => "unranked_strided_slice".into(),
            DynamicOp::TakeAlongAxis { .. } => "unranked_take_along_axis".into(),
        }
    }
}

/// A nested computation run by a control-flow op: a graph whose parameters
/// are the values the op passes in and whose outputs are what it gives
/// back. Regions are closed: a value from the enclosing graph reaches a
/// region only as an operand of the op (the tracer passes captured values
/// that way), so every pass and the interpreter treat a region as an
/// ordinary graph. Shared (`Arc`) so that copying a graph is cheap.
#[derive(Clone, Debug, PartialEq)]
pub struct Region(pub Arc<Graph>);

impl Eq for Region {}

impl std::hash::Hash for Region {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // Equal regions have equal shapes; the structure decides equality.
        self.0.nodes().len().hash(state);
        self.0.outputs().len().hash(state);
    }
}

impl Region {
    /// Wraps `graph`.
    pub fn new(graph: Graph) -> Self {
        Region(Arc::new(graph))
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.0
    }

    /// The graph, for changing (copied first when shared).
    pub fn graph_mut(&mut self) -> &mut Graph {
        Arc::make_mut(&mut self.0)
    }

    /// The types of its parameters, in order.
    pub fn param_types(&self) -> Vec<TensorType> {
        self.0
            .params()
            .iter()
            .map(|v| self.0.ty(*v).clone())
            .collect()
    }

    /// The types of its outputs, in order.
    pub fn output_types(&self) -> Vec<TensorType> {
        self.0
            .outputs()
            .iter()
            .map(|o| self.0.ty(o.value).clone())
            .collect()
    }

    /// Stateful when any node in it (or in a region nested in it) is.
    pub fn effect(&self) -> Effect {
        if self.0.nodes().iter().any(|n| n.effect == Effect::Stateful) {
            Effect::Stateful
        } else {
            Effect::Pure
        }
    }
}

/// Every op without regions, as one pattern (a new op must be added here
/// or given regions: the matches using it stay exhaustive).
macro_rules! leaf_ops {
    () => {
        Op::Parameter { .. }
            | Op::Constant(_)
            | Op::Iota { .. }
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
            | Op::Callback(_)
            | Op::Dynamic(_)
            | Op::StopGradient
    };
}

/// An operation. Attributes live in the variant; operands are value ids on
/// the node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Input number `index` of the graph.
    Parameter {
        /// Position among the graph's parameters.
        index: usize,
    },
    /// A dense constant.
    Constant(Literal),
    /// `0, 1, 2, ...` along `dim` of a tensor of `shape`.
    Iota {
        /// Element type.
        dtype: DType,
        /// Result shape (static).
        dims: Vec<usize>,
        /// The dimension that counts.
        dim: usize,
    },
    /// An elementwise function of one operand.
    Unary(UnaryOp),
    /// An elementwise function of two operands of equal type.
    Binary(BinaryOp),
    /// Elementwise comparison giving bool.
    Compare(CmpOp),
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `clamp(x, lo, hi) = min(max(x, lo), hi)`.
    Clamp,
    /// Cast to another dtype.
    Convert(DType),
    /// XLA `broadcast_in_dim`: operand dim `i` maps to result dim `dims[i]`.
    BroadcastInDim {
        /// Result shape.
        shape: Shape,
        /// Where each operand dim goes.
        dims: Vec<usize>,
    },
    /// Row-major reshape.
    Reshape(Shape),
    /// Permute dims: result dim `i` is operand dim `perm[i]`.
    Transpose(Vec<usize>),
    /// Strided slice.
    Slice {
        /// Start per dim.
        start: Vec<usize>,
        /// Limit (exclusive) per dim.
        limit: Vec<usize>,
        /// Stride per dim (≥ 1).
        stride: Vec<usize>,
    },
    /// Join operands along `axis`.
    Concatenate {
        /// The axis.
        axis: usize,
    },
    /// Pad with a scalar operand: `low`/`high` may be negative (crop).
    Pad {
        /// Padding before, per dim.
        low: Vec<i64>,
        /// Padding after, per dim.
        high: Vec<i64>,
        /// Padding between elements, per dim.
        interior: Vec<usize>,
    },
    /// Reverse the order along `axes`.
    Reverse(Vec<usize>),
    /// Reduce over `axes`.
    Reduce {
        /// The function.
        op: ReduceOp,
        /// Axes reduced (sorted, unique).
        axes: Vec<usize>,
        /// Keep reduced axes as size 1.
        keepdims: bool,
    },
    /// Index of the maximum along `axis` (first on ties; NaN wins).
    ArgMax {
        /// Axis.
        axis: usize,
        /// Index dtype (int32 or int64).
        index_dtype: DType,
    },
    /// Index of the minimum along `axis` (first on ties; NaN wins).
    ArgMin {
        /// Axis.
        axis: usize,
        /// Index dtype (int32 or int64).
        index_dtype: DType,
    },
    /// The indices that sort the operand along `axis` (XLA's `sort` of the
    /// operand with an iota, keeping the iota): stable, so equal elements
    /// keep their order; NaN sorts above every number (last ascending,
    /// first descending), and -0.0 equals 0.0. The sorted values are a
    /// gather at these indices.
    ArgSort {
        /// Axis.
        axis: usize,
        /// Largest first.
        descending: bool,
        /// Index dtype (int32 or int64).
        index_dtype: DType,
    },
    /// Running sums along `axis` (`tf.math.cumsum`): element `i` is the sum
    /// of elements `0..=i` (`0..i` when `exclusive`; from the end when
    /// `reverse`), added in that order in the operand's own type (halves in
    /// f32, rounded once per element).
    Cumsum {
        /// Axis.
        axis: usize,
        /// Sum from the last element.
        reverse: bool,
        /// Leave the element itself out.
        exclusive: bool,
    },
    /// Generalized matrix product.
    DotGeneral(DotDims),
    /// Gather slices of the first operand along `axis` at the integer
    /// indices of the second.
    Take {
        /// Axis.
        axis: usize,
    },
    /// XLA `dynamic_slice`: operand 0 is `x`, then one scalar integer start
    /// index per dim of `x` (all int32 or all int64). Each start is clamped
    /// to `[0, dim - size]`, so the block always lies inside `x`.
    DynamicSlice {
        /// Size of the block per dim (static, at most the dim).
        sizes: Vec<usize>,
    },
    /// XLA `dynamic_update_slice`: operands `x`, `update` (same dtype and
    /// rank, no dim larger than `x`'s), then one scalar integer start index
    /// per dim, clamped as `dynamic_slice`'s to `[0, dim - update dim]`.
    /// The result is `x` with that block replaced by `update`.
    DynamicUpdateSlice,
    /// The inverse of `take`: operands `x`, `indices` (integers, any
    /// shape), `updates` (the shape `take(x, indices, axis)` has). Every
    /// slice `updates[.., j.., ..]` is combined into `x[.., indices[j..],
    /// ..]`; indices outside `[0, dim)` are skipped (XLA).
    Scatter {
        /// The axis of `x` the indices address.
        axis: usize,
        /// How an update combines with the element.
        combiner: Combiner,
    },
    /// Reinterprets each element's bits as another dtype of the same size
    /// (not bool; complex only as a complex of the same size).
    BitcastConvert(DType),
    /// A host callback. Results have the declared types.
    Callback(CallbackOp),
    /// An op over operands of unknown rank, expanded once they are known.
    Dynamic(DynamicOp),
    /// XLA `while`: the operands are the initial carried values; `cond`
    /// maps the carries to a `bool[]`, and while it is true `body` maps
    /// them to the next carries (same types). The results are the carries
    /// when `cond` first gives false (the operands, if it never is true).
    While {
        /// Carries → `bool[]`.
        cond: Region,
        /// Carries → carries.
        body: Region,
    },
    /// XLA `conditional` with a branch index: operand 0 is an `int32[]`
    /// index, the rest are passed to the branch it selects (an index out of
    /// `0..n` selects the last branch, as in XLA). Every branch takes the
    /// same operand types and gives the same result types. Only the
    /// selected branch runs.
    Case {
        /// The branches, in index order.
        branches: Vec<Region>,
    },
    /// The identity, through which differentiation passes no gradient
    /// (`jax.lax.stop_gradient`, `tf.stop_gradient`). Removed by the
    /// optimizer once differentiation is done.
    StopGradient,
    /// A function with a gradient of its own (`jax.custom_vjp`,
    /// `tf.custom_gradient`): runs `body` on the operands (the first
    /// `inputs` are its inputs, the rest values it captured) and gives its
    /// results. Differentiation calls `vjp` instead of differentiating
    /// `body`: it takes the operands, then `body`'s results, then one
    /// cotangent per real floating result, and returns one cotangent per
    /// real floating input (captured values get none). The optimizer
    /// inlines `body` once differentiation is done.
    CustomVjp {
        /// How many leading operands are inputs (the rest are captures).
        inputs: usize,
        /// Operands → results.
        body: Region,
        /// (operands, results, cotangents) → input cotangents.
        vjp: Region,
    },
}

impl Op {
    /// The text name of the op (`add`, `reduce_sum`, `numpy_function`, ...).
    pub fn name(&self) -> String {
        match self {
            Op::Parameter { .. } => "parameter".into(),
            Op::Constant(_) => "constant".into(),
            Op::Iota { .. } => "iota".into(),
            Op::Unary(u) => u.name().into(),
            Op::Binary(b) => b.name().into(),
            Op::Compare(c) => format!("compare_{}", c.name()),
            Op::Select => "select".into(),
            Op::Clamp => "clamp".into(),
            Op::Convert(_) => "convert".into(),
            Op::BroadcastInDim { .. } => "broadcast_in_dim".into(),
            Op::Reshape(_) => "reshape".into(),
            Op::Transpose(_) => "transpose".into(),
            Op::Slice { .. } => "slice".into(),
            Op::Concatenate { .. } => "concatenate".into(),
            Op::Pad { .. } => "pad".into(),
            Op::Reverse(_) => "reverse".into(),
            Op::Reduce { op, .. } => format!("reduce_{}", op.name()),
            Op::ArgMax { .. } => "argmax".into(),
            Op::ArgMin { .. } => "argmin".into(),
            Op::ArgSort { .. } => "argsort".into(),
            Op::Cumsum { .. } => "cumsum".into(),
            Op::DotGeneral(_) => "dot_general".into(),
            Op::Take { .. } => "take".into(),
            Op::DynamicSlice { .. } => "dynamic_slice".into(),
            Op::DynamicUpdateSlice => "dynamic_update_slice".into(),
            Op::Scatter { .. } => "scatter".into(),
            Op::BitcastConvert(_) => "bitcast_convert".into(),
            Op::Callback(c) => c.kind.name().into(),
            Op::Dynamic(d) => d.name(),
            Op::While { .. } => "while".into(),
            Op::Case { .. } => "case".into(),
            Op::StopGradient => "stop_gradient".into(),
            Op::CustomVjp { .. } => "custom_vjp".into(),
        }
    }

    /// The nested computations the op runs (empty for all but control flow).
    pub fn regions(&self) -> Vec<&Region> {
        match self {
            Op::While { cond, body } => vec![cond, body],
            Op::Case { branches } => branches.iter().collect(),
            Op::CustomVjp { body, vjp, .. } => vec![body, vjp],
            leaf_ops!() => vec![],
        }
    }

    /// The nested computations, for changing.
    pub fn regions_mut(&mut self) -> Vec<&mut Region> {
        match self {
            Op::While { cond, body } => vec![cond, body],
            Op::Case { branches } => branches.iter_mut().collect(),
            Op::CustomVjp { body, vjp, .. } => vec![body, vjp],
            leaf_ops!() => vec![],
        }
    }

    /// The op for operands of `ins` types: control flow whose regions were
    /// made for other types (a loop traced with unknown dims, now
    /// specialized) gets its regions specialized to them; every other op is
    /// returned as is.
    pub fn with_operand_types(&self, ins: &[TensorType]) -> crate::Result<Op> {
        if let Op::CustomVjp { inputs, body, vjp } = self {
            // The gradient takes the body's results too.
            let body = if body.param_types() == ins {
                body.clone()
            } else {
                Region::new(body.graph().specialize(ins)?)
            };
            let mut args = ins.to_vec();
            let outs = body.output_types();
            args.extend(outs.iter().cloned());
            args.extend(outs.into_iter().filter(|t| t.dtype.is_float()));
            let vjp = if vjp.param_types() == args {
                vjp.clone()
            } else {
                Region::new(vjp.graph().specialize(&args)?)
            };
            return Ok(Op::CustomVjp {
                inputs: *inputs,
                body,
                vjp,
            });
        }
        let mut op = self.clone();
        // A case's index operand is not passed to its branches.
        let args = if matches!(self, Op::Case { .. }) {
            ins.get(1..).unwrap_or_default()
        } else {
            ins
        };
        for r in op.regions_mut() {
            if r.param_types() != args {
                *r = Region::new(r.graph().specialize(args)?);
            }
        }
        Ok(op)
    }

    /// The effect the op has by itself: stateful for callbacks marked so by
    /// their node, and for control flow whose regions hold a stateful node.
    pub fn region_effect(&self) -> Effect {
        if self
            .regions()
            .iter()
            .any(|r| r.effect() == Effect::Stateful)
        {
            Effect::Stateful
        } else {
            Effect::Pure
        }
    }

    /// True for ops whose result at an index depends only on the operands at
    /// the same index (what loop fusion merges).
    pub fn is_elementwise(&self) -> bool {
        match self {
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Clamp
            | Op::Convert(_)
            | Op::BitcastConvert(_) => true,
            Op::Parameter { .. }
            | Op::Constant(_)
            | Op::Iota { .. }
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
            | Op::Callback(_)
            | Op::Dynamic(_)
            | Op::While { .. }
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. } => false,
        }
    }

    /// True for ops whose result types are given when the node is made
    /// (parameters, callbacks) rather than inferred from the operands.
    pub fn has_declared_types(&self) -> bool {
        match self {
            Op::Parameter { .. } | Op::Callback(_) => true,
            Op::Constant(_)
            | Op::Iota { .. }
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
}

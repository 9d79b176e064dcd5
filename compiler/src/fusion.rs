//! Fusion and buffer planning: turns an optimized graph with static shapes
//! into a [`Plan`] — a list of steps (fused loop kernels, reduce kernels,
//! GEMM calls, runtime-kernel calls) over numbered buffer slots.
//!
//! A value is either *materialized* (it has a slot: a parameter, a
//! non-scalar constant, a step's result) or *inlined*: an elementwise,
//! layout, iota or scalar-constant value recomputed inside every kernel that
//! reads it, never written to memory. Layout ops (broadcast, transpose,
//! slice, reverse, reshape) become affine index maps on the loads of the
//! kernel. Every "no" of the fusion pass is recorded with its reason.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use tensorlift_ir::{
    BinaryOp, CmpOp, DType, Error, Graph, Literal, Node, NodeId, Op, ReduceOp, Result, Scalar,
    UnaryOp, ValueId,
};
use tensorlift_runtime::kernels::gemm::{self, GemmDims, GemmSplit};

/// Index of a buffer slot.
pub type SlotId = usize;

/// Where a slot's memory comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum SlotKind {
    /// Input number `i` (read-only, the caller's tensor).
    Input(usize),
    /// A constant owned by the executable.
    Const(Literal),
    /// An intermediate living in the per-call arena at `offset`.
    Temp {
        /// Byte offset in the arena.
        offset: usize,
    },
    /// A graph output (its own allocation, returned to the caller).
    Output,
    /// A temporary whose last reader is a callback that takes its inputs by
    /// value (NumPy): its own allocation per call, moved into the callback
    /// so that Python gets the buffer without a copy. Earlier steps read
    /// it in place.
    HandOff {
        /// The step that takes the buffer.
        to: usize,
    },
}

/// A buffer.
#[derive(Clone, Debug)]
pub struct Slot {
    /// Kind of memory.
    pub kind: SlotKind,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub dims: Vec<usize>,
    /// The value it holds (for dumps and errors).
    pub name: String,
}

impl Slot {
    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.dims.iter().product::<usize>() * self.dtype.size()
    }
}

/// A node of a kernel's expression DAG (operands precede users).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ENode {
    /// Element of a slot at `offset + Σ i[d]·strides[d]` (in elements).
    Load {
        /// The buffer.
        slot: SlotId,
        /// Element type.
        dtype: DType,
        /// Offset in elements.
        offset: i64,
        /// Stride per loop dim, in elements.
        strides: Vec<i64>,
    },
    /// Element of a slot at `offset + Σ i[d]·strides[d] + index·scale`,
    /// `index` being the integer value of node `index`, clamped to
    /// `[0, bound)`: a `take` fused into its reader (the gathered axis has
    /// `bound` elements, `scale` apart; the strides address the others). A
    /// runtime step checked the indices before the kernel runs, so the
    /// clamp never changes a value; it keeps every address in the slot.
    Gather {
        /// The buffer (the table).
        slot: SlotId,
        /// Element type.
        dtype: DType,
        /// Offset in elements.
        offset: i64,
        /// Stride per loop dim, in elements (the gathered axis's excluded).
        strides: Vec<i64>,
        /// The node giving the index (a load of the indices' slot).
        index: usize,
        /// Elements between consecutive indices.
        scale: i64,
        /// Size of the gathered axis.
        bound: i64,
    },
    /// A scalar constant.
    Const(Literal),
    /// The integer `offset + Σ i[d]·strides[d]`, converted to `dtype`.
    Iota {
        /// Result type.
        dtype: DType,
        /// Value at index 0.
        offset: i64,
        /// Coefficient per loop dim.
        strides: Vec<i64>,
    },
    /// Elementwise unary op with its result type.
    Unary(UnaryOp, usize, DType),
    /// Elementwise binary op with its result type.
    Binary(BinaryOp, usize, usize, DType),
    /// Comparison of two operands of `dtype`, giving bool.
    Compare(CmpOp, usize, usize, DType),
    /// `select(p, a, b)` of type `dtype`.
    Select(usize, usize, usize, DType),
    /// `clamp(x, lo, hi)` of type `dtype`.
    Clamp(usize, usize, usize, DType),
    /// Cast from the operand's dtype to `to`.
    Convert(usize, DType, DType),
    /// The operand's bits (of the first dtype) read as the second, of the
    /// same size (no half types: those run as runtime kernels).
    Bitcast(usize, DType, DType),
}

impl ENode {
    /// The result dtype.
    pub fn dtype(&self) -> DType {
        match self {
            ENode::Load { dtype, .. } | ENode::Gather { dtype, .. } | ENode::Iota { dtype, .. } => {
                *dtype
            }
            ENode::Const(l) => l.dtype,
            ENode::Unary(_, _, d)
            | ENode::Binary(_, _, _, d)
            | ENode::Select(_, _, _, d)
            | ENode::Clamp(_, _, _, d) => *d,
            ENode::Compare(..) => DType::Bool,
            ENode::Convert(_, _, to) | ENode::Bitcast(_, _, to) => *to,
        }
    }

    /// The stride per loop dim of a load or iota (none for the others).
    pub fn strides(&self) -> Option<&Vec<i64>> {
        match self {
            ENode::Load { strides, .. }
            | ENode::Gather { strides, .. }
            | ENode::Iota { strides, .. } => Some(strides),
            ENode::Const(_)
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => None,
        }
    }

    /// The slot a load or gather reads (none for the others).
    pub fn slot(&self) -> Option<SlotId> {
        match self {
            ENode::Load { slot, .. } | ENode::Gather { slot, .. } => Some(*slot),
            ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => None,
        }
    }

    /// [`ENode::strides`], to rewrite.
    pub fn strides_mut(&mut self) -> Option<&mut Vec<i64>> {
        match self {
            ENode::Load { strides, .. }
            | ENode::Gather { strides, .. }
            | ENode::Iota { strides, .. } => Some(strides),
            ENode::Const(_)
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => None,
        }
    }
}

/// What a kernel computes.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelKind {
    /// `out[i] = expr(i)` over every index of `dims`.
    Loop,
    /// `out[kept(i)] = op over the reduced dims of expr(i)`.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Per loop dim: reduced or kept.
        reduced: Vec<bool>,
    },
}

/// A fused kernel: one loop nest, one output.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Name (the root node's).
    pub name: String,
    /// Loop or reduction.
    pub kind: KernelKind,
    /// Loop dims (after merging contiguous dims).
    pub dims: Vec<usize>,
    /// The expression DAG, operands before users.
    pub nodes: Vec<ENode>,
    /// The node whose value is stored (or reduced).
    pub root: usize,
    /// Output slot.
    pub out: SlotId,
    /// Output stride per loop dim, in elements (0 for reduced dims).
    pub out_strides: Vec<i64>,
    /// A second value this kernel stores as it goes (see [`Stash`]).
    pub stash: Option<Stash>,
}

/// A reduction kernel's per-element value also stored to memory: a later
/// loop kernel over the same index space that would recompute the same
/// costly expression (the `exp(x - max)` of a softmax, summed by the
/// reduction and divided by the loop) reads it back instead. The slot is
/// that loop's own output, written at the index the loop will write, so no
/// extra buffer is needed and the loop updates it in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Stash {
    /// The node whose value is stored (the reduction's root).
    pub node: usize,
    /// Where.
    pub slot: SlotId,
    /// Stride per loop dim, in elements.
    pub strides: Vec<i64>,
}

/// A GEMM call: `out[b] = lhs[b] @ rhs[b]` for f32/f64 with strided operands.
#[derive(Clone, Debug)]
pub struct Gemm {
    /// Node name.
    pub name: String,
    /// f32 or f64.
    pub dtype: DType,
    /// Slots: lhs, rhs, out.
    pub lhs: SlotId,
    /// Right operand.
    pub rhs: SlotId,
    /// Result.
    pub out: SlotId,
    /// Sizes.
    pub b: usize,
    /// Rows.
    pub m: usize,
    /// Contracted.
    pub k: usize,
    /// Columns.
    pub n: usize,
    /// lhs strides (batch, m, k) in elements.
    pub lhs_strides: [isize; 3],
    /// rhs strides (batch, k, n) in elements.
    pub rhs_strides: [isize; 3],
    /// May split over the thread pool (`JitOptions::threads`; set by
    /// `parallel::record`). The bits are the same either way.
    pub threads: bool,
    /// `out += lhs @ rhs`: `out` holds an accumulator the product is added
    /// to (an `add(acc, dot_general(..))` fused by [`accumulate_gemms`]).
    pub accumulate: bool,
    /// The product's factor, a power of two (1 for a plain product): an
    /// operand's scale moved into the call by [`scale_into_gemms`]
    /// (`gemm`'s `beta`).
    pub scale: f64,
    /// A kernel over the output's rows (a loop, or a reduction keeping
    /// them) run on each part's rows as the part finishes them (the bias
    /// and activation of a layer, a softmax's row max; see
    /// [`gemm_epilogues`]).
    pub epilogue: Option<Box<Epilogue>>,
    /// A slot holding `rhs` packed by a [`Step::Pack`] before the loop the
    /// GEMM is in, `rhs` being the same at every step of it (see
    /// [`pack_loop_invariant_rhs`]).
    pub packed: Option<SlotId>,
}

/// A GEMM's loop-invariant right operand packed for the host's GEMM
/// micro-kernels, once before the loop ([`Step::Pack`]).
#[derive(Clone, Debug)]
pub struct Pack {
    /// The GEMM's node name.
    pub name: String,
    /// f32 or f64.
    pub dtype: DType,
    /// The right operand, `(k, n)`, element `(kk, j)` at `kk·strides[0] +
    /// j·strides[1]`.
    pub src: SlotId,
    /// Where it goes (`kernels::gemm::packed_len(k, n)` elements).
    pub dst: SlotId,
    /// Contracted.
    pub k: usize,
    /// Columns.
    pub n: usize,
    /// `src`'s strides.
    pub strides: [isize; 2],
}

/// A GEMM's epilogue ([`Gemm::epilogue`]).
#[derive(Clone, Debug)]
pub struct Epilogue {
    /// The kernel: its outermost dim (kept) has `per_row` indices per row
    /// of the product.
    pub kernel: Kernel,
    /// Indices of the kernel's outermost dim per row of the product (1,
    /// or the row's length when the kernel's dims merged into one).
    pub per_row: usize,
    /// After a product not split by rows, run over ranges of rows on the
    /// pool: what the kernel would do as a step of its own (set by
    /// `parallel::record`).
    pub split: bool,
}

impl Gemm {
    /// How the runtime splits the call over a pool of `threads`: by rows
    /// first when it has an epilogue or reads its right operand packed on
    /// this host.
    pub fn split(&self, threads: usize) -> GemmSplit {
        let d = self.dims();
        let packed = self.packed.is_some()
            && gemm::GemmType::of(self.dtype).is_some_and(|t| t.host_packs(&d));
        match (packed, &self.epilogue) {
            (true, _) => d.split_packed(threads),
            (false, Some(_)) => d.split_by_rows(threads),
            (false, None) => d.split(threads),
        }
    }

    /// The call's layout, as the runtime's GEMM takes it.
    pub fn dims(&self) -> GemmDims {
        GemmDims {
            b: self.b,
            m: self.m,
            k: self.k,
            n: self.n,
            lhs_strides: self.lhs_strides,
            rhs_strides: self.rhs_strides,
        }
    }
}

/// One step of the program.
#[derive(Clone, Debug)]
pub enum Step {
    /// A fused kernel emitted as native code.
    Kernel(Kernel),
    /// A GEMM through the `tl_gemm` runtime symbol.
    Gemm(Gemm),
    /// A GEMM's right operand packed before the loop that multiplies by it
    /// at every step (through `tl_gemm` too).
    Pack(Pack),
    /// An op executed by a runtime kernel through the `tl_runtime_step`
    /// symbol: operands are materialized, the result written to `outputs`.
    /// A `take` with no outputs is a gather's check: its one input, the
    /// indices, is checked against the table's axis (the take's error)
    /// before the kernels that gather from it run ([`ENode::Gather`]).
    Runtime {
        /// The graph the node is in: 0 for the plan's graph, `i + 1` for
        /// the region graph `Plan::regions[i]`.
        graph: usize,
        /// The node.
        node: NodeId,
        /// Operand slots.
        inputs: Vec<SlotId>,
        /// Result slots.
        outputs: Vec<SlotId>,
    },
    /// `to[i] = from[i]`, whole slots (carries into and around a loop, a
    /// branch's results); a pair with `from == to` is skipped.
    Copy {
        /// Sources.
        from: Vec<SlotId>,
        /// Destinations (same sizes).
        to: Vec<SlotId>,
    },
    /// A place [`Step::Jump`], [`Step::BranchUnless`] and [`Step::Switch`]
    /// go to (numbered across the plan).
    Label(usize),
    /// Go to the label.
    Jump(usize),
    /// Go to `label` unless the `bool[]` in `pred` is true.
    BranchUnless {
        /// The predicate's slot.
        pred: SlotId,
        /// Where to go when it is false.
        label: usize,
    },
    /// Go to `labels[index]`, the last label when `index` (an `int32[]`
    /// slot) is out of range.
    Switch {
        /// The index's slot.
        index: SlotId,
        /// One label per branch.
        labels: Vec<usize>,
    },
}

/// The compiled program's structure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The graph the plan was made from (specialized and optimized).
    pub graph: Graph,
    /// Every buffer.
    pub slots: Vec<Slot>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// The slot of each graph output.
    pub outputs: Vec<SlotId>,
    /// Arena bytes for temporaries.
    pub arena_bytes: usize,
    /// Fusion decisions, one line per node that was not simply inlined.
    pub decisions: Vec<String>,
    /// Runs of consecutive kernels executed row block by row block.
    pub groups: Vec<RowGroup>,
    /// The graphs of loop bodies and branches whose steps are in `steps`
    /// (see [`Step::Runtime`]'s `graph`).
    pub regions: Vec<Graph>,
    /// Number of labels used.
    pub labels: usize,
    /// `(view, source)`: a `dynamic_slice` result read where it lies in its
    /// operand's buffer (see [`slice_views`]).
    pub views: Vec<(SlotId, SlotId)>,
}

/// Consecutive kernel steps `start..end` over the same outermost ("row")
/// dim, where every kernel reads what an earlier one of the run wrote only
/// from the same row. They run interleaved, a block of rows at a time
/// (`block` rows: every kernel on rows 0..8, then 8..16, ...), so that the
/// rows a block touches stay in cache between kernels — the three passes
/// of a row softmax read `x` from memory once instead of three times — and
/// row ranges can go to different threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowGroup {
    /// First step.
    pub start: usize,
    /// One past the last step.
    pub end: usize,
    /// Rows (the shared outermost loop dim).
    pub rows: usize,
    /// Rows per block.
    pub block: usize,
}

impl RowGroup {
    /// The group's kernels, in order.
    pub fn kernels<'p>(&self, plan: &'p Plan) -> impl Iterator<Item = &'p Kernel> + use<'p> {
        plan.steps[self.start..self.end]
            .iter()
            .filter_map(|s| match s {
                Step::Kernel(k) => Some(k),
                Step::Gemm(_)
                | Step::Pack(_)
                | Step::Runtime { .. }
                | Step::Copy { .. }
                | Step::Label(_)
                | Step::Jump(_)
                | Step::BranchUnless { .. }
                | Step::Switch { .. } => None,
            })
    }
}

/// Bytes of all the rows one block of a row group touches, at most.
const ROW_BLOCK_BYTES: usize = 64 << 10;

/// True when a kernel's work splits by ranges of its outermost loop dim
/// into disjoint writes (loops, and reductions keeping that dim).
pub fn range_capable(k: &Kernel) -> bool {
    match &k.kind {
        KernelKind::Loop => !k.dims.is_empty(),
        KernelKind::Reduce { reduced, .. } => !reduced.is_empty() && !reduced[0],
    }
}

/// The extent `Σ_{d≥1} strides[d]·(dims[d] - 1)`, or None when a stride is
/// negative.
fn inner_extent(strides: &[i64], dims: &[usize]) -> Option<i64> {
    let mut e = 0i64;
    for (s, d) in strides.iter().zip(dims).skip(1) {
        if *s < 0 {
            return None;
        }
        e = e.checked_add(s.checked_mul(*d as i64 - 1)?)?;
    }
    Some(e)
}

/// Moves the kernel right after a GEMM into the GEMM's step as its
/// epilogue ([`Gemm::epilogue`]) when it runs over the product's rows (a
/// loop, or a reduction keeping its outermost dim) and reads the product
/// only from the row it writes: the runtime splits the
/// product by rows and runs the kernel on each part's rows as soon as the
/// part has finished them, on the part's thread, while they are in its
/// cache — a layer's bias and activation no longer read the product back
/// from memory after the whole product, on one thread.
fn gemm_epilogues(plan: &mut Plan) {
    let mut i = 0;
    while i + 1 < plan.steps.len() {
        let (Step::Gemm(g), Step::Kernel(k)) = (&plan.steps[i], &plan.steps[i + 1]) else {
            i += 1;
            continue;
        };
        // The kernel's outermost dim: `per_row` indices per product row
        // (dims merged into one: a row's length).
        let outer = k.dims.first().copied().unwrap_or(0);
        let per_row = if g.m > 0 && outer % g.m == 0 {
            outer / g.m
        } else {
            0
        };
        let (n, f) = (g.n as i64, per_row as i64);
        // Every read of the product: a load, at each outer index, of its
        // own `n / per_row` elements of the row being written.
        let row_local = |node: &ENode| match node {
            ENode::Load {
                slot,
                offset,
                strides,
                ..
            } if *slot == g.out => {
                let s0 = strides.first().copied().unwrap_or(0);
                *offset == 0
                    && s0 > 0
                    && s0.checked_mul(f) == Some(n)
                    && inner_extent(strides, &k.dims).is_some_and(|e| e < s0)
            }
            ENode::Gather { slot, .. } => *slot != g.out,
            ENode::Load { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => true,
        };
        let reads_product = k.nodes.iter().any(|e| e.slot() == Some(g.out));
        // (A product of one column becomes row reductions outside exact
        // mode: `matvec_as_reductions`.)
        let fits = g.b == 1
            && g.n > 1
            && !g.accumulate
            && g.epilogue.is_none()
            && k.stash.is_none()
            && per_row > 0
            && range_capable(k)
            && reads_product
            && k.nodes.iter().all(row_local)
            && ![g.lhs, g.rhs, g.out].contains(&k.out);
        if !fits {
            i += 1;
            continue;
        }
        let Step::Kernel(k) = plan.steps.remove(i + 1) else {
            continue;
        };
        let Step::Gemm(g) = &mut plan.steps[i] else {
            continue;
        };
        plan.decisions.push(format!(
            "{}: epilogue of GEMM '{}': run on each part's rows as the part finishes them",
            k.name, g.name
        ));
        g.epilogue = Some(Box::new(Epilogue {
            kernel: k,
            per_row,
            split: false,
        }));
        i += 1;
    }
}

/// Finds the row groups of `plan` (see [`RowGroup`]).
fn find_row_groups(plan: &mut Plan) {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < plan.steps.len() {
        let Step::Kernel(first) = &plan.steps[i] else {
            i += 1;
            continue;
        };
        if !range_capable(first) {
            i += 1;
            continue;
        }
        let rows = first.dims[0];
        // Slot -> row stride of the group kernel that wrote it.
        let mut written: HashMap<SlotId, i64> = HashMap::new();
        let row_of = |k: &Kernel| -> Option<i64> {
            let r = *k.out_strides.first()?;
            let inner = inner_extent(&k.out_strides, &k.dims)?;
            (r > inner && r >= 0).then_some(r)
        };
        let Some(r) = row_of(first) else {
            i += 1;
            continue;
        };
        written.insert(first.out, r);
        if let Some(st) = &first.stash {
            written.insert(st.slot, st.strides[0]);
        }
        let mut shares = false;
        let mut end = i + 1;
        while let Some(Step::Kernel(k)) = plan.steps.get(end) {
            if !range_capable(k) || k.dims[0] != rows {
                break;
            }
            let mut local = true;
            for n in &k.nodes {
                if let ENode::Load {
                    slot,
                    offset,
                    strides,
                    ..
                } = n
                    && let Some(&r) = written.get(slot)
                {
                    shares = true;
                    let inner = inner_extent(strides, &k.dims);
                    local &= *offset == 0
                        && strides.first() == Some(&r)
                        && inner.is_some_and(|e| e < r.max(1));
                }
                // A gather may read any row.
                if let ENode::Gather { slot, .. } = n
                    && written.contains_key(slot)
                {
                    (shares, local) = (true, false);
                }
            }
            let Some(r) = row_of(k).filter(|_| local) else {
                break;
            };
            written.insert(k.out, r);
            if let Some(st) = &k.stash {
                written.insert(st.slot, st.strides[0]);
            }
            end += 1;
        }
        if shares && end - i >= 2 && rows >= 2 {
            let mut slots: Vec<SlotId> = Vec::new();
            for step in &plan.steps[i..end] {
                let (r, w) = step_slots(step);
                slots.extend(r);
                slots.extend(w);
            }
            slots.sort_unstable();
            slots.dedup();
            let row_bytes: usize = slots.iter().map(|s| plan.slots[*s].bytes() / rows).sum();
            let block = (ROW_BLOCK_BYTES / row_bytes.max(1)).clamp(1, rows);
            plan.decisions.push(format!(
                "row group: steps {i}..{end} run {block} of {rows} rows at a time ({row_bytes} bytes per row)"
            ));
            groups.push(RowGroup {
                start: i,
                end,
                rows,
                block,
            });
            i = end;
        } else {
            i += 1;
        }
    }
    plan.groups = groups;
}

/// Above this inline cost a value read by several kernels is materialized
/// rather than recomputed in each.
const RECOMPUTE_LIMIT: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Computed inside consumers.
    Inline,
    /// Has a slot.
    Buffer,
}

/// Computed inside a loop kernel. Elementwise ops are, but a
/// `bitcast_convert` from or to a half type: kernels hold halves as f32, and
/// the round trip through f32 would quiet a signalling NaN's bits, so such a
/// bitcast runs as a runtime kernel (bit for bit the interpreter's).
fn fusible(g: &Graph, n: &Node) -> bool {
    if let Op::BitcastConvert(to) = n.op {
        let from = n.inputs.first().map(|x| g.ty(*x).dtype);
        return !(to.is_half() || from.is_some_and(DType::is_half));
    }
    if let Op::Take { .. } = n.op {
        return n.inputs.first().is_some_and(|x| gatherable(g.ty(*x).dtype));
    }
    fusible_op(&n.op)
}

/// Whether `n` is a fusible `take` of single elements (from a table of
/// rank 1: `take_along_axis`'s): a gather in a kernel also when it has a
/// buffer of its own, where a take of rows stays a runtime kernel that
/// copies each row whole.
fn gathers_elements(g: &Graph, n: &Node) -> bool {
    matches!(n.op, Op::Take { .. })
        && fusible(g, n)
        && n.inputs.first().and_then(|x| g.ty(*x).shape.rank()) == Some(1)
}

/// The buffer `v` is a reshape of (a reshape keeps the row-major order,
/// so its elements are that buffer's, addressed linearly), if it is one.
fn reshaped_buffer(g: &Graph, v: ValueId, kind: &[Kind]) -> Option<ValueId> {
    let n = g.producer(v);
    match n.op {
        Op::Reshape(_) => {
            let x = *n.inputs.first()?;
            (kind[x.index()] == Kind::Buffer).then_some(x)
        }
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
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient
        | Op::CustomVjp { .. } => None,
    }
}

/// Whether a `take` of a table of `dtype` may be a gather in its readers'
/// kernels ([`ENode::Gather`]): not strings, and not f16/bf16, which
/// kernels compute in f32 (a take moves their bits, signalling NaNs
/// included).
fn gatherable(dtype: DType) -> bool {
    dtype != DType::String && !dtype.is_half()
}

/// Ops a loop kernel computes in place (`KernelBuilder::build_node`): the
/// elementwise ones, iota, and those that only remap the index (and
/// `take`, as a gather, where [`fusible`] says).
fn fusible_op(op: &Op) -> bool {
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BitcastConvert(_)
        | Op::Iota { .. }
        | Op::BroadcastInDim { .. }
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Reverse(_)
        | Op::Reshape(_) => true,
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Concatenate { .. }
        | Op::Pad { .. }
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

fn is_scalar_const(op: &Op) -> bool {
    matches!(op, Op::Constant(l) if l.dims.is_empty() && l.dtype != DType::String)
}

/// Whether reduction `n` is compiled as a native kernel (others run as
/// runtime kernels). In exact mode an f32 sum must be the interpreter's,
/// which accumulates in f64 (`kernels::reduce::reduce`): a kernel does
/// that in a register over the innermost axis alone (code generation's
/// `f64_sum`), and any other f32 sum, whose partial sums would pass
/// through its f32 output, is a runtime kernel.
fn native_reduce(g: &Graph, n: &Node, exact: bool) -> bool {
    let Op::Reduce { op, axes, .. } = &n.op else {
        return false;
    };
    let Some(x) = n.inputs.first().map(|x| g.ty(*x)) else {
        return false;
    };
    let dtype = x.dtype;
    if exact && dtype == DType::F32 && *op == ReduceOp::Sum {
        let rank = x.shape.rank().unwrap_or(0);
        return rank > 0 && axes[..] == [rank - 1];
    }
    dtype == DType::Bool || dtype.is_int() || matches!(dtype, DType::F32 | DType::F64)
}

/// Builds the plan for `g` (static shapes, optimized).
///
/// With `exact` (`JitOptions::exact`) it fuses nothing that reorders a
/// floating-point sum: no GEMM accumulates into an `add`'s other operand
/// ([`accumulate_gemms`]).
pub fn plan(g: &Graph, exact: bool) -> Result<Plan> {
    // Differentiation markers are lowered by the optimizer
    // (`passes::lower_autodiff`); none may reach code generation.
    for sub in g.all_graphs() {
        if let Some(n) =
            (sub.nodes().iter()).find(|n| matches!(n.op, Op::StopGradient | Op::CustomVjp { .. }))
        {
            return Err(Error::internal(format!(
                "{} '{}' reached the compiler: the optimizer lowers it",
                n.op.name(),
                n.name
            )));
        }
    }
    let mut plan = plan_with(g, false, !exact)?;
    pack_loop_invariant_rhs(&mut plan);
    Ok(plan)
}

/// A GEMM in a loop whose right operand no step of the loop writes (a
/// weight matrix an RNN cell multiplies by at every step) reads it packed:
/// a [`Step::Pack`] before the loop (before the outermost loop around it
/// that leaves the operand alone) lays it out once for the host's GEMM
/// micro-kernels, where `gemm` would pack it again at every step
/// (`kernels::gemm::pack_rhs`; products `kernels::gemm::packs` takes: one
/// batch item, at most 512 deep). The packed buffer has the arena to
/// itself. GEMMs of one loop with the same operand share one.
fn pack_loop_invariant_rhs(plan: &mut Plan) {
    let mut i = 0;
    while i < plan.steps.len() {
        let Step::Gemm(g) = &plan.steps[i] else {
            i += 1;
            continue;
        };
        if !gemm::packs(&g.dims()) {
            i += 1;
            continue;
        }
        let rhs = g.rhs;
        let written = |plan: &Plan, (start, end)| loop_writes(plan, start, end).contains(&rhs);
        let mut outer = None;
        let mut around = innermost_loop(plan, i, i);
        while let Some(l) = around
            && !written(plan, l)
        {
            outer = Some(l);
            around =
                l.0.checked_sub(1)
                    .and_then(|s| innermost_loop(plan, s, l.1));
        }
        let Some((start, _)) = outer else {
            i += 1;
            continue;
        };
        let (name, dtype, k, n) = (g.name.clone(), g.dtype, g.k, g.n);
        let strides = [g.rhs_strides[1], g.rhs_strides[2]];
        // One packed copy per operand and loop.
        let shared = (plan.steps[..start].iter().rev()).map_while(|st| {
            if let Step::Pack(p) = st {
                Some(p)
            } else {
                None
            }
        });
        let shared = shared
            .filter(|p| (p.src, p.k, p.n, p.strides, p.dtype) == (rhs, k, n, strides, dtype))
            .map(|p| p.dst)
            .next();
        let dst = match shared {
            Some(dst) => dst,
            None => {
                let Some(len) = gemm::packed_len(k, n) else {
                    i += 1;
                    continue;
                };
                let dst = new_arena_slot(plan, dtype, vec![len], format!("{name}.packed"));
                insert_step(
                    plan,
                    start,
                    Step::Pack(Pack {
                        name: name.clone(),
                        dtype,
                        src: rhs,
                        dst,
                        k,
                        n,
                        strides,
                    }),
                );
                i += 1;
                plan.decisions.push(format!(
                    "{name}: its right operand is the same at every step of the loop: packed once before it"
                ));
                dst
            }
        };
        if let Step::Gemm(g) = &mut plan.steps[i] {
            g.packed = Some(dst);
        }
        i += 1;
    }
}

/// The steps `start..=end` of the innermost loop holding steps `i..=j`: a
/// label at `start` and a jump back to it at `end`.
pub(crate) fn innermost_loop(plan: &Plan, i: usize, j: usize) -> Option<(usize, usize)> {
    (0..=i).rev().find_map(|start| {
        let Step::Label(l) = &plan.steps[start] else {
            return None;
        };
        let end =
            (j..plan.steps.len()).find(|&e| matches!(&plan.steps[e], Step::Jump(t) if t == l))?;
        Some((start, end))
    })
}

/// The slots steps `start..=end` write (a loop's copy of a captured value
/// onto itself writes nothing).
pub(crate) fn loop_writes(plan: &Plan, start: usize, end: usize) -> Vec<SlotId> {
    (plan.steps[start..=end].iter())
        .flat_map(|s| match s {
            Step::Copy { from, to } => (from.iter().zip(to))
                .filter(|(f, t)| f != t)
                .map(|(_, t)| *t)
                .collect(),
            Step::Kernel(_)
            | Step::Gemm(_)
            | Step::Pack(_)
            | Step::Runtime { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => step_slots(s).1,
        })
        .collect()
}

/// Inserts `step` before step `at`, moving what refers to later steps.
fn insert_step(plan: &mut Plan, at: usize, step: Step) {
    for g in &mut plan.groups {
        if g.start >= at {
            g.start += 1;
            g.end += 1;
        }
    }
    for sl in &mut plan.slots {
        if let SlotKind::HandOff { to } = &mut sl.kind
            && *to >= at
        {
            *to += 1;
        }
    }
    plan.steps.insert(at, step);
}

/// [`plan`], for a program whose parameters' buffers it may overwrite
/// once it has read them (a loop body: its parameters are the loop's
/// carries, replaced by what it returns), fusing accumulating GEMMs when
/// `accumulate` (see [`plan`]).
fn plan_with(g: &Graph, params_writable: bool, accumulate: bool) -> Result<Plan> {
    let mut uses: Vec<Vec<NodeId>> = vec![Vec::new(); g.num_values()];
    for id in g.node_ids() {
        for v in &g.node(id).inputs {
            uses[v.index()].push(id);
        }
    }
    let mut is_output = vec![false; g.num_values()];
    for o in g.outputs() {
        is_output[o.value.index()] = true;
    }
    let mut decisions = Vec::new();
    let mut kind = vec![Kind::Buffer; g.num_values()];
    let mut cost = vec![0usize; g.num_values()];
    let mut weight = vec![0usize; g.num_values()];
    let needs_buffer = |consumer: &Node| -> bool {
        match consumer.op {
            Op::Reduce { .. } => !native_reduce(g, consumer, !accumulate),
            // A gather loads the table and its indices from memory.
            Op::Take { .. } => true,
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
            | Op::ArgMax { .. }
            | Op::ArgMin { .. }
            | Op::ArgSort { .. }
            | Op::Cumsum { .. }
            | Op::DotGeneral(_)
            | Op::DynamicSlice { .. }
            | Op::DynamicUpdateSlice
            | Op::Scatter { .. }
            | Op::BitcastConvert(_)
            | Op::Callback(_)
            | Op::Dynamic(_)
            | Op::While { .. }
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. } => !fusible(g, consumer),
        }
    };
    // A gather reads its table from memory; a reshape of a buffer is that
    // buffer read in its own row-major order, so it needs none of its own
    // where the take is a gather whatever its kind: of single elements
    // ([`gathers_elements`]).
    let table_view = |consumer: &Node, v: ValueId, kind: &[Kind]| -> bool {
        gathers_elements(g, consumer)
            && consumer.inputs.first() == Some(&v)
            && consumer.inputs.get(1) != Some(&v)
            && reshaped_buffer(g, v, kind).is_some()
    };
    for id in g.node_ids() {
        let n = g.node(id);
        if !(fusible(g, n) || is_scalar_const(&n.op)) {
            continue;
        }
        let v = n.results[0];
        cost[v.index()] = 1 + n.inputs.iter().map(|i| cost[i.index()]).sum::<usize>();
        weight[v.index()] =
            op_cost(&n.op) + n.inputs.iter().map(|i| weight[i.index()]).sum::<usize>();
        let elems = |x: ValueId| {
            g.ty(x)
                .shape
                .as_known()
                .map(|d| d.iter().product::<usize>())
        };
        // A broadcast that spreads a costly value over many more elements.
        let spread = || {
            uses[v.index()].iter().find(|c| {
                let cn = g.node(**c);
                matches!(cn.op, Op::BroadcastInDim { .. })
                    && elems(cn.results[0])
                        .zip(elems(v))
                        .is_some_and(|(big, small)| big >= small.saturating_mul(BROADCAST_SPREAD))
            })
        };
        let consumers = uses[v.index()].len() + usize::from(is_output[v.index()]);
        let why = if is_output[v.index()] {
            Some("materialized: it is an output".to_string())
        } else if let Some(c) = uses[v.index()].iter().find(|c| {
            let cn = g.node(**c);
            cn.results.is_empty() || (needs_buffer(cn) && !table_view(cn, v, &kind))
        }) {
            Some(format!(
                "materialized: {} '{}' reads it from memory",
                g.node(*c).op.name(),
                g.node(*c).name
            ))
        } else if is_scalar_const(&n.op) {
            None
        } else if let Some(c) = (weight[v.index()] >= BROADCAST_WORTH)
            .then(spread)
            .flatten()
        {
            Some(format!(
                "materialized: broadcast '{}' spreads it over {BROADCAST_SPREAD}× as many elements or more, and its inline cost {} ≥ {BROADCAST_WORTH} (computing it once costs less)",
                g.node(*c).name,
                weight[v.index()]
            ))
        } else if consumers > 1 && cost[v.index()] > RECOMPUTE_LIMIT {
            Some(format!(
                "materialized: {consumers} consumers and inline cost {} > {RECOMPUTE_LIMIT} (recomputing would cost more than a buffer)",
                cost[v.index()]
            ))
        } else {
            None
        };
        match why {
            Some(w) => {
                decisions.push(format!("{}: {w}", n.name));
                cost[v.index()] = 0;
                weight[v.index()] = 0;
            }
            None => kind[v.index()] = Kind::Inline,
        }
    }
    // A reshape can only be inlined over a subtree addressed linearly.
    let mut linear_safe = vec![true; g.num_values()];
    for id in g.node_ids() {
        let n = g.node(id);
        if n.results.len() != 1 {
            continue;
        }
        let v = n.results[0];
        if let Op::Reshape(_) = n.op {
            let x = n.inputs[0];
            if kind[x.index()] == Kind::Inline && !linear_safe[x.index()] {
                kind[x.index()] = Kind::Buffer;
                linear_safe[x.index()] = true;
                decisions.push(format!(
                    "{}: materialized: reshape '{}' reads it, and it is not a contiguous view",
                    g.producer(x).name,
                    n.name
                ));
            }
        }
        if kind[v.index()] == Kind::Inline {
            let shape = g.ty(v).shape.as_known().unwrap_or_default();
            linear_safe[v.index()] = match &n.op {
                op if op.is_elementwise() => n.inputs.iter().all(|i| {
                    let ishape = g.ty(*i).shape.as_known().unwrap_or_default();
                    linear_safe[i.index()] && (ishape == shape || ishape.is_empty())
                }),
                Op::Constant(_) => true,
                Op::Reshape(_) => linear_safe[n.inputs[0].index()],
                Op::Parameter { .. }
                | Op::Iota { .. }
                | Op::Unary(_)
                | Op::Binary(_)
                | Op::Compare(_)
                | Op::Select
                | Op::Clamp
                | Op::Convert(_)
                | Op::BroadcastInDim { .. }
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
                | Op::While { .. }
                | Op::Case { .. }
                | Op::StopGradient
                | Op::CustomVjp { .. } => false,
            };
        }
    }

    // Slots.
    let mut slots: Vec<Slot> = Vec::new();
    let mut slot_of: FxHashMap<ValueId, SlotId> = FxHashMap::default();
    let new_slot = |slots: &mut Vec<Slot>, v: ValueId, k: SlotKind, name: &str| {
        let ty = g.ty(v);
        slots.push(Slot {
            kind: k,
            dtype: ty.dtype,
            dims: ty.shape.as_known().unwrap_or_default(),
            name: name.to_string(),
        });
        slots.len() - 1
    };
    for id in g.node_ids() {
        let n = g.node(id);
        for &v in &n.results {
            if kind[v.index()] == Kind::Inline {
                continue;
            }
            let k = match &n.op {
                Op::Parameter { index } => SlotKind::Input(*index),
                Op::Constant(l) => SlotKind::Const(l.clone()),
                _ if is_output[v.index()] => SlotKind::Output,
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
                | Op::Callback(_)
                | Op::Dynamic(_)
                | Op::While { .. }
                | Op::Case { .. }
                | Op::StopGradient
                | Op::CustomVjp { .. } => SlotKind::Temp { offset: 0 },
            };
            let s = new_slot(&mut slots, v, k, &n.name);
            slot_of.insert(v, s);
        }
    }

    // Steps.
    let mut steps = Vec::new();
    for id in g.node_ids() {
        let n = g.node(id);
        let Some(&v) = n.results.first() else {
            let inputs = slots_of(&slot_of, &n.inputs)?;
            steps.push(Step::Runtime {
                graph: 0,
                node: id,
                inputs,
                outputs: vec![],
            });
            continue;
        };
        // A kernel computes the node (a gather only as part of a reader).
        let kernel_op =
            (fusible(g, n) || is_scalar_const(&n.op)) && !matches!(n.op, Op::Take { .. });
        match &n.op {
            Op::Parameter { .. } | Op::Constant(_)
                if !(is_output[v.index()] && kind[v.index()] == Kind::Inline) => {}
            // A take only kernels read: a gather in each of them, after a
            // step that checks its indices (the take's error, raised
            // before anything is read; a runtime step with no outputs).
            // A take of single elements with a buffer of its own (an
            // output, or read by several kernels): the same check, then a
            // kernel whose root is the gather (the runtime kernel copied
            // element by element).
            Op::Take { .. } if kind[v.index()] == Kind::Buffer && gathers_elements(g, n) => {
                decisions.push(format!(
                    "{}: a kernel of its gather (a runtime step checks the indices first)",
                    n.name
                ));
                steps.push(Step::Runtime {
                    graph: 0,
                    node: id,
                    inputs: slots_of(&slot_of, &n.inputs[1..2])?,
                    outputs: vec![],
                });
                let dims = g.ty(v).shape.as_known().unwrap_or_default();
                let mut b = KernelBuilder::new(g, &kind, &slot_of, dims.len());
                b.root = Some(v);
                let root = b.build(v, &IndexMap::identity(dims.len()))?;
                let out_strides = row_major(&dims);
                let k = b.finish(
                    &n.name,
                    KernelKind::Loop,
                    dims,
                    root,
                    slots_of(&slot_of, &[v])?[0],
                    out_strides,
                );
                steps.push(Step::Kernel(k));
            }
            Op::Take { .. } if kind[v.index()] == Kind::Inline => {
                decisions.push(format!(
                    "{}: fused into its readers as a gather (a runtime step checks the indices first)",
                    n.name
                ));
                steps.push(Step::Runtime {
                    graph: 0,
                    node: id,
                    inputs: slots_of(&slot_of, &n.inputs[1..2])?,
                    outputs: vec![],
                });
            }
            Op::Reduce { op, axes, .. } if native_reduce(g, n, !accumulate) => {
                let x = n.inputs[0];
                let in_dims = g.ty(x).shape.as_known().unwrap_or_default();
                let mut b = KernelBuilder::new(g, &kind, &slot_of, in_dims.len());
                let root = b.build(x, &IndexMap::identity(in_dims.len()))?;
                let reduced: Vec<bool> = (0..in_dims.len()).map(|d| axes.contains(&d)).collect();
                // Output strides: row-major over the kept dims.
                let mut out_strides = vec![0i64; in_dims.len()];
                let mut acc = 1i64;
                for d in (0..in_dims.len()).rev() {
                    if !reduced[d] {
                        out_strides[d] = acc;
                        acc *= in_dims[d] as i64;
                    }
                }
                let k = b.finish(
                    &n.name,
                    KernelKind::Reduce { op: *op, reduced },
                    in_dims,
                    root,
                    slots_of(&slot_of, &[v])?[0],
                    out_strides,
                );
                steps.push(Step::Kernel(k));
            }
            Op::DotGeneral(dd)
                if matches!(g.ty(v).dtype, DType::F32 | DType::F64)
                    && gemm_shape(g, n, dd).is_some() =>
            {
                let (b, m, k, nn, ls, rs) =
                    gemm_shape(g, n, dd).ok_or_else(|| Error::internal("gemm shape"))?;
                steps.push(Step::Gemm(Gemm {
                    name: n.name.clone(),
                    dtype: g.ty(v).dtype,
                    lhs: slots_of(&slot_of, &n.inputs[..1])?[0],
                    rhs: slots_of(&slot_of, &n.inputs[1..2])?[0],
                    out: slots_of(&slot_of, &[v])?[0],
                    b,
                    m,
                    k,
                    n: nn,
                    lhs_strides: ls,
                    rhs_strides: rs,
                    threads: true,
                    accumulate: false,
                    scale: 1.0,
                    epilogue: None,
                    packed: None,
                }));
                decisions.push(format!(
                    "{}: GEMM call (tl_gemm: the gemm crate), b={b} m={m} k={k} n={nn}",
                    n.name
                ));
            }
            _ if kernel_op && kind[v.index()] == Kind::Buffer => {
                let dims = g.ty(v).shape.as_known().unwrap_or_default();
                let mut b = KernelBuilder::new(g, &kind, &slot_of, dims.len());
                b.root = Some(v);
                let root = b.build(v, &IndexMap::identity(dims.len()))?;
                let out_strides = row_major(&dims);
                let k = b.finish(
                    &n.name,
                    KernelKind::Loop,
                    dims,
                    root,
                    slots_of(&slot_of, &[v])?[0],
                    out_strides,
                );
                steps.push(Step::Kernel(k));
            }
            _ if kernel_op => {}
            op @ (Op::Parameter { .. }
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
            | Op::While { .. }
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. }) => {
                decisions.push(if op.regions().is_empty() {
                    format!(
                        "{}: runtime kernel ({} is not emitted inline)",
                        n.name,
                        op.name()
                    )
                } else {
                    format!(
                        "{}: {} in main: its regions' steps between labels, their buffers in the arena",
                        n.name,
                        op.name()
                    )
                });
                let inputs = slots_of(&slot_of, &n.inputs)?;
                let outputs = slots_of(&slot_of, &n.results)?;
                steps.push(Step::Runtime {
                    graph: 0,
                    node: id,
                    inputs,
                    outputs,
                });
            }
        }
    }
    let outputs = g
        .outputs()
        .iter()
        .map(|o| slots_of(&slot_of, &[o.value]).map(|s| s[0]))
        .collect::<Result<_>>()?;
    let mut plan = Plan {
        graph: g.clone(),
        slots,
        steps,
        outputs,
        arena_bytes: 0,
        decisions,
        groups: Vec::new(),
        regions: Vec::new(),
        labels: 0,
        views: Vec::new(),
    };
    if accumulate {
        accumulate_gemms(&mut plan, params_writable);
        scale_into_gemms(&mut plan);
    }
    write_copies_in_place(&mut plan);
    share_reduced_values(&mut plan);
    copy_halves_as_bits(&mut plan);
    gemm_epilogues(&mut plan);
    find_row_groups(&mut plan);
    crate::tile::tile_kernels(&mut plan);
    update_in_place(&mut plan, params_writable);
    mark_handoffs(&mut plan);
    slice_views(&mut plan);
    plan_buffers(&mut plan);
    // Control flow, last first so that earlier step numbers stay valid.
    for i in (0..plan.steps.len()).rev() {
        if let Step::Runtime { graph: 0, node, .. } = &plan.steps[i]
            && !plan.graph.node(*node).op.regions().is_empty()
        {
            expand_control(&mut plan, i, accumulate)?;
        }
    }
    Ok(plan)
}

/// Replaces the placeholder step `at` of a `while` or `case` by the steps
/// of its regions, between labels and jumps.
fn expand_control(plan: &mut Plan, at: usize, accumulate: bool) -> Result<()> {
    let Step::Runtime {
        node,
        inputs,
        outputs,
        ..
    } = plan.steps[at].clone()
    else {
        return Err(Error::internal("not a control-flow placeholder"));
    };
    let op = plan.graph.node(node).op.clone();
    let mut new: Vec<Step> = Vec::new();
    let mut groups: Vec<RowGroup> = Vec::new();
    let end = plan.labels_next();
    if let Op::While { cond, body } = &op {
        let start = plan.labels_next();
        // Carries live in the loop's result slots, but a carry the body
        // passes through unchanged (a captured value) is read where it is:
        // nothing copies it in, and its result, when used, is copied out
        // once after the loop.
        let bg = body.graph();
        let params = bg.params();
        let through: Vec<bool> = (0..inputs.len())
            .map(|k| bg.outputs().get(k).map(|o| o.value) == params.get(k).copied())
            .collect();
        let carries: Vec<SlotId> = (0..inputs.len())
            .map(|k| if through[k] { inputs[k] } else { outputs[k] })
            .collect();
        let (copy_in, copy_out): (Vec<usize>, Vec<usize>) =
            (0..inputs.len()).partition(|k| !through[*k]);
        // A carry whose initial value is a fill (a kernel reading nothing:
        // the zeros a loop's stacked outputs start from) is filled in its
        // own slot instead of copied, and the fill's slot is never
        // written when the loop was its only reader and reads it only
        // through copied carries (not as a captured value, in place).
        let mut copied = Vec::new();
        let mut fills = Vec::new();
        for &k in &copy_in {
            let captured = (0..inputs.len()).any(|j| through[j] && inputs[j] == inputs[k]);
            match fill_before(plan, at, inputs[k]).filter(|_| !captured) {
                Some((p, Step::Kernel(mut f))) => {
                    f.out = outputs[k];
                    if !fills.iter().any(|(q, _)| *q == p) {
                        fills.push((p, f.name.clone()));
                    }
                    new.push(Step::Kernel(f));
                }
                Some(_) | None => copied.push(k),
            }
        }
        for (p, name) in fills {
            plan.steps[p] = Step::Copy {
                from: Vec::new(),
                to: Vec::new(),
            };
            plan.decisions.push(format!(
                "{name}: filled in the carries of '{}' instead of copied into them",
                plan.graph.node(node).name
            ));
        }
        new.push(Step::Copy {
            from: copied.iter().map(|k| inputs[*k]).collect(),
            to: copied.iter().map(|k| outputs[*k]).collect(),
        });
        new.push(Step::Label(start));
        let c = merge_region(
            plan,
            cond.graph(),
            &carries,
            at + new.len(),
            &mut groups,
            false,
            accumulate,
        )?;
        new.extend(c.steps);
        new.push(Step::BranchUnless {
            pred: c.outputs[0],
            label: end,
        });
        let b = merge_region(
            plan,
            bg,
            &carries,
            at + new.len(),
            &mut groups,
            true,
            accumulate,
        )?;
        new.extend(b.steps);
        // A body returning carry j as carry k (a swap) reads a carry the
        // copy below may already have overwritten: stage it first.
        let (mut staged_from, mut staged_to) = (Vec::new(), Vec::new());
        let next: Vec<SlotId> = b
            .outputs
            .iter()
            .zip(&carries)
            .map(|(&o, &carry)| {
                if o != carry && carries.contains(&o) {
                    let t = arena_slot(plan, carry, "staged");
                    staged_from.push(o);
                    staged_to.push(t);
                    t
                } else {
                    o
                }
            })
            .collect();
        if !staged_from.is_empty() {
            new.push(Step::Copy {
                from: staged_from,
                to: staged_to,
            });
        }
        new.push(Step::Copy {
            from: next,
            to: carries.clone(),
        });
        new.push(Step::Jump(start));
        new.push(Step::Label(end));
        let results = &plan.graph.node(node).results;
        let used = plan.graph.use_counts();
        let copy_out: Vec<usize> = copy_out
            .into_iter()
            .filter(|k| used[results[*k].index()] > 0)
            .collect();
        if !copy_out.is_empty() {
            new.push(Step::Copy {
                from: copy_out.iter().map(|k| inputs[*k]).collect(),
                to: copy_out.iter().map(|k| outputs[*k]).collect(),
            });
        }
    } else if let Op::Case { branches } = &op {
        let labels: Vec<usize> = branches.iter().map(|_| plan.labels_next()).collect();
        new.push(Step::Switch {
            index: inputs[0],
            labels: labels.clone(),
        });
        for (r, l) in branches.iter().zip(&labels) {
            new.push(Step::Label(*l));
            let m = merge_region(
                plan,
                r.graph(),
                &inputs[1..],
                at + new.len(),
                &mut groups,
                false,
                accumulate,
            )?;
            new.extend(m.steps);
            new.push(Step::Copy {
                from: m.outputs,
                to: outputs.clone(),
            });
            new.push(Step::Jump(end));
        }
        new.push(Step::Label(end));
    } else {
        return Err(Error::internal("not a control-flow op"));
    }
    // Everything after the placeholder moves by the steps added.
    let shift = new.len() - 1;
    for g in &mut plan.groups {
        if g.start > at {
            g.start += shift;
            g.end += shift;
        }
    }
    for sl in &mut plan.slots {
        if let SlotKind::HandOff { to } = &mut sl.kind
            && *to > at
        {
            *to += shift;
        }
    }
    plan.groups.extend(groups);
    plan.groups.sort_by_key(|g| g.start);
    plan.steps.splice(at..=at, new);
    Ok(())
}

/// The step before `at` that fills `slot`, and a copy of it, when the
/// control-flow placeholder `at` is the only step reading `slot`: its one
/// writer, a kernel reading no slot (constants and indices only), in no
/// row group, and `slot` a temporary that is not an output.
fn fill_before(plan: &Plan, at: usize, slot: SlotId) -> Option<(usize, Step)> {
    if plan.outputs.contains(&slot) || !matches!(plan.slots[slot].kind, SlotKind::Temp { .. }) {
        return None;
    }
    let mut writer = None;
    for (i, step) in plan.steps.iter().enumerate() {
        let (reads, writes) = step_slots(step);
        if i != at && reads.contains(&slot) {
            return None;
        }
        if writes.contains(&slot) {
            if writer.is_some() || i > at {
                return None;
            }
            writer = Some(i);
        }
    }
    let p = writer?;
    let Step::Kernel(k) = &plan.steps[p] else {
        return None;
    };
    let fill = k.out == slot
        && k.stash.is_none()
        && k.nodes.iter().all(|e| e.slot().is_none())
        && !plan.groups.iter().any(|g| (g.start..g.end).contains(&p));
    fill.then(|| (p, plan.steps[p].clone()))
}

/// A `dynamic_update_slice` or `scatter` whose operand's buffer nothing
/// reads later (no later step, no output) writes its update into that
/// buffer instead of copying the operand: its result takes the operand's
/// slot, and the runtime step writes only the block or the indexed rows (a
/// `scan` filling its stacked outputs one step at a time, or a loop adding
/// into a table at a few indices per step, is linear, not quadratic). The operand's
/// buffer must be ours to write: a temporary no callback produced, or a
/// loop body's parameter (`params_writable`), whose result becomes the
/// next carry in the same slot.
fn update_in_place(plan: &mut Plan, params_writable: bool) {
    for i in 0..plan.steps.len() {
        let Some((node, inputs, outputs)) = own_runtime_step(&plan.steps[i]) else {
            continue;
        };
        let n = plan.graph.node(node);
        if !matches!(n.op, Op::DynamicUpdateSlice | Op::Scatter { .. }) || outputs.len() != 1 {
            continue;
        }
        let (s_in, s_out) = (inputs[0], outputs[0]);
        let producer = plan.graph.producer(n.inputs[0]);
        let ours = match plan.slots[s_in].kind {
            SlotKind::Temp { .. } => !matches!(producer.op, Op::Callback(_)),
            SlotKind::Input(_) => params_writable,
            SlotKind::Const(_) | SlotKind::Output | SlotKind::HandOff { .. } => false,
        };
        let in_temp = matches!(plan.slots[s_in].kind, SlotKind::Temp { .. });
        // Which slot stays: the operand's (the result's later readers are
        // renamed), or for a graph output computed from a temporary, the
        // output's (the operand's earlier writers are renamed).
        let keep_output = match plan.slots[s_out].kind {
            SlotKind::Temp { .. } => Some(false),
            // A body's result slot: it becomes the next carry, which is the
            // parameter's slot again.
            SlotKind::Output if params_writable && !in_temp => Some(false),
            SlotKind::Output if in_temp => Some(true),
            SlotKind::Output
            | SlotKind::Input(_)
            | SlotKind::Const(_)
            | SlotKind::HandOff { .. } => None,
        };
        let read_later = plan.steps[i + 1..]
            .iter()
            .any(|st| step_slots(st).0.contains(&s_in))
            || plan.outputs.contains(&s_in)
            || inputs[1..].contains(&s_in);
        let Some(keep_output) = keep_output else {
            continue;
        };
        if !ours || read_later || plan.outputs.iter().filter(|o| **o == s_out).count() > 1 {
            continue;
        }
        let (name, op) = (n.name.clone(), n.op.name());
        let (from, to) = if keep_output {
            (s_in, s_out)
        } else {
            (s_out, s_in)
        };
        let steps = if keep_output {
            0..i + 1
        } else {
            i..plan.steps.len()
        };
        rename_slot(plan, steps, from, to);
        plan.decisions.push(format!(
            "{name}: {op} in place (its operand's buffer is not read afterwards)"
        ));
    }
}

/// A runtime step of the plan's own graph (not of a region merged into
/// it): its node, operand slots and result slots.
fn own_runtime_step(step: &Step) -> Option<(NodeId, &[SlotId], &[SlotId])> {
    let Step::Runtime {
        graph: 0,
        node,
        inputs,
        outputs,
    } = step
    else {
        return None;
    };
    Some((*node, inputs, outputs))
}

/// A loop kernel that only copies one slot whole, element for element in
/// row-major order (a `reshape`, or a `convert` to the same dtype, of a
/// value a runtime step or a GEMM produced: it is materialized because
/// such steps read and write memory), is dropped: its producer writes
/// straight into the kernel's output slot, whose bytes are the same in the
/// same order. The copied slot must be a temporary that only this kernel
/// reads, written by that one step alone: not a GEMM accumulating into
/// it, not a callback (its results come from Python), not a loop or
/// branch (expanded later, around its own slots), and not a
/// `dynamic_update_slice` or `scatter`, which may run in place and then
/// read their operand's shape from the slot's dims. A loop taking one
/// row of a stacked input per step as a vector (`dynamic_slice` then
/// `reshape`) then copies the row once, not twice.
fn write_copies_in_place(plan: &mut Plan) {
    let mut j = 0;
    while j < plan.steps.len() {
        let Some((src, out, name)) = (match &plan.steps[j] {
            Step::Kernel(k) => whole_copy(plan, k).map(|src| (src, k.out, k.name.clone())),
            Step::Runtime { .. }
            | Step::Gemm(_)
            | Step::Pack(_)
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => None,
        }) else {
            j += 1;
            continue;
        };
        let writers: Vec<usize> = (0..plan.steps.len())
            .filter(|&i| step_slots(&plan.steps[i]).1.contains(&src))
            .collect();
        let readers = (0..plan.steps.len())
            .filter(|&i| step_slots(&plan.steps[i]).0.contains(&src))
            .count();
        let producer = match writers.as_slice() {
            [i] if *i < j => Some(*i),
            _ => None,
        };
        // The producer, described, when it may write the kernel's buffer.
        let what = producer.and_then(|i| match &plan.steps[i] {
            Step::Gemm(g) if !g.accumulate && g.out == src => Some(format!("GEMM '{}'", g.name)),
            Step::Runtime {
                graph,
                node,
                outputs,
                ..
            } => {
                let n = plan.step_graph(*graph).node(*node);
                (outputs.iter().filter(|&&o| o == src).count() == 1
                    && n.op.regions().is_empty()
                    && !matches!(
                        n.op,
                        Op::Callback(_) | Op::DynamicUpdateSlice | Op::Scatter { .. }
                    ))
                .then(|| format!("{} '{}'", n.op.name(), n.name))
            }
            Step::Gemm(_)
            | Step::Kernel(_)
            | Step::Pack(_)
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => None,
        });
        let out_free = !plan.outputs.contains(&src)
            && readers == 1
            && !plan.steps[..j].iter().any(|st| {
                let (r, w) = step_slots(st);
                r.contains(&out) || w.contains(&out)
            });
        let (Some(i), Some(what), true) = (producer, what, out_free) else {
            j += 1;
            continue;
        };
        rename_slot(plan, i..i + 1, src, out);
        plan.steps.remove(j);
        plan.decisions.push(format!(
            "{name}: no copy: {what} writes its result into this kernel's buffer (the same bytes in the same order)"
        ));
    }
}

/// The slot a loop kernel copies whole into its output, element for
/// element in row-major order with no conversion, if that is all it does.
fn whole_copy(plan: &Plan, k: &Kernel) -> Option<SlotId> {
    if k.kind != KernelKind::Loop || k.stash.is_some() || k.nodes.len() != 1 || k.root != 0 {
        return None;
    }
    let ENode::Load {
        slot,
        dtype,
        offset: 0,
        strides,
    } = &k.nodes[0]
    else {
        return None;
    };
    let (from, to) = (&plan.slots[*slot], &plan.slots[k.out]);
    let whole = *strides == row_major(&k.dims)
        && k.out_strides == row_major(&k.dims)
        && *dtype == from.dtype
        && from.dtype == to.dtype
        && from.dtype != DType::String
        && from.bytes() == to.bytes()
        && k.dims.iter().product::<usize>() * from.dtype.size() == from.bytes();
    (whole && matches!(from.kind, SlotKind::Temp { .. }) && *slot != k.out).then_some(*slot)
}

/// Renames slot `from` to `to` in `steps` (a range of the plan's) and in
/// the plan's outputs: how a result is made to live in its operand's
/// buffer (or the operand in its result's).
fn rename_slot(plan: &mut Plan, steps: std::ops::Range<usize>, from: SlotId, to: SlotId) {
    let mut rename = |s: &mut SlotId| {
        if *s == from {
            *s = to;
        }
    };
    for st in &mut plan.steps[steps] {
        for_each_slot(st, &mut rename);
    }
    for o in &mut plan.outputs {
        rename(o);
    }
}

/// The operand slots of a loop kernel that only computes `a + b` (f32 or
/// f64) over two whole slots read in its own row-major order.
fn add_of_two_slots(k: &Kernel) -> Option<(SlotId, SlotId, DType)> {
    if k.kind != KernelKind::Loop || k.stash.is_some() || k.root != 2 || k.nodes.len() != 3 {
        return None;
    }
    let ENode::Binary(BinaryOp::Add, 0, 1, dtype) = k.nodes[2] else {
        return None;
    };
    if !matches!(dtype, DType::F32 | DType::F64) || k.out_strides != row_major(&k.dims) {
        return None;
    }
    let whole = |n: &ENode| {
        if let ENode::Load {
            slot,
            dtype: d,
            offset: 0,
            strides,
        } = n
            && *d == dtype
            && *strides == k.out_strides
        {
            Some(*slot)
        } else {
            None
        }
    };
    let (a, b) = (whole(&k.nodes[0])?, whole(&k.nodes[1])?);
    (a != b).then_some((a, b, dtype))
}

/// Fuses `add(acc, dot_general(..))` (either order), where the product is
/// a GEMM step whose result only the add reads: the GEMM adds its product
/// into the accumulator's buffer (`gemm`'s `dst = dst + lhs·rhs`) and the
/// add kernel and the product's temporary go — in a loop body computing
/// a weight gradient, one 1 MiB temporary written and two read per step
/// fewer. Not in exact mode ([`plan`]): `gemm` adds each k-block's partial
/// sum to the accumulator in turn, which rounds differently from adding
/// the finished product when `k` spans several blocks.
///
/// The accumulator's buffer is overwritten, so, as for
/// [`update_in_place`]: it must be ours (a temporary no callback produced,
/// or a loop body's parameter with `params_writable`), no step after the
/// GEMM but the add may read it, it is no output, no step between the GEMM
/// and the add writes it, and the GEMM does not read it. The add's result
/// then lives in the accumulator's slot (later readers and the outputs
/// renamed; a loop body's result becomes the next carry in the parameter's
/// own slot, whose copy is then skipped), or for a graph output computed
/// from a temporary accumulator, the accumulator lives in the output's
/// slot (its earlier writers and readers renamed).
fn accumulate_gemms(plan: &mut Plan, params_writable: bool) {
    let mut j = 0;
    while j < plan.steps.len() {
        let Step::Kernel(k) = &plan.steps[j] else {
            j += 1;
            continue;
        };
        let Some((a, b, dtype)) = add_of_two_slots(k) else {
            j += 1;
            continue;
        };
        let (add, s_out) = (k.name.clone(), k.out);
        let (mut fused, mut why_not) = (false, None);
        for (s_dot, s_acc) in [(b, a), (a, b)] {
            // (Not a product of one column: outside exact mode it becomes
            // row reductions, `matvec_as_reductions`, which write their
            // sums instead of adding them.)
            let Some(i) = plan.steps[..j].iter().position(|st| {
                matches!(st, Step::Gemm(g)
                    if g.out == s_dot && !g.accumulate && g.dtype == dtype && g.n > 1)
            }) else {
                continue;
            };
            let Step::Gemm(g) = &plan.steps[i] else {
                continue;
            };
            let dot = g.name.clone();
            match accumulate_safe(plan, i, j, s_dot, s_acc, params_writable) {
                Ok(keep_output) => {
                    let (from, to) = if keep_output {
                        (s_acc, s_out)
                    } else {
                        (s_out, s_acc)
                    };
                    let steps = if keep_output {
                        0..i
                    } else {
                        j + 1..plan.steps.len()
                    };
                    rename_slot(plan, steps, from, to);
                    if let Step::Gemm(g) = &mut plan.steps[i] {
                        g.out = if keep_output { s_out } else { s_acc };
                        g.accumulate = true;
                    }
                    plan.steps.remove(j);
                    plan.decisions.push(format!(
                        "{add}: fused into GEMM '{dot}', which adds its product into the accumulator's buffer (dst += lhs·rhs; no add kernel, no temporary for the product; not in exact mode)"
                    ));
                    fused = true;
                }
                Err(why) => {
                    // Both operands may be GEMMs: try the other one.
                    why_not.get_or_insert(format!(
                        "{add}: not fused into GEMM '{dot}' as an accumulation: {why}"
                    ));
                    continue;
                }
            }
            break;
        }
        if !fused {
            plan.decisions.extend(why_not);
            j += 1;
        }
    }
}

/// The slot a kernel scales by a power of two, the scale and the kernel's
/// output: `out = x · c` (either order) over the whole of `x`, laid out as
/// `out`, f32 or f64.
fn scaled_slot(k: &Kernel) -> Option<(SlotId, f64)> {
    if k.kind != KernelKind::Loop || k.stash.is_some() || k.root != 2 || k.nodes.len() != 3 {
        return None;
    }
    let ENode::Binary(BinaryOp::Mul, a, b, dtype) = k.nodes[2] else {
        return None;
    };
    if !matches!(dtype, DType::F32 | DType::F64) || k.out_strides != row_major(&k.dims) {
        return None;
    }
    let (load, c) = match (&k.nodes[a], &k.nodes[b]) {
        (l @ ENode::Load { .. }, ENode::Const(c)) | (ENode::Const(c), l @ ENode::Load { .. }) => {
            (l, c)
        }
        _ => return None,
    };
    let ENode::Load {
        slot,
        dtype: d,
        offset: 0,
        strides,
    } = load
    else {
        return None;
    };
    let c = match c.element(0) {
        Scalar::Float(c, _) => c,
        Scalar::Bool(_) | Scalar::Int(_) | Scalar::Complex(..) => return None,
    };
    let power_of_two = tensorlift_ir::passes::is_power_of_two(c);
    (*d == dtype && *strides == k.out_strides && power_of_two).then_some((*slot, c))
}

/// Moves an operand's scale by a power of two into the GEMM reading it:
/// `dot(x · c, y)` calls `gemm` on `x` with `beta = c` (`Gemm::scale`),
/// and the kernel writing `x · c` (attention's `q · 0.125`, which
/// `passes::scale_into_dot` puts on the smaller operand) and its
/// temporary go. The bits are those of the product of the scaled
/// operand: each block of sums is scaled once, exactly, as every product
/// and partial sum of the scaled operand was, unless a value leaves the
/// normal range, where the JIT outside exact mode already allows a
/// difference (`scale_into_dot`). Not in exact mode ([`plan`]).
///
/// The kernel's output must be a temporary only that GEMM reads (as one
/// operand), later in the same straight run of steps, with nothing
/// between them writing `x` or holding control flow, nor the GEMM itself
/// (its accumulator); the GEMM not yet scaled, with more than one column (one column becomes reductions,
/// [`matvec_as_reductions`]).
fn scale_into_gemms(plan: &mut Plan) {
    let mut j = 0;
    while j < plan.steps.len() {
        let Step::Kernel(k) = &plan.steps[j] else {
            j += 1;
            continue;
        };
        let Some((x, c)) = scaled_slot(k) else {
            j += 1;
            continue;
        };
        let (s, name) = (k.out, k.name.clone());
        let readers: Vec<usize> = (plan.steps.iter().enumerate())
            .filter(|(_, st)| step_slots(st).0.contains(&s))
            .map(|(i, _)| i)
            .collect();
        let fits = match readers[..] {
            [i] if i > j => {
                if let Step::Gemm(g) = &plan.steps[i] {
                    // (Not when the GEMM writes `x`: an accumulating GEMM
                    // whose accumulator is `x`, `x + (x·c) @ w`, would read
                    // the rows it overwrites.)
                    (g.lhs == s) != (g.rhs == s)
                        && g.out != x
                        && !step_slots(&plan.steps[i]).1.contains(&x)
                        && g.scale == 1.0
                        && g.n > 1
                        && g.packed.is_none()
                        && plan.slots[x].dims.iter().product::<usize>()
                            == plan.slots[s].dims.iter().product::<usize>()
                        && matches!(plan.slots[s].kind, SlotKind::Temp { .. })
                        && !plan.outputs.contains(&s)
                        && plan.steps[j + 1..i].iter().all(|st| {
                            !step_slots(st).1.contains(&x)
                                && !matches!(st, Step::Runtime { graph: 0, node, .. }
                                    if !plan.graph.node(*node).op.regions().is_empty())
                        })
                } else {
                    false
                }
            }
            _ => false,
        };
        if !fits {
            j += 1;
            continue;
        }
        let i = readers[0];
        if let Step::Gemm(g) = &mut plan.steps[i] {
            if g.lhs == s {
                g.lhs = x;
            } else {
                g.rhs = x;
            }
            g.scale = c;
            let dot = g.name.clone();
            plan.decisions.push(format!(
                "{name}: its scale by {c} moved into GEMM '{dot}' (gemm's beta; no kernel, no temporary; not in exact mode)"
            ));
        }
        plan.steps.remove(j);
    }
}

/// Whether GEMM step `i`, writing `s_dot`, may add its product into
/// `s_acc` in place of the add kernel `j` reading both (see
/// [`accumulate_gemms`]): `Ok(keep_output)` naming the slot that stays
/// (`true`: the add's output slot, `false`: the accumulator's), or why not.
fn accumulate_safe(
    plan: &Plan,
    i: usize,
    j: usize,
    s_dot: SlotId,
    s_acc: SlotId,
    params_writable: bool,
) -> std::result::Result<bool, &'static str> {
    let Step::Gemm(g) = &plan.steps[i] else {
        return Err("not a GEMM");
    };
    let Step::Kernel(k) = &plan.steps[j] else {
        return Err("not a kernel");
    };
    let s_out = k.out;
    let (acc, out, prod) = (&plan.slots[s_acc], &plan.slots[s_out], &plan.slots[s_dot]);
    let elements = g.b * g.m * g.n;
    if acc.dims != out.dims
        || acc.dtype != out.dtype
        || prod.dtype != out.dtype
        || acc.dims.iter().product::<usize>() != elements
        || prod.dims.iter().product::<usize>() != elements
    {
        return Err("the accumulator's buffer has another shape or type");
    }
    if !matches!(prod.kind, SlotKind::Temp { .. })
        || plan.outputs.contains(&s_dot)
        || plan
            .steps
            .iter()
            .enumerate()
            .any(|(x, st)| x != j && step_slots(st).0.contains(&s_dot))
    {
        return Err("the product is read elsewhere too");
    }
    if g.lhs == s_acc || g.rhs == s_acc {
        return Err("the GEMM reads the accumulator");
    }
    let acc_temp = matches!(acc.kind, SlotKind::Temp { .. });
    let ours = match acc.kind {
        SlotKind::Temp { .. } => plan.steps[..i].iter().all(|st| match st {
            Step::Runtime {
                node,
                graph: 0,
                outputs,
                ..
            } if outputs.contains(&s_acc) => !matches!(plan.graph.node(*node).op, Op::Callback(_)),
            Step::Runtime { .. }
            | Step::Kernel(_)
            | Step::Gemm(_)
            | Step::Pack(_)
            | Step::Copy { .. }
            | Step::Label(_)
            | Step::Jump(_)
            | Step::BranchUnless { .. }
            | Step::Switch { .. } => true,
        }),
        SlotKind::Input(_) => params_writable,
        SlotKind::Const(_) | SlotKind::Output | SlotKind::HandOff { .. } => false,
    };
    if !ours {
        return Err(
            "the accumulator's buffer is not ours to overwrite (an input, constant or output)",
        );
    }
    if plan.outputs.contains(&s_acc)
        || plan.steps[i + 1..]
            .iter()
            .enumerate()
            .any(|(x, st)| i + 1 + x != j && step_slots(st).0.contains(&s_acc))
    {
        return Err("the accumulator is read after the GEMM");
    }
    if plan.steps[i + 1..j]
        .iter()
        .any(|st| step_slots(st).1.contains(&s_acc))
    {
        return Err("the accumulator is computed after the GEMM");
    }
    if plan.outputs.iter().filter(|o| **o == s_out).count() > 1 {
        return Err("the sum is returned more than once");
    }
    match out.kind {
        SlotKind::Temp { .. } => Ok(false),
        // A body's result slot: it becomes the next carry, which is the
        // parameter's slot again.
        SlotKind::Output if params_writable && !acc_temp => Ok(false),
        SlotKind::Output if acc_temp => Ok(true),
        SlotKind::Output | SlotKind::Input(_) | SlotKind::Const(_) | SlotKind::HandOff { .. } => {
            Err("the sum's slot cannot take the accumulator's place")
        }
    }
}

/// Calls `f` on every slot kernel `k` names.
fn for_each_kernel_slot(k: &mut Kernel, f: &mut dyn FnMut(&mut SlotId)) {
    for n in &mut k.nodes {
        if let ENode::Load { slot, .. } | ENode::Gather { slot, .. } = n {
            f(slot);
        }
    }
    f(&mut k.out);
    if let Some(st) = &mut k.stash {
        f(&mut st.slot);
    }
}

/// Calls `f` on every slot `step` names.
fn for_each_slot(step: &mut Step, f: &mut dyn FnMut(&mut SlotId)) {
    match step {
        Step::Kernel(k) => for_each_kernel_slot(k, f),
        Step::Gemm(g) => {
            f(&mut g.lhs);
            f(&mut g.rhs);
            f(&mut g.out);
            if let Some(e) = &mut g.epilogue {
                for_each_kernel_slot(&mut e.kernel, f);
            }
            if let Some(s) = &mut g.packed {
                f(s);
            }
        }
        Step::Pack(p) => {
            f(&mut p.src);
            f(&mut p.dst);
        }
        Step::Runtime {
            inputs, outputs, ..
        } => inputs.iter_mut().chain(outputs.iter_mut()).for_each(f),
        Step::Copy { from, to } => from.iter_mut().chain(to.iter_mut()).for_each(f),
        Step::Label(_) | Step::Jump(_) => {}
        Step::BranchUnless { pred, .. } => f(pred),
        Step::Switch { index, .. } => f(index),
    }
}

/// GEMM steps with one output column (a matrix-vector product, `n = 1`)
/// become reduction kernels: `out[b, i] = Σ_k lhs[b, i, k] · rhs[b, k]`,
/// vectorized along `k` and split over rows like any row reduction.
/// The GEMM call (matrixmultiply when this was measured) packed the whole
/// matrix on every call, which for a vector is most of the work. Not in exact mode: the sums are ordered as
/// the reduction kernels order them, not as the GEMM (and the interpreter,
/// which calls the same GEMM) does.
pub fn matvec_as_reductions(plan: &mut Plan) {
    for i in 0..plan.steps.len() {
        let Step::Gemm(g) = &plan.steps[i] else {
            continue;
        };
        if g.n != 1 || g.m == 0 || g.k == 0 || g.epilogue.is_some() || g.accumulate {
            continue;
        }
        let [lb, lm, lk] = g.lhs_strides.map(|s| s as i64);
        let [rb, rk, _] = g.rhs_strides.map(|s| s as i64);
        let (dims, ls, rs, out_strides, reduced) = if g.b == 1 {
            (
                vec![g.m, g.k],
                vec![lm, lk],
                vec![0, rk],
                vec![1, 0],
                vec![false, true],
            )
        } else {
            (
                vec![g.b, g.m, g.k],
                vec![lb, lm, lk],
                vec![rb, 0, rk],
                vec![g.m as i64, 1, 0],
                vec![false, false, true],
            )
        };
        let kernel = Kernel {
            name: g.name.clone(),
            kind: KernelKind::Reduce {
                op: ReduceOp::Sum,
                reduced,
            },
            dims,
            nodes: vec![
                ENode::Load {
                    slot: g.lhs,
                    dtype: g.dtype,
                    offset: 0,
                    strides: ls,
                },
                ENode::Load {
                    slot: g.rhs,
                    dtype: g.dtype,
                    offset: 0,
                    strides: rs,
                },
                ENode::Binary(BinaryOp::Mul, 0, 1, g.dtype),
            ],
            root: 2,
            out: g.out,
            out_strides,
            stash: None,
        };
        plan.decisions.push(format!(
            "{}: matrix-vector product (n = 1) as a fused reduction instead of a GEMM call, m={} k={}",
            g.name, g.m, g.k
        ));
        plan.steps[i] = Step::Kernel(kernel);
    }
}

/// Loop kernels that only move f16/bf16 elements (one load, stored as is:
/// a broadcast, transpose, slice, reverse or reshape) load and store them
/// as 16-bit integers. Through f32 they would lose a signalling NaN's
/// signalling bit, which the interpreter keeps and `bitcast_convert` can
/// reveal.
fn copy_halves_as_bits(plan: &mut Plan) {
    for step in &mut plan.steps {
        let Step::Kernel(k) = step else { continue };
        if k.kind != KernelKind::Loop || k.nodes.len() != 1 || k.stash.is_some() {
            continue;
        }
        if let ENode::Load { dtype, .. } = &mut k.nodes[0]
            && matches!(dtype, DType::F16 | DType::BF16)
        {
            *dtype = DType::U16;
        }
    }
}

/// A fresh temporary like slot `like`, in a block of its own at the end of
/// the arena.
fn arena_slot(plan: &mut Plan, like: SlotId, what: &str) -> SlotId {
    let sl = &plan.slots[like];
    let (dtype, dims, name) = (sl.dtype, sl.dims.clone(), format!("{}.{what}", sl.name));
    new_arena_slot(plan, dtype, dims, name)
}

/// A new temporary slot at the end of the arena, sharing its bytes with
/// no other.
fn new_arena_slot(plan: &mut Plan, dtype: DType, dims: Vec<usize>, name: String) -> SlotId {
    let slot = Slot {
        kind: SlotKind::Temp {
            offset: plan.arena_bytes,
        },
        dtype,
        dims,
        name,
    };
    plan.arena_bytes += slot.bytes().div_ceil(64) * 64;
    plan.slots.push(slot);
    plan.slots.len() - 1
}

/// A region's steps as merged into the enclosing plan, and the slots of
/// its outputs there.
struct Merged {
    steps: Vec<Step>,
    outputs: Vec<SlotId>,
}

/// Plans `region` on its own and merges it into `plan`: its parameters
/// are the slots `args`, its buffers a fresh block at the end of the
/// arena (outputs included: they are temporaries here), its graph one of
/// the plan's regions, its labels renumbered. Its steps will start at step
/// `at`; their row groups go to `groups`. With `params_writable` (a loop
/// body) it may overwrite its parameters' slots once read ([`plan_with`]).
fn merge_region(
    plan: &mut Plan,
    region: &Graph,
    args: &[SlotId],
    at: usize,
    groups: &mut Vec<RowGroup>,
    params_writable: bool,
    accumulate: bool,
) -> Result<Merged> {
    let sub = plan_with(region, params_writable, accumulate)?;
    let base = plan.arena_bytes;
    let mut extra = sub.arena_bytes;
    let mut map = Vec::with_capacity(sub.slots.len());
    for sl in &sub.slots {
        let kind = match &sl.kind {
            SlotKind::Input(k) => {
                let s = *args
                    .get(*k)
                    .ok_or_else(|| Error::internal("region parameter without an operand"))?;
                map.push(s);
                continue;
            }
            SlotKind::Const(l) => SlotKind::Const(l.clone()),
            SlotKind::Temp { offset } => SlotKind::Temp {
                offset: base + offset,
            },
            SlotKind::Output | SlotKind::HandOff { .. } => {
                let offset = base + extra;
                extra += sl.bytes().div_ceil(64) * 64;
                SlotKind::Temp { offset }
            }
        };
        plan.slots.push(Slot {
            kind,
            dtype: sl.dtype,
            dims: sl.dims.clone(),
            name: format!("{}/{}", region.name, sl.name),
        });
        map.push(plan.slots.len() - 1);
    }
    plan.arena_bytes = base + extra;
    // Graphs: the region's own first, then those nested in it.
    let first_graph = plan.regions.len() + 1;
    plan.regions.push(sub.graph.clone());
    plan.regions.extend(sub.regions.iter().cloned());
    let label_base = plan.labels;
    plan.labels += sub.labels;
    let steps = sub
        .steps
        .into_iter()
        .map(|st| relocate(st, &map, first_graph, label_base))
        .collect();
    groups.extend(sub.groups.iter().map(|g| RowGroup {
        start: g.start + at,
        end: g.end + at,
        ..g.clone()
    }));
    for d in &sub.decisions {
        plan.decisions.push(format!("@{}: {d}", region.name));
    }
    (plan.views).extend(sub.views.iter().map(|&(v, x)| (map[v], map[x])));
    let outputs = sub.outputs.iter().map(|s| map[*s]).collect();
    Ok(Merged { steps, outputs })
}

/// `step` of a region's plan with its slots, graph and labels as merged.
fn relocate(mut step: Step, map: &[SlotId], first_graph: usize, label_base: usize) -> Step {
    for_each_slot(&mut step, &mut |s| *s = map[*s]);
    match &mut step {
        Step::Runtime { graph, .. } => *graph += first_graph,
        Step::Label(l) | Step::Jump(l) | Step::BranchUnless { label: l, .. } => *l += label_base,
        Step::Switch { labels, .. } => labels.iter_mut().for_each(|l| *l += label_base),
        Step::Kernel(_) | Step::Gemm(_) | Step::Pack(_) | Step::Copy { .. } => {}
    }
    step
}

impl Plan {
    /// A fresh label.
    fn labels_next(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }

    /// The graph `graph` of a runtime step (see [`Step::Runtime`]).
    pub fn step_graph(&self, graph: usize) -> &Graph {
        match graph.checked_sub(1) {
            Some(i) => &self.regions[i],
            None => &self.graph,
        }
    }
}

/// Rough cost of computing one node per element, in vectorized simple ops
/// (about 0.02 ns each on the benchmark machine): simple ops 1, divisions
/// and square roots 4, transcendental functions and helper calls
/// [`TRANSCENDENTAL_COST`] (an inline f32 exp or tanh is ~40 instructions
/// per 4 lanes), `pow` 100 (evaluated in f64). Used for stashing, for
/// unrolling reductions and for the parallel threshold.
pub(crate) fn node_cost(n: &ENode) -> usize {
    match n {
        ENode::Unary(u, ..) => unary_cost(*u),
        ENode::Binary(b, ..) => binary_cost(*b),
        ENode::Load { .. }
        | ENode::Const(_)
        | ENode::Iota { .. }
        | ENode::Compare(..)
        | ENode::Select(..)
        | ENode::Clamp(..)
        | ENode::Convert(..)
        | ENode::Bitcast(..) => 1,
        // The clamp and the address.
        ENode::Gather { .. } => 3,
    }
}

/// [`node_cost`] of a unary function.
fn unary_cost(u: UnaryOp) -> usize {
    match u {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Not
        | UnaryOp::IsFinite
        | UnaryOp::Square => 1,
        UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => 4,
        UnaryOp::Exp
        | UnaryOp::Expm1
        | UnaryOp::Log
        | UnaryOp::Log1p
        | UnaryOp::Tanh
        | UnaryOp::Logistic
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Erf => TRANSCENDENTAL_COST,
    }
}

/// [`node_cost`] of a binary function.
fn binary_cost(b: BinaryOp) -> usize {
    match b {
        BinaryOp::Div | BinaryOp::Rem => 4,
        BinaryOp::Pow => 100,
        BinaryOp::Add
        | BinaryOp::Sub
        | BinaryOp::Mul
        | BinaryOp::Max
        | BinaryOp::Min
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRightLogical
        | BinaryOp::ShiftRightArithmetic => 1,
    }
}

/// [`node_cost`] of a fusible graph node computed inline.
fn op_cost(op: &Op) -> usize {
    match op {
        Op::Unary(u) => unary_cost(*u),
        Op::Binary(b) => binary_cost(*b),
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Iota { .. }
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
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient
        | Op::CustomVjp { .. } => 1,
    }
}

/// Inline cost (summed [`op_cost`]) from which a value that a broadcast
/// spreads over [`BROADCAST_SPREAD`] times as many elements is computed
/// once into a buffer instead of once per element it is spread over (a
/// layer norm's `rsqrt(var + ε)` per row, which the output kernel
/// evaluated for every element of the row).
const BROADCAST_WORTH: usize = 4;

/// See [`BROADCAST_WORTH`].
const BROADCAST_SPREAD: usize = 16;

/// The cost of one transcendental function (see [`node_cost`]): a
/// reduction's per-element value that costs this much is worth stashing,
/// and a reduction body that costs this much hides its accumulator's
/// latency without unrolling.
pub(crate) const TRANSCENDENTAL_COST: usize = 60;

/// The operands of an expression node.
pub(crate) fn enode_operands(n: &ENode) -> Vec<usize> {
    match n {
        ENode::Load { .. } | ENode::Const(_) | ENode::Iota { .. } => vec![],
        ENode::Unary(_, a, _)
        | ENode::Convert(a, _, _)
        | ENode::Bitcast(a, _, _)
        | ENode::Gather { index: a, .. } => vec![*a],
        ENode::Binary(_, a, b, _) | ENode::Compare(_, a, b, _) => vec![*a, *b],
        ENode::Select(a, b, c, _) | ENode::Clamp(a, b, c, _) => vec![*a, *b, *c],
    }
}

/// True when node `i` of `a` and node `j` of `b` compute the same value at
/// the same loop index (kernels over the same dims).
fn same_expr(a: &[ENode], i: usize, b: &[ENode], j: usize) -> bool {
    fn shallow(x: &ENode, y: &ENode) -> bool {
        match (x, y) {
            (ENode::Unary(u, _, d), ENode::Unary(v, _, e)) => u == v && d == e,
            (ENode::Binary(o, _, _, d), ENode::Binary(p, _, _, e)) => o == p && d == e,
            (ENode::Compare(o, _, _, d), ENode::Compare(p, _, _, e)) => o == p && d == e,
            (ENode::Select(.., d), ENode::Select(.., e))
            | (ENode::Clamp(.., d), ENode::Clamp(.., e)) => d == e,
            (ENode::Convert(_, f, t), ENode::Convert(_, g, u))
            | (ENode::Bitcast(_, f, t), ENode::Bitcast(_, g, u)) => f == g && t == u,
            (
                ENode::Gather {
                    slot,
                    dtype,
                    offset,
                    strides,
                    scale,
                    bound,
                    index: _,
                },
                ENode::Gather {
                    slot: s,
                    dtype: d,
                    offset: o,
                    strides: t,
                    scale: c,
                    bound: b,
                    index: _,
                },
            ) => (slot, dtype, offset, strides, scale, bound) == (s, d, o, t, c, b),
            (x, y) => enode_operands(x).is_empty() && x == y,
        }
    }
    // Most candidates differ at the root: nothing is allocated for them.
    if !shallow(&a[i], &b[j]) {
        return false;
    }
    // An explicit work list (no recursion: expression depth is the
    // program's length), each pair of nodes compared once (shared
    // subexpressions would otherwise be compared once per path).
    let mut seen: HashSet<(usize, usize)> = HashSet::new();
    let mut work = vec![(i, j)];
    while let Some((i, j)) = work.pop() {
        if !seen.insert((i, j)) {
            continue;
        }
        let (x, y) = (&a[i], &b[j]);
        if !shallow(x, y) {
            return false;
        }
        work.extend(enode_operands(x).into_iter().zip(enode_operands(y)));
    }
    true
}

/// The nodes reachable from `root`, in order, with the root's new index.
fn compact(nodes: &[ENode], root: usize) -> (Vec<ENode>, usize) {
    let mut live = vec![false; nodes.len()];
    live[root] = true;
    for i in (0..nodes.len()).rev() {
        if live[i] {
            for o in enode_operands(&nodes[i]) {
                live[o] = true;
            }
        }
    }
    let mut index = vec![usize::MAX; nodes.len()];
    let mut out = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let map = |k: &usize| index[*k];
        let n = match n {
            ENode::Unary(u, a, d) => ENode::Unary(*u, map(a), *d),
            ENode::Convert(a, f, t) => ENode::Convert(map(a), *f, *t),
            ENode::Bitcast(a, f, t) => ENode::Bitcast(map(a), *f, *t),
            ENode::Binary(o, a, b, d) => ENode::Binary(*o, map(a), map(b), *d),
            ENode::Compare(o, a, b, d) => ENode::Compare(*o, map(a), map(b), *d),
            ENode::Select(a, b, c, d) => ENode::Select(map(a), map(b), map(c), *d),
            ENode::Clamp(a, b, c, d) => ENode::Clamp(map(a), map(b), map(c), *d),
            ENode::Gather { index, .. } => {
                let mut g = n.clone();
                if let ENode::Gather { index: i, .. } = &mut g {
                    *i = map(index);
                }
                g
            }
            other @ (ENode::Load { .. } | ENode::Const(_) | ENode::Iota { .. }) => other.clone(),
        };
        index[i] = out.len();
        out.push(n);
    }
    (out, index[root])
}

/// Finds reductions whose per-element value a later loop kernel over the
/// same index space recomputes, and lets the reduction store it into that
/// loop's output instead ([`Stash`]): a row softmax then computes each
/// `exp` once, not twice.
fn share_reduced_values(plan: &mut Plan) {
    for i in 0..plan.steps.len() {
        let Step::Kernel(r) = &plan.steps[i] else {
            continue;
        };
        if !matches!(r.kind, KernelKind::Reduce { .. }) || r.stash.is_some() {
            continue;
        }
        let dtype = r.nodes[r.root].dtype();
        if !matches!(dtype, DType::F32 | DType::F64) {
            continue;
        }
        let cost = {
            let mut c = vec![0usize; r.nodes.len()];
            for (j, n) in r.nodes.iter().enumerate() {
                c[j] = node_cost(n) + enode_operands(n).iter().map(|o| c[*o]).sum::<usize>();
            }
            c[r.root]
        };
        if cost < TRANSCENDENTAL_COST {
            continue;
        }
        // The reduction's result and the values later kernels compute
        // from it (softmax's reciprocal of the row sum).
        let mut derived = vec![r.out];
        let found = plan
            .steps
            .iter()
            .enumerate()
            .skip(i + 1)
            .find_map(|(j, st)| {
                let Step::Kernel(k) = st else { return None };
                let dense = k.out_strides == row_major(&k.dims);
                // Only a kernel that reads the reduction's result, or a
                // value computed from it, is a candidate (softmax's
                // division by the row sum): scanning every later kernel
                // made planning quadratic in the program.
                let reads = |s: SlotId| {
                    (k.nodes.iter()).any(|n| matches!(n, ENode::Load { slot, .. } if *slot == s))
                };
                let reads_result = derived.iter().any(|s| reads(*s));
                // One step removed at most: a kernel over the reduction's
                // result itself (other dims) adds its output.
                if k.dims != r.dims {
                    if derived.len() == 1 && reads(r.out) {
                        derived.push(k.out);
                    }
                    return None;
                }
                // A kernel that reads its own output holds a stash already
                // (its output has room for one per-element value): a second
                // reduction stashing there overwrote the first's values
                // (`softmax(x) * softmax(2x)`).
                let ok = k.kind == KernelKind::Loop
                    && reads_result
                    && !reads(k.out)
                    && k.dims == r.dims
                    && dense
                    && plan.slots[k.out].dtype == dtype
                    && matches!(
                        plan.slots[k.out].kind,
                        SlotKind::Output | SlotKind::Temp { .. }
                    );
                if !ok {
                    return None;
                }
                let t = (0..k.nodes.len()).find(|t| same_expr(&r.nodes, r.root, &k.nodes, *t))?;
                Some((j, t))
            });
        let Some((j, t)) = found else { continue };
        let Step::Kernel(k) = &mut plan.steps[j] else {
            continue;
        };
        let (out, strides) = (k.out, k.out_strides.clone());
        k.nodes[t] = ENode::Load {
            slot: out,
            dtype,
            offset: 0,
            strides: strides.clone(),
        };
        let (nodes, root) = compact(&k.nodes, k.root);
        k.nodes = nodes;
        k.root = root;
        let loop_name = k.name.clone();
        let Step::Kernel(r) = &mut plan.steps[i] else {
            continue;
        };
        r.stash = Some(Stash {
            node: r.root,
            slot: out,
            strides,
        });
        plan.decisions.push(format!(
            "{}: stashes its per-element value (cost {cost}) in '{loop_name}''s output, which reads it back instead of recomputing it",
            r.name
        ));
    }
}

/// Marks the temporaries that a by-value callback (NumPy) reads last, and
/// only once, as [`SlotKind::HandOff`]: no one reads them afterwards, so the
/// callback may own, and write, their buffer.
fn mark_handoffs(plan: &mut Plan) {
    let mut last_read = vec![usize::MAX; plan.slots.len()];
    for (i, step) in plan.steps.iter().enumerate() {
        for s in step_slots(step).0 {
            last_read[s] = i;
        }
    }
    for (i, step) in plan.steps.iter().enumerate() {
        let Step::Runtime { node, inputs, .. } = step else {
            continue;
        };
        let Op::Callback(c) = &plan.graph.node(*node).op else {
            continue;
        };
        let by_value = tensorlift_runtime::callback::bound(&plan.graph, &c.target)
            .is_ok_and(|cb| cb.takes_ownership());
        if !by_value {
            continue;
        }
        for &s in inputs {
            let once = inputs.iter().filter(|&&t| t == s).count() == 1;
            let slot = &mut plan.slots[s];
            if once
                && last_read[s] == i
                && matches!(slot.kind, SlotKind::Temp { .. })
                && slot.dtype != DType::String
            {
                slot.kind = SlotKind::HandOff { to: i };
            }
        }
    }
}

fn slots_of(slot_of: &FxHashMap<ValueId, SlotId>, vs: &[ValueId]) -> Result<Vec<SlotId>> {
    vs.iter()
        .map(|v| {
            slot_of
                .get(v)
                .copied()
                .ok_or_else(|| Error::internal(format!("value {v} has no buffer")))
        })
        .collect()
}

fn row_major(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1] as i64;
    }
    s
}

/// Collapses a group of dims of a row-major buffer into one (size, stride),
/// if they are adjacent-contiguous in the given order.
type GemmShape = (usize, usize, usize, usize, [isize; 3], [isize; 3]);

/// The GEMM layout of a `dot_general` over row-major operands: the
/// interpreter computes the same ([`GemmDims::of`]), so both make the
/// same `gemm` call.
fn gemm_shape(
    g: &Graph,
    n: &tensorlift_ir::Node,
    dd: &tensorlift_ir::DotDims,
) -> Option<GemmShape> {
    let ld = g.ty(n.inputs[0]).shape.as_known()?;
    let rd = g.ty(n.inputs[1]).shape.as_known()?;
    let d = GemmDims::of(&ld, &rd, dd)?;
    Some((d.b, d.m, d.k, d.n, d.lhs_strides, d.rhs_strides))
}

/// How a value's multi-index depends on the kernel's loop indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum IndexMap {
    /// `idx[k] = off[k] + Σ_r coef[k][r]·i[r]`.
    Multi { off: Vec<i64>, coef: Vec<Vec<i64>> },
    /// The element at row-major position `off + Σ_r coef[r]·i[r]`.
    Linear { off: i64, coef: Vec<i64> },
}

impl IndexMap {
    fn identity(rank: usize) -> Self {
        IndexMap::Multi {
            off: vec![0; rank],
            coef: (0..rank)
                .map(|k| (0..rank).map(|r| i64::from(k == r)).collect())
                .collect(),
        }
    }

    fn scalar() -> Self {
        IndexMap::Multi {
            off: vec![],
            coef: vec![],
        }
    }

    /// The element offset (row-major over `dims`) as an affine function.
    fn linear(&self, dims: &[usize], loops: usize) -> (i64, Vec<i64>) {
        match self {
            IndexMap::Linear { off, coef } => (*off, coef.clone()),
            IndexMap::Multi { off, coef } => {
                let rs = row_major(dims);
                let o = off.iter().zip(&rs).map(|(a, b)| a * b).sum();
                let s = (0..loops)
                    .map(|r| coef.iter().zip(&rs).map(|(c, b)| c[r] * b).sum())
                    .collect();
                (o, s)
            }
        }
    }
}

struct KernelBuilder<'a> {
    g: &'a Graph,
    kind: &'a [Kind],
    slot_of: &'a FxHashMap<ValueId, SlotId>,
    loops: usize,
    nodes: Vec<ENode>,
    index: FxHashMap<ENode, usize>,
    /// Built expressions by value and index map (a value is read at one
    /// or two maps: looked up without cloning a map into a key).
    memo: FxHashMap<ValueId, Vec<(IndexMap, usize)>>,
    /// Operand expressions a `build_node` attempt needed but found missing.
    missing: Vec<(ValueId, IndexMap)>,
    /// The kernel's root: computed here even though it has a buffer.
    root: Option<ValueId>,
}

impl<'a> KernelBuilder<'a> {
    fn new(
        g: &'a Graph,
        kind: &'a [Kind],
        slot_of: &'a FxHashMap<ValueId, SlotId>,
        loops: usize,
    ) -> Self {
        KernelBuilder {
            g,
            kind,
            slot_of,
            loops,
            nodes: Vec::new(),
            index: FxHashMap::default(),
            memo: FxHashMap::default(),
            missing: Vec::new(),
            root: None,
        }
    }

    fn push(&mut self, n: ENode) -> usize {
        if let Some(&i) = self.index.get(&n) {
            return i;
        }
        self.nodes.push(n.clone());
        self.index.insert(n, self.nodes.len() - 1);
        self.nodes.len() - 1
    }

    /// The expression for value `v` read at `map`. Iterative (an explicit
    /// stack instead of recursion), so a 100,000-op chain cannot overflow
    /// the stack.
    fn build(&mut self, v: ValueId, map: &IndexMap) -> Result<usize> {
        let mut stack = vec![(v, map.clone())];
        while let Some((u, m)) = stack.last().cloned() {
            if self.memo_get(u, &m).is_some() {
                stack.pop();
                continue;
            }
            let saved = self.nodes.len();
            self.missing.clear();
            let e = self.build_value(u, &m)?;
            if self.missing.is_empty() {
                self.memo.entry(u).or_default().push((m, e));
                stack.pop();
            } else {
                // Undo what the attempt pushed, build the operands first.
                for n in self.nodes.drain(saved..) {
                    self.index.remove(&n);
                }
                self.missing.reverse();
                stack.append(&mut self.missing);
            }
        }
        self.memo_get(v, map)
            .ok_or_else(|| Error::internal("expression not built"))
    }

    /// The expression built for `v` at `map`, if any.
    fn memo_get(&self, v: ValueId, map: &IndexMap) -> Option<usize> {
        let built = self.memo.get(&v)?;
        built.iter().find(|(m, _)| m == map).map(|&(_, e)| e)
    }

    /// An operand's expression if already built; otherwise records it as
    /// missing and returns a placeholder (the attempt is then undone).
    fn resolve(&mut self, x: ValueId, map: &IndexMap) -> Result<usize> {
        match self.memo_get(x, map) {
            Some(e) => Ok(e),
            None => {
                self.missing.push((x, map.clone()));
                Ok(usize::MAX)
            }
        }
    }

    /// One step of [`Self::build`]: a load for a materialized value, or the
    /// node's expression over already-built operands.
    fn build_value(&mut self, v: ValueId, map: &IndexMap) -> Result<usize> {
        let ty = self.g.ty(v);
        let dims = ty.shape.as_known().unwrap_or_default();
        let e = if self.kind[v.index()] == Kind::Buffer && self.root != Some(v) {
            let slot = *self
                .slot_of
                .get(&v)
                .ok_or_else(|| Error::internal(format!("no slot for {v}")))?;
            let (offset, strides) = map.linear(&dims, self.loops);
            self.push(ENode::Load {
                slot,
                dtype: ty.dtype,
                offset,
                strides,
            })
        } else {
            let id = self.g.value(v).node;
            self.build_node(id, map)?
        };
        Ok(e)
    }

    fn operand(&mut self, x: ValueId, map: &IndexMap) -> Result<usize> {
        if self.g.ty(x).shape.rank() == Some(0) {
            return self.resolve(x, &IndexMap::scalar());
        }
        self.resolve(x, map)
    }

    /// The expression computed by node `id` (fusible or scalar constant) at `map`.
    fn build_node(&mut self, id: NodeId, map: &IndexMap) -> Result<usize> {
        let n = self.g.node(id);
        let v = n.results[0];
        let dt = self.g.ty(v).dtype;
        let dims = self.g.ty(v).shape.as_known().unwrap_or_default();
        let bad = || {
            Error::internal(format!(
                "cannot fuse {} '{}' under a linear index map",
                n.op.name(),
                n.name
            ))
        };
        let ins = &n.inputs;
        Ok(match &n.op {
            Op::Constant(l) if l.dims.is_empty() => self.push(ENode::Const(l.clone())),
            Op::Unary(u) => {
                let x = self.operand(ins[0], map)?;
                self.push(ENode::Unary(*u, x, dt))
            }
            Op::Binary(b) => {
                let (x, y) = (self.operand(ins[0], map)?, self.operand(ins[1], map)?);
                self.push(ENode::Binary(*b, x, y, dt))
            }
            Op::Compare(c) => {
                let (x, y) = (self.operand(ins[0], map)?, self.operand(ins[1], map)?);
                self.push(ENode::Compare(*c, x, y, self.g.ty(ins[0]).dtype))
            }
            Op::Select => {
                let (p, x, y) = (
                    self.operand(ins[0], map)?,
                    self.operand(ins[1], map)?,
                    self.operand(ins[2], map)?,
                );
                self.push(ENode::Select(p, x, y, dt))
            }
            Op::Clamp => {
                let (x, lo, hi) = (
                    self.operand(ins[0], map)?,
                    self.operand(ins[1], map)?,
                    self.operand(ins[2], map)?,
                );
                self.push(ENode::Clamp(x, lo, hi, dt))
            }
            Op::Convert(to) => {
                let x = self.operand(ins[0], map)?;
                self.push(ENode::Convert(x, self.g.ty(ins[0]).dtype, *to))
            }
            Op::BitcastConvert(to) => {
                let x = self.operand(ins[0], map)?;
                self.push(ENode::Bitcast(x, self.g.ty(ins[0]).dtype, *to))
            }
            Op::Iota { dim, .. } => {
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                self.push(ENode::Iota {
                    dtype: dt,
                    offset: off[*dim],
                    strides: coef[*dim].clone(),
                })
            }
            Op::Reshape(_) => {
                let (o, c) = map.linear(&dims, self.loops);
                self.resolve(ins[0], &IndexMap::Linear { off: o, coef: c })?
            }
            Op::BroadcastInDim { dims: bd, .. } => {
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                let xd = self.g.ty(ins[0]).shape.as_known().unwrap_or_default();
                let mut xo = Vec::new();
                let mut xc = Vec::new();
                for (j, &d) in bd.iter().enumerate() {
                    if xd[j] == 1 && dims[d] != 1 {
                        xo.push(0);
                        xc.push(vec![0; self.loops]);
                    } else {
                        xo.push(off[d]);
                        xc.push(coef[d].clone());
                    }
                }
                self.resolve(ins[0], &IndexMap::Multi { off: xo, coef: xc })?
            }
            Op::Transpose(perm) => {
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                let mut xo = vec![0; perm.len()];
                let mut xc = vec![Vec::new(); perm.len()];
                for (d, &p) in perm.iter().enumerate() {
                    xo[p] = off[d];
                    xc[p] = coef[d].clone();
                }
                self.resolve(ins[0], &IndexMap::Multi { off: xo, coef: xc })?
            }
            Op::Slice { start, stride, .. } => {
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                let xo = (0..off.len())
                    .map(|d| start[d] as i64 + stride[d] as i64 * off[d])
                    .collect();
                let xc = (0..off.len())
                    .map(|d| coef[d].iter().map(|c| c * stride[d] as i64).collect())
                    .collect();
                self.resolve(ins[0], &IndexMap::Multi { off: xo, coef: xc })?
            }
            Op::Reverse(axes) => {
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                let mut xo = off.clone();
                let mut xc = coef.clone();
                for &a in axes {
                    xo[a] = dims[a] as i64 - 1 - off[a];
                    xc[a] = coef[a].iter().map(|c| -c).collect();
                }
                self.resolve(ins[0], &IndexMap::Multi { off: xo, coef: xc })?
            }
            Op::Take { axis } => {
                // out[pre, j, post] = x[pre, ids[j], post]: the indices read
                // at the map's rows of the gathered dims, the table at its
                // other dims, plus the index times its axis's stride.
                let IndexMap::Multi { off, coef } = map else {
                    return Err(bad());
                };
                let (x, ids) = (ins[0], ins[1]);
                let xd = self.g.ty(x).shape.as_known().unwrap_or_default();
                let ir = self.g.ty(ids).shape.rank().unwrap_or(0);
                let index = self.resolve(
                    ids,
                    &IndexMap::Multi {
                        off: off[*axis..*axis + ir].to_vec(),
                        coef: coef[*axis..*axis + ir].to_vec(),
                    },
                )?;
                let mut xo: Vec<i64> = off[..*axis].to_vec();
                let mut xc: Vec<Vec<i64>> = coef[..*axis].to_vec();
                xo.push(0);
                xc.push(vec![0; self.loops]);
                xo.extend_from_slice(&off[*axis + ir..]);
                xc.extend_from_slice(&coef[*axis + ir..]);
                // (The table's own buffer, or the one it is a reshape of.)
                let table = match self.slot_of.get(&x) {
                    Some(&s) => Some(s),
                    None => reshaped_buffer(self.g, x, self.kind)
                        .and_then(|b| self.slot_of.get(&b).copied()),
                };
                let slot = table.ok_or_else(|| Error::internal(format!("no slot for {x}")))?;
                let (offset, strides) =
                    IndexMap::Multi { off: xo, coef: xc }.linear(&xd, self.loops);
                self.push(ENode::Gather {
                    slot,
                    dtype: dt,
                    offset,
                    strides,
                    index,
                    scale: row_major(&xd)[*axis],
                    bound: xd[*axis] as i64,
                })
            }
            op @ (Op::Parameter { .. }
            | Op::Constant(_)
            | Op::Concatenate { .. }
            | Op::Pad { .. }
            | Op::Reduce { .. }
            | Op::ArgMax { .. }
            | Op::ArgMin { .. }
            | Op::ArgSort { .. }
            | Op::Cumsum { .. }
            | Op::DotGeneral(_)
            | Op::DynamicSlice { .. }
            | Op::DynamicUpdateSlice
            | Op::Scatter { .. }
            | Op::Callback(_)
            | Op::Dynamic(_)
            | Op::While { .. }
            | Op::Case { .. }
            | Op::StopGradient
            | Op::CustomVjp { .. }) => {
                return Err(Error::internal(format!("{} is not fusible", op.name())));
            }
        })
    }

    /// Finishes the kernel, merging adjacent loop dims that every access
    /// walks contiguously.
    fn finish(
        self,
        name: &str,
        mut kind: KernelKind,
        mut dims: Vec<usize>,
        root: usize,
        out: SlotId,
        mut out_strides: Vec<i64>,
    ) -> Kernel {
        let mut nodes = self.nodes;
        let mut d = dims.len();
        while d >= 2 {
            d -= 1;
            let (a, b) = (d - 1, d);
            let same_kind = match &kind {
                KernelKind::Loop => true,
                KernelKind::Reduce { reduced, .. } => reduced[a] == reduced[b],
            };
            let mergeable = |s: &[i64]| s[a] == s[b] * dims[b] as i64;
            let ok = same_kind
                && mergeable(&out_strides)
                && nodes
                    .iter()
                    .all(|n| n.strides().is_none_or(|s| mergeable(s)));
            if ok {
                let merge = |s: &mut Vec<i64>| {
                    s.remove(a);
                };
                dims[a] *= dims[b];
                dims.remove(b);
                merge(&mut out_strides);
                for n in &mut nodes {
                    if let Some(strides) = n.strides_mut() {
                        merge(strides);
                    }
                }
                if let KernelKind::Reduce { reduced, .. } = &mut kind {
                    reduced.remove(b);
                }
            }
        }
        Kernel {
            name: name.to_string(),
            kind,
            dims,
            nodes,
            root,
            out,
            out_strides,
            stash: None,
        }
    }
}

/// Assigns arena offsets to temporaries by liveness (first fit, 64-byte
/// aligned): a temporary's bytes are reused once its last reader has run.
fn plan_buffers(plan: &mut Plan) {
    let n = plan.slots.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (i, step) in plan.steps.iter().enumerate() {
        // The steps of a row group run interleaved: everything they touch
        // is live for the whole group.
        let (lo, hi) = plan
            .groups
            .iter()
            .find(|g| (g.start..g.end).contains(&i))
            .map_or((i, i), |g| (g.start, g.end - 1));
        let (reads, writes) = step_slots(step);
        for s in writes {
            first[s] = first[s].min(lo);
            last[s] = last[s].max(hi);
        }
        for s in reads {
            last[s] = last[s].max(hi);
        }
    }
    // A view's reads are reads of its source's buffer.
    for &(v, x) in &plan.views {
        last[x] = last[x].max(last[v]);
    }
    // (offset, size, last use) of live allocations.
    let mut live: Vec<(usize, usize, usize)> = Vec::new();
    let mut arena = 0usize;
    let mut order: Vec<usize> = (0..n)
        .filter(|s| matches!(plan.slots[*s].kind, SlotKind::Temp { .. }))
        .collect();
    order.sort_by_key(|s| first[*s]);
    for s in order {
        let start = first[s];
        live.retain(|&(_, _, end)| end >= start);
        let size = plan.slots[s].bytes().div_ceil(64) * 64;
        live.sort();
        let mut offset = 0usize;
        for &(o, sz, _) in &live {
            if offset + size <= o {
                break;
            }
            offset = offset.max(o + sz);
        }
        live.push((offset, size, last[s]));
        arena = arena.max(offset + size);
        plan.slots[s].kind = SlotKind::Temp { offset };
    }
    plan.arena_bytes = arena;
}

/// `dynamic_slice` results read where they lie: when the block is one
/// contiguous run of the operand's buffer that starts 16 bytes aligned
/// whatever the start indices (one row of a stack: what a loop over a
/// stacked input reads per step), the step points its result slot into
/// the operand's buffer (rt's `dynamic_slice` step) instead of copying the
/// block. The result must be a temporary of its own (not an output, not
/// handed off, not kept in a register) that no other step writes, and no
/// step may write the operand (or replace its buffer) from the slice to
/// the result's last reader; [`plan_buffers`] keeps the operand's buffer
/// live as long as the view.
fn slice_views(plan: &mut Plan) {
    for i in 0..plan.steps.len() {
        let Some((node, inputs, outputs)) = own_runtime_step(&plan.steps[i]) else {
            continue;
        };
        let n = plan.graph.node(node);
        let (Op::DynamicSlice { sizes }, Some(&x), [v]) = (&n.op, inputs.first(), outputs) else {
            continue;
        };
        let v = *v;
        let (xs, vs) = (&plan.slots[x], &plan.slots[v]);
        let source_stays = match xs.kind {
            SlotKind::Input(_) | SlotKind::Const(_) | SlotKind::Temp { .. } | SlotKind::Output => {
                true
            }
            SlotKind::HandOff { .. } => false,
        };
        let fits = x != v
            && source_stays
            && matches!(vs.kind, SlotKind::Temp { .. })
            && !vs.dims.is_empty()
            && vs.bytes() > 0
            && xs.dtype != DType::String
            && !plan.outputs.contains(&v)
            && aligned_block(&xs.dims, sizes, xs.dtype.size());
        if !fits {
            continue;
        }
        let mut last = None;
        let mut alone = true;
        for (j, st) in plan.steps.iter().enumerate() {
            let (reads, writes) = step_slots(st);
            alone &= j == i || !writes.contains(&v);
            if reads.contains(&v) {
                last = Some(j);
            }
        }
        let Some(last) = last.filter(|&r| r > i && alone) else {
            continue;
        };
        let source_written =
            (plan.steps[i + 1..=last].iter()).any(|st| step_slots(st).1.contains(&x));
        if source_written {
            continue;
        }
        let (name, source) = (n.name.clone(), xs.name.clone());
        plan.views.push((v, x));
        plan.decisions.push(format!(
            "{name}: no copy: its block is read where it lies, in the buffer of '{source}' (one contiguous, aligned run)"
        ));
    }
}

/// True when a `dynamic_slice` of `sizes` from an operand of `dims` (row
/// major, elements of `size` bytes) is one contiguous run starting at a
/// multiple of 16 bytes for any start indices: the block takes one
/// element of every axis before the first axis it takes more of, all of
/// every axis after it, and each axis whose start may be non-zero steps by
/// a multiple of 16 bytes.
fn aligned_block(dims: &[usize], sizes: &[usize], size: usize) -> bool {
    if dims.len() != sizes.len() {
        return false;
    }
    let first = sizes.iter().position(|&s| s != 1).unwrap_or(sizes.len());
    let whole_after = (first + 1..dims.len()).all(|d| sizes[d] == dims[d]);
    let mut stride = size;
    let mut aligned = true;
    for d in (0..dims.len()).rev() {
        aligned &= dims[d] == sizes[d] || stride.is_multiple_of(16);
        stride = stride.saturating_mul(dims[d]);
    }
    whole_after && aligned
}

/// Appends the slots kernel `k` reads and writes.
fn kernel_slots(k: &Kernel, reads: &mut Vec<SlotId>, writes: &mut Vec<SlotId>) {
    reads.extend(k.nodes.iter().filter_map(ENode::slot));
    writes.push(k.out);
    writes.extend(k.stash.as_ref().map(|st| st.slot));
}

/// Slots a step reads and writes.
pub fn step_slots(step: &Step) -> (Vec<SlotId>, Vec<SlotId>) {
    match step {
        Step::Kernel(k) => {
            let (mut reads, mut writes) = (Vec::new(), Vec::new());
            kernel_slots(k, &mut reads, &mut writes);
            (reads, writes)
        }
        Step::Gemm(g) => {
            let mut reads = vec![g.lhs, g.rhs];
            let mut writes = vec![g.out];
            if g.accumulate {
                reads.push(g.out);
            }
            if let Some(e) = &g.epilogue {
                kernel_slots(&e.kernel, &mut reads, &mut writes);
            }
            reads.extend(g.packed);
            (reads, writes)
        }
        Step::Pack(p) => (vec![p.src], vec![p.dst]),
        Step::Runtime {
            inputs, outputs, ..
        } => (inputs.clone(), outputs.clone()),
        Step::Copy { from, to } => (from.clone(), to.clone()),
        Step::Label(_) | Step::Jump(_) => (vec![], vec![]),
        Step::BranchUnless { pred, .. } => (vec![*pred], vec![]),
        Step::Switch { index, .. } => (vec![*index], vec![]),
    }
}

impl Plan {
    /// The plan as text: slots, steps with their expressions, decisions.
    pub fn dump(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "plan @{} (arena {} bytes)",
            self.graph.name, self.arena_bytes
        );
        for (i, sl) in self.slots.iter().enumerate() {
            let kind = match &sl.kind {
                SlotKind::Input(k) => format!("input {k}"),
                SlotKind::Const(_) => "constant".to_string(),
                SlotKind::Temp { offset } => format!("temp @{offset}"),
                SlotKind::Output => "output".to_string(),
                SlotKind::HandOff { to } => format!("handed off to step {to}"),
            };
            let _ = writeln!(
                s,
                "  slot {i}: {}{:?} {kind} ({})",
                sl.dtype.short_name(),
                sl.dims,
                sl.name
            );
        }
        for (i, st) in self.steps.iter().enumerate() {
            match st {
                Step::Kernel(k) => {
                    let kind = kind_text(&k.kind);
                    let _ = writeln!(
                        s,
                        "  step {i}: kernel '{}' {kind} dims={:?} root=e{} -> slot {} strides={:?}",
                        k.name, k.dims, k.root, k.out, k.out_strides
                    );
                    for (j, n) in k.nodes.iter().enumerate() {
                        let _ = writeln!(s, "    e{j} = {}", enode_text(n));
                    }
                    if let Some(st) = &k.stash {
                        let _ = writeln!(
                            s,
                            "    stash e{} -> slot {} strides={:?}",
                            st.node, st.slot, st.strides
                        );
                    }
                }
                Step::Gemm(g) => {
                    let _ = writeln!(
                        s,
                        "  step {i}: gemm '{}' {} b={} m={} k={} n={} lhs=slot {} {:?} rhs=slot {} {:?}{} {} slot {}",
                        g.name,
                        g.dtype.short_name(),
                        g.b,
                        g.m,
                        g.k,
                        g.n,
                        g.lhs,
                        g.lhs_strides,
                        g.rhs,
                        g.rhs_strides,
                        if g.scale == 1.0 {
                            String::new()
                        } else {
                            format!(" scaled by {}", g.scale)
                        },
                        if g.accumulate { "+=" } else { "->" },
                        g.out
                    );
                    if let Some(e) = &g.epilogue {
                        let k = &e.kernel;
                        let _ = writeln!(
                            s,
                            "    then on each part's rows ({} of its outer dim a row): kernel '{}' {} dims={:?} root=e{} -> slot {} strides={:?}",
                            e.per_row,
                            k.name,
                            kind_text(&k.kind),
                            k.dims,
                            k.root,
                            k.out,
                            k.out_strides
                        );
                        for (j, n) in k.nodes.iter().enumerate() {
                            let _ = writeln!(s, "      e{j} = {}", enode_text(n));
                        }
                    }
                    if let Some(p) = g.packed {
                        let _ = writeln!(s, "    rhs packed in slot {p}");
                    }
                }
                Step::Pack(p) => {
                    let _ = writeln!(
                        s,
                        "  step {i}: pack '{}' {} k={} n={} slot {} {:?} -> slot {}",
                        p.name,
                        p.dtype.short_name(),
                        p.k,
                        p.n,
                        p.src,
                        p.strides,
                        p.dst
                    );
                }
                Step::Runtime {
                    graph,
                    node,
                    inputs,
                    outputs,
                } => {
                    let g = self.step_graph(*graph);
                    let n = g.node(*node);
                    let at = if *graph == 0 {
                        String::new()
                    } else {
                        format!(" in @{}", g.name)
                    };
                    // A gather's check (see `plan_with`).
                    let what = if matches!(n.op, Op::Take { .. }) && outputs.is_empty() {
                        " (checks the indices of the gathers)"
                    } else {
                        ""
                    };
                    let _ = writeln!(
                        s,
                        "  step {i}: runtime {} '{}'{at} {inputs:?} -> {outputs:?}{what}",
                        n.op.name(),
                        n.name
                    );
                }
                Step::Copy { from, to } => {
                    let _ = writeln!(s, "  step {i}: copy {from:?} -> {to:?}");
                }
                Step::Label(l) => {
                    let _ = writeln!(s, "  step {i}: label L{l}");
                }
                Step::Jump(l) => {
                    let _ = writeln!(s, "  step {i}: jump L{l}");
                }
                Step::BranchUnless { pred, label } => {
                    let _ = writeln!(s, "  step {i}: unless slot {pred} jump L{label}");
                }
                Step::Switch { index, labels } => {
                    let ls: Vec<String> = labels.iter().map(|l| format!("L{l}")).collect();
                    let _ = writeln!(
                        s,
                        "  step {i}: switch slot {index} [{}] (out of range: the last)",
                        ls.join(", ")
                    );
                }
            }
        }
        let _ = writeln!(s, "  outputs: {:?}", self.outputs);
        for d in &self.decisions {
            let _ = writeln!(s, "  decision: {d}");
        }
        s
    }
}

fn kind_text(kind: &KernelKind) -> String {
    match kind {
        KernelKind::Loop => "loop".to_string(),
        KernelKind::Reduce { op, reduced } => format!("reduce_{} reduced={reduced:?}", op.name()),
    }
}

fn enode_text(n: &ENode) -> String {
    match n {
        ENode::Load {
            slot,
            dtype,
            offset,
            strides,
        } => format!(
            "load slot {slot} {} [{offset} + {strides:?}]",
            dtype.short_name()
        ),
        ENode::Gather {
            slot,
            dtype,
            offset,
            strides,
            index,
            scale,
            bound,
        } => format!(
            "gather slot {slot} {} [{offset} + {strides:?} + clamp(e{index}, 0, {}) * {scale}]",
            dtype.short_name(),
            bound - 1
        ),
        ENode::Const(l) => {
            let mut v = String::new();
            l.format_element(0, &mut v);
            format!("const {} {v}", l.dtype.short_name())
        }
        ENode::Iota {
            dtype,
            offset,
            strides,
        } => format!("iota {} [{offset} + {strides:?}]", dtype.short_name()),
        ENode::Unary(u, x, d) => format!("{} e{x} : {}", u.name(), d.short_name()),
        ENode::Binary(b, x, y, d) => format!("{} e{x}, e{y} : {}", b.name(), d.short_name()),
        ENode::Compare(c, x, y, d) => {
            format!("compare_{} e{x}, e{y} ({})", c.name(), d.short_name())
        }
        ENode::Select(p, x, y, d) => format!("select e{p}, e{x}, e{y} : {}", d.short_name()),
        ENode::Clamp(x, l, h, d) => format!("clamp e{x}, e{l}, e{h} : {}", d.short_name()),
        ENode::Convert(x, f, t) => {
            format!("convert e{x} : {} -> {}", f.short_name(), t.short_name())
        }
        ENode::Bitcast(x, f, t) => {
            format!(
                "bitcast_convert e{x} : {} -> {}",
                f.short_name(),
                t.short_name()
            )
        }
    }
}

//! Wide math in a kernel's row (see `crate::wide`): a fused row, one
//! `tl_wide_row_*` call per row, or chunk passes around `tl_wide_*` calls.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, StackSlotData, StackSlotKind, Type, Value, types};
use cranelift_frontend::Variable;
use tensorlift_ir::{BinaryOp, DType, Error, ReduceOp, Result, Scalar, UnaryOp};

use crate::fusion::{ENode, Kernel, KernelKind, Plan, Step};
use crate::rt::RtFn;
use crate::wide;

use super::target::has_fma;
use super::{Accessor, KernelGen, Mode, OUT, STASH, WideCtx, comp_ty, trusted};

/// A row evaluated by one `tl_wide_row_*` call (`KernelGen::fused_row`).
pub(super) struct FusedRow {
    /// What the row computes.
    op: RowOp,
    /// The load node of the row.
    src: usize,
    /// What is applied to the row first.
    pre: Pre,
    /// The accessor key of the row the values are stored to (`OUT` or
    /// `STASH`), if any.
    dst: Option<usize>,
    /// Bytes from the row to the memory to prefetch as it is read
    /// (`KernelGen::prefetch_distance`), if any.
    ahead: Option<i64>,
}

/// What a fused row computes.
#[derive(Clone, Copy)]
enum RowOp {
    /// A function (after `Pre`).
    Map(UnaryOp),
    /// The row divided by `Pre::Div`'s operand.
    Div,
    /// The row's maximum (a row max: nothing stored).
    Max,
    /// The row sum of the row times this node's row (a row dot product:
    /// `emit_dot_rows`, a call per block of rows).
    Dot(usize),
}

/// The operation before a fused row's function, with the node of its
/// operand fixed for the row.
#[derive(Clone, Copy)]
enum Pre {
    None,
    Sub(usize),
    Add(usize),
    Mul(usize),
    Div(usize),
}

/// A pass over one chunk of a wide row (`KernelGen::chunk_pass`).
struct ChunkPass<'a> {
    /// Elements in the chunk (whole vectors).
    len: Value,
    /// The moving accessors at the chunk's start.
    start: &'a [(Variable, Value, i64)],
    /// The chunk buffers.
    base: Value,
    /// Byte offsets of the buffers of the wide nodes already mapped.
    bufs: HashMap<usize, i32>,
    /// The nodes the pass evaluates.
    need: Vec<bool>,
}

/// Whether wide math has a routine for the node: an f32 or f64 function
/// of `wide::has_routine` on an operand of the same dtype.
pub(super) fn wide_eligible(n: &ENode, dtype_of: impl Fn(usize) -> DType) -> bool {
    match n {
        ENode::Unary(u, x, d @ (DType::F32 | DType::F64)) => {
            wide::has_routine(*u) && dtype_of(*x) == *d
        }
        // f64 `pow` (`tl_wide_pow_f64`: both operands in the buffer).
        ENode::Binary(BinaryOp::Pow, x, y, DType::F64) => {
            dtype_of(*x) == DType::F64 && dtype_of(*y) == DType::F64
        }
        ENode::Load { .. }
        | ENode::Gather { .. }
        | ENode::Const(_)
        | ENode::Iota { .. }
        | ENode::Unary(..)
        | ENode::Binary(..)
        | ENode::Compare(..)
        | ENode::Select(..)
        | ENode::Clamp(..)
        | ENode::Convert(..)
        | ENode::Bitcast(..) => false,
    }
}

/// Chunk buffers a wide node takes: two for a binary one.
fn wide_buffers(n: &ENode) -> usize {
    match n {
        ENode::Binary(..) => 2,
        ENode::Load { .. }
        | ENode::Gather { .. }
        | ENode::Const(_)
        | ENode::Iota { .. }
        | ENode::Unary(..)
        | ENode::Compare(..)
        | ENode::Select(..)
        | ENode::Clamp(..)
        | ENode::Convert(..)
        | ENode::Bitcast(..) => 1,
    }
}

/// Rows shorter than this keep the inline 128-bit code for wide nodes.
pub(super) const WIDE_MIN_ROW: usize = 64;

impl<'a, 'b> KernelGen<'a, 'b> {
    /// The fused row (`wide::tl_wide_row_*`) this kernel's innermost loop
    /// is, if any: with wide math on, a row of `f(x)`, `f(x - s)`,
    /// `f(x + s)` or `f(x · s)` for a function with a row routine, `x` an
    /// f32 (f64) load contiguous along the row and `s` fixed for the row (a
    /// load or a constant), stored (a loop) or summed (a row sum, its
    /// values possibly stashed), or `x / s`, or the max of a row `x`. One
    /// call per row then does what the chunk passes of `wide_chunks` (or
    /// the 128-bit max loop) do, in one AVX-512 (AVX2) loop.
    pub(super) fn fused_row(&self, vt: Type, n: usize) -> Option<FusedRow> {
        let dtype = match vt {
            types::F32X4 => DType::F32,
            types::F64X2 => DType::F64,
            _ => return None,
        };
        if !self.opts.wide_math || self.opts.exact || n < WIDE_MIN_ROW || !has_fma() {
            return None;
        }
        wide::lanes()?;
        let k = self.k;
        let rank = k.dims.len();
        if rank == 0 || k.nodes.iter().any(|node| node.dtype() != dtype) {
            return None;
        }
        let inner = |s: &[i64]| s[rank - 1];
        let is_row =
            |i: usize| matches!(&k.nodes[i], ENode::Load { strides, .. } if inner(strides) == 1);
        let is_fixed = |i: usize| match &k.nodes[i] {
            ENode::Load { strides, .. } => inner(strides) == 0,
            ENode::Const(l) => matches!(l.element(0), Scalar::Float(..)),
            ENode::Gather { .. }
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => false,
        };
        // A row max (the first kernel of a softmax): the row itself.
        if let KernelKind::Reduce {
            op: ReduceOp::Max,
            reduced,
        } = &k.kind
        {
            let plain = reduced[rank - 1] && k.nodes.len() == 1 && k.stash.is_none();
            return (plain && is_row(k.root)).then_some(FusedRow {
                op: RowOp::Max,
                src: k.root,
                pre: Pre::None,
                dst: None,
                ahead: None,
            });
        }
        // A row dot product (a matrix-vector product): the row sum of `x ·
        // y`, both rows read contiguously (`y` often the same row for every
        // row), neither from the output.
        if let KernelKind::Reduce {
            op: ReduceOp::Sum,
            reduced,
        } = &k.kind
            && let ENode::Binary(BinaryOp::Mul, x, y, _) = k.nodes[k.root]
        {
            let input =
                |i: usize| matches!(&k.nodes[i], ENode::Load { slot, .. } if *slot != k.out);
            let used = if x == y { 2 } else { 3 };
            let dot = reduced[rank - 1]
                && k.stash.is_none()
                && k.nodes.len() == used
                && is_row(x)
                && is_row(y)
                && input(x)
                && input(y);
            return dot.then_some(FusedRow {
                op: RowOp::Dot(y),
                src: x,
                pre: Pre::None,
                dst: None,
                ahead: None,
            });
        }
        let (op, t) = match k.nodes[k.root] {
            ENode::Unary(op, t, _) if wide::has_row_routine(op) => (RowOp::Map(op), t),
            // A row divided by a value fixed for it (the last kernel of a
            // softmax), as `t / s`.
            ENode::Binary(BinaryOp::Div, x, s, _) if is_row(x) && is_fixed(s) => {
                (RowOp::Div, k.root)
            }
            ENode::Load { .. }
            | ENode::Gather { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => return None,
        };
        let (src, pre) = if matches!(op, RowOp::Div) {
            match k.nodes[t] {
                ENode::Binary(_, x, s, _) => (x, Pre::Div(s)),
                ENode::Load { .. }
                | ENode::Gather { .. }
                | ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => return None,
            }
        } else if is_row(t) {
            (t, Pre::None)
        } else {
            match k.nodes[t] {
                ENode::Binary(BinaryOp::Sub, x, s, _) if is_row(x) && is_fixed(s) => {
                    (x, Pre::Sub(s))
                }
                ENode::Binary(op @ (BinaryOp::Add | BinaryOp::Mul), x, y, _) => {
                    let (x, s) = if is_row(x) && is_fixed(y) {
                        (x, y)
                    } else if is_row(y) && is_fixed(x) {
                        (y, x)
                    } else {
                        return None;
                    };
                    (
                        x,
                        if op == BinaryOp::Add {
                            Pre::Add(s)
                        } else {
                            Pre::Mul(s)
                        },
                    )
                }
                ENode::Load { .. }
                | ENode::Gather { .. }
                | ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => return None,
            }
        };
        let used = match pre {
            Pre::None => 2,
            Pre::Div(_) => 3,
            Pre::Sub(_) | Pre::Add(_) | Pre::Mul(_) => 4,
        };
        if k.nodes.len() != used {
            return None;
        }
        // Where the values go: the output row (a loop) or the stash (a row
        // sum), contiguous.
        let dst = match &k.kind {
            KernelKind::Loop if inner(&k.out_strides) == 1 && k.stash.is_none() => {
                Some((OUT, k.out, &k.out_strides))
            }
            KernelKind::Reduce {
                op: ReduceOp::Sum,
                reduced,
            } if reduced[rank - 1] => match &k.stash {
                None => None,
                Some(st) if st.node == k.root && inner(&st.strides) == 1 => {
                    Some((STASH, st.slot, &st.strides))
                }
                Some(_) => return None,
            },
            KernelKind::Loop | KernelKind::Reduce { .. } => return None,
        };
        // The row may be read from the very elements it is written to (an
        // in-place update), not from others of that buffer.
        let ENode::Load {
            slot,
            offset,
            strides,
            ..
        } = &k.nodes[src]
        else {
            return None;
        };
        if *slot == k.out && !matches!(k.kind, KernelKind::Loop) {
            return None;
        }
        if let Some((_, dslot, dstrides)) = dst
            && *slot == dslot
            && (*offset != 0 || strides != dstrides)
        {
            return None;
        }
        Some(FusedRow {
            op,
            src,
            pre,
            dst: dst.map(|(key, _, _)| key),
            ahead: prefetch_distance(self.plan, self.k, *slot, strides),
        })
    }

    /// The call of a fused row over the `count` elements of the current
    /// row; a sum folds into the row's accumulator `acc`.
    pub(super) fn emit_fused_row(
        &mut self,
        fr: &FusedRow,
        count: Value,
        acc: Option<Variable>,
    ) -> Result<()> {
        let t = comp_ty(self.out_dtype());
        let fixed = |s: &mut Self, i: usize| -> Value {
            match &s.k.nodes[i] {
                ENode::Const(l) => s.const_value(l, Mode::Scalar).s(),
                ENode::Load { .. }
                | ENode::Gather { .. }
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => {
                    let p = s.b.use_var(s.pos[&i]);
                    s.b.ins().load(t, trusted(), p, 0)
                }
            }
        };
        let (a, b) = match fr.pre {
            Pre::None => (self.fconst(t, 0.0), self.fconst(t, 1.0)),
            Pre::Sub(s) => (fixed(self, s), self.fconst(t, 1.0)),
            Pre::Add(s) => {
                let v = fixed(self, s);
                (self.b.ins().fneg(v), self.fconst(t, 1.0))
            }
            Pre::Mul(s) | Pre::Div(s) => (self.fconst(t, 0.0), fixed(self, s)),
        };
        let src = self.b.use_var(self.pos[&fr.src]);
        let dst = match fr.dst {
            Some(key) => self.b.use_var(self.pos[&key]),
            None => self.b.ins().iconst(self.ptr, 0),
        };
        let ahead = match fr.ahead {
            Some(bytes) => self.b.ins().iadd_imm_s(src, bytes),
            None => self.b.ins().iconst(self.ptr, 0),
        };
        let code = match fr.op {
            RowOp::Map(u) => u as i64,
            RowOp::Div => i64::from(wide::ROW_DIV),
            RowOp::Max => i64::from(wide::ROW_MAX),
            RowOp::Dot(_) => return Err(Error::internal("a dot row outside emit_dot_rows")),
        };
        let code = self.b.ins().iconst(types::I32, code);
        let row = if t == types::F64 {
            RtFn::WideRowF64
        } else {
            RtFn::WideRowF32
        };
        let args = [code, src, count, a, b, dst, ahead];
        let native = match (t == types::F32, fr.op) {
            (true, RowOp::Map(u)) => {
                self.native_row(Some(u), fr.dst.is_some(), fr.ahead.is_some())?
            }
            (true, RowOp::Div) => self.native_row(None, fr.dst.is_some(), fr.ahead.is_some())?,
            (true, RowOp::Max | RowOp::Dot(_)) | (false, _) => None,
        };
        let r = match native {
            Some(fref) => {
                let inst = self.b.ins().call(fref, &args);
                self.b.inst_results(inst)[0]
            }
            None => self.call(row, &args)?[0],
        };
        if let Some(a) = acc {
            let cur = self.b.use_var(a);
            let fold = match fr.op {
                RowOp::Max => ReduceOp::Max,
                RowOp::Map(_) | RowOp::Div | RowOp::Dot(_) => ReduceOp::Sum,
            };
            let v = self.reduce_op(fold, cur, r, Mode::Scalar)?;
            self.b.def_var(a, v);
        }
        Ok(())
    }

    /// The row dot product this kernel is (see `fused_row`), if any: its
    /// rows then run as calls of `tl_wide_dot_*` (`emit_dot_rows`) instead
    /// of the loop nest's innermost two loops.
    pub(super) fn dot_row(&self) -> Result<Option<FusedRow>> {
        let Some(&n) = self.k.dims.last() else {
            return Ok(None);
        };
        let Some(vt) = self.vector_type(n)? else {
            return Ok(None);
        };
        Ok(self
            .fused_row(vt, n)
            .filter(|fr| matches!(fr.op, RowOp::Dot(_))))
    }

    /// The rows of a row dot product at the outer indices `outer`: one
    /// `tl_wide_dot_*` call for every row of dim `rows_dim` (those of the
    /// kernel's range when it is dim 0 of a split kernel), or for the one
    /// row of a rank-1 kernel (`rows_dim` None). The call adds each row's
    /// sum to its output, set to 0 by `emit_reduce_init`.
    pub(super) fn emit_dot_rows(
        &mut self,
        fr: &FusedRow,
        outer: &[Value],
        rows_dim: Option<usize>,
    ) -> Result<()> {
        let RowOp::Dot(y) = fr.op else {
            return Err(Error::internal("emit_dot_rows of a row that is not a dot"));
        };
        let k = self.k;
        let (first, rows) = match (rows_dim, self.range) {
            (None, _) => (None, self.b.ins().iconst(types::I64, 1)),
            (Some(0), Some((b, e))) => (Some(b), self.b.ins().isub(e, b)),
            (Some(d), _) => (
                Some(self.b.ins().iconst(types::I64, 0)),
                self.b.ins().iconst(types::I64, k.dims[d] as i64),
            ),
        };
        let mut idx = outer.to_vec();
        idx.extend(first);
        let accs = self.accessors();
        let ptr = |s: &mut Self, key: usize| -> Result<(Value, i64)> {
            let acc = (accs.iter().find(|a| a.0 == key))
                .ok_or_else(|| Error::internal("a dot row's accessor"))?;
            let stride = rows_dim.map_or(0, |d| acc.2[d]);
            Ok((s.position(acc, &idx, None), stride))
        };
        let (xp, xs) = ptr(self, fr.src)?;
        let (yp, ys) = ptr(self, y)?;
        let (op, os) = ptr(self, OUT)?;
        let n = self
            .b
            .ins()
            .iconst(types::I64, *k.dims.last().unwrap_or(&0) as i64);
        let [xs, ys, os] = [xs, ys, os].map(|s| self.b.ins().iconst(types::I64, s));
        let f = if comp_ty(self.out_dtype()) == types::F64 {
            RtFn::WideDotF64
        } else {
            RtFn::WideDotF32
        };
        self.call(f, &[xp, yp, n, rows, xs, ys, op, os])?;
        Ok(())
    }

    /// The nodes of a vectorized row evaluated by the wide routines
    /// (`crate::wide`): f32 or f64 functions that have one, where the
    /// host's vectors are wider than Cranelift's and the row is long enough
    /// for a call per chunk not to matter.
    pub(super) fn wide_nodes(&self, vt: Type, n: usize) -> Option<Vec<usize>> {
        let float = vt == types::F32X4 || vt == types::F64X2;
        if !self.opts.wide_math || self.opts.exact || !float || n < WIDE_MIN_ROW {
            return None;
        }
        wide::lanes()?;
        if !has_fma() {
            return None;
        }
        let max = wide::MAX_BUFFER_BYTES / (wide::CHUNK * vt.lane_type().bytes() as usize);
        let mut used = 0;
        let nodes: Vec<usize> = (self.k.nodes.iter().enumerate())
            .filter(|(_, node)| wide_eligible(node, |x| self.dtype_of(x)))
            .filter(|(_, node)| {
                used += wide_buffers(node);
                used <= max
            })
            .map(|(i, _)| i)
            .collect();
        (!nodes.is_empty()).then_some(nodes)
    }

    /// The vector loop of a row with wide nodes, over chunks of up to
    /// `wide::CHUNK` elements (whole vectors; the scalar tail follows).
    /// Per chunk, in order of depth (wide nodes feeding others first): a
    /// 128-bit pass stores the arguments of the wide nodes into a stack
    /// buffer each, one `tl_wide_f32` call per node maps its buffer in
    /// place; then the row's own pass evaluates the rest, reading the wide
    /// nodes' values from their buffers. Each pass re-reads the chunk's
    /// inputs from the accessors' positions at the chunk's start. Returns
    /// the element index the loop stopped at.
    pub(super) fn wide_chunks(
        &mut self,
        wide: &[usize],
        nv: Value,
        vt: Type,
        vaccs: &[Variable],
        accs: &[Accessor],
    ) -> Result<Value> {
        let k = self.k;
        let lanes = vt.lane_count() as i64;
        // Depth: the number of wide nodes on the longest path to a node.
        let mut depth = vec![0usize; k.nodes.len()];
        for (i, node) in k.nodes.iter().enumerate() {
            let d = (crate::fusion::enode_operands(node).iter())
                .map(|o| depth[*o])
                .max()
                .unwrap_or(0);
            depth[i] = d + usize::from(wide.contains(&i));
        }
        let esize = vt.lane_type().bytes();
        let buf_bytes = wide::CHUNK as u32 * esize;
        // Each wide node's buffers, one after another (a binary node's
        // second operand in its second buffer).
        let mut starts = Vec::with_capacity(wide.len());
        let mut total = 0u32;
        for w in wide {
            starts.push(total);
            total += buf_bytes * wide_buffers(&k.nodes[*w]) as u32;
        }
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            total,
            6,
        ));
        let offset = |w: usize| {
            let j = wide.iter().position(|x| *x == w).unwrap_or(0);
            starts[j] as i32
        };
        let base = self.b.ins().stack_addr(self.ptr, slot, 0);
        let whole = self.b.ins().band_imm_s(nv, !(lanes - 1));
        let chunk = self.b.ins().iconst(types::I64, wide::CHUNK as i64);
        let code_of = |w: usize| match k.nodes[w] {
            ENode::Unary(u, ..) => u as i64,
            ENode::Load { .. }
            | ENode::Gather { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => 0,
        };
        // The operands stored into a wide node's buffers.
        let inputs_of = |w: usize| match k.nodes[w] {
            ENode::Unary(_, x, _) => vec![x],
            ENode::Binary(_, x, y, _) => vec![x, y],
            ENode::Load { .. }
            | ENode::Gather { .. }
            | ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => vec![],
        };
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().jump(header, &[zero.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let more = self.b.ins().icmp(IntCC::SignedLessThan, i, whole);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        self.b.seal_block(body);
        let rest = self.b.ins().isub(whole, i);
        let len = self.b.ins().smin(rest, chunk);
        let start = self.moving(accs);
        // Vector accumulators go through memory around the calls: every
        // vector register is clobbered by a call, and an accumulator live
        // across one was otherwise kept in a stack slot for the whole final
        // pass, each add waiting on the previous one's store.
        let acc_slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            16 * vaccs.len() as u32,
            4,
        ));
        for (j, va) in vaccs.iter().enumerate() {
            let v = self.b.use_var(*va);
            self.b
                .ins()
                .stack_store(self.ptr, v, acc_slot, 16 * j as i32);
        }
        let max_depth = wide.iter().map(|w| depth[*w]).max().unwrap_or(0);
        for level in 1..=max_depth {
            let here: Vec<usize> = wide
                .iter()
                .copied()
                .filter(|w| depth[*w] == level)
                .collect();
            let done: Vec<usize> = wide.iter().copied().filter(|w| depth[*w] < level).collect();
            let roots: Vec<usize> = here.iter().flat_map(|w| inputs_of(*w)).collect();
            let need = self.needed(&roots, &done);
            let bufs = done.iter().map(|w| (*w, offset(*w))).collect();
            let pass = ChunkPass {
                len,
                start: &start,
                base,
                bufs,
                need,
            };
            self.chunk_pass(vt, &pass, &mut |s, addr, _| {
                let vals = s.eval(Mode::Vector(vt))?;
                for w in &here {
                    for (j, x) in inputs_of(*w).into_iter().enumerate() {
                        let v = vals[x].s();
                        let off = offset(*w) + (j as u32 * buf_bytes) as i32;
                        s.b.ins().store(trusted(), v, addr, off);
                    }
                }
                Ok(())
            })?;
            for w in &here {
                let p = self.b.ins().iadd_imm_s(base, i64::from(offset(*w)));
                if let ENode::Binary(..) = k.nodes[*w] {
                    self.call(RtFn::WidePowF64, &[p, len])?;
                    continue;
                }
                let code = self.b.ins().iconst(types::I32, code_of(*w));
                let map = if esize == 8 {
                    RtFn::WideF64
                } else {
                    RtFn::WideF32
                };
                self.call(map, &[code, p, len])?;
            }
        }
        for (j, va) in vaccs.iter().enumerate() {
            let v = self
                .b
                .ins()
                .stack_load(self.ptr, vt, acc_slot, 16 * j as i32);
            self.b.def_var(*va, v);
        }
        let mut roots = vec![k.root];
        roots.extend(k.stash.as_ref().map(|st| st.node));
        let need = self.needed(&roots, wide);
        let pass = ChunkPass {
            len,
            start: &start,
            base,
            bufs: wide.iter().map(|w| (*w, offset(*w))).collect(),
            need,
        };
        // Vector `c` of an iteration folds into accumulator `c`.
        let m = if self.float_extreme().is_some() {
            vaccs.len().saturating_sub(2)
        } else {
            vaccs.len()
        };
        self.chunk_pass(vt, &pass, &mut |s, _, c| {
            let mut own: Vec<Variable> = vaccs.to_vec();
            if m > 1 {
                own.swap(0, c);
            }
            s.vector_step(vt, lanes, 1, &own, accs)
        })?;
        self.place(&start, len);
        let next = self.b.ins().iadd(i, len);
        self.b.ins().jump(header, &[next.into()]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(whole)
    }

    /// One 128-bit pass over a chunk of a wide row: per vector, the
    /// accessors placed at its element `j`, `eval` set up for the pass, and
    /// `body` called with the chunk buffers' address at `j`.
    fn chunk_pass(
        &mut self,
        vt: Type,
        pass: &ChunkPass<'_>,
        body: &mut dyn FnMut(&mut Self, Value, usize) -> Result<()>,
    ) -> Result<()> {
        let lanes = vt.lane_count() as i64;
        // Two vectors per iteration (halves the loop's own instructions),
        // then the odd one.
        let mut from = None;
        for copies in [2, 1] {
            let last = self.for_loop_from(from, pass.len, copies * lanes, &mut |s, j| {
                for c in 0..copies {
                    let j = if c == 0 {
                        j
                    } else {
                        s.b.ins().iadd_imm_s(j, c * lanes)
                    };
                    s.place(pass.start, j);
                    let shift = i64::from(vt.lane_type().bytes().trailing_zeros());
                    let bytes = s.b.ins().ishl_imm_s(j, shift);
                    let addr = s.b.ins().iadd(pass.base, bytes);
                    s.wide = Some(WideCtx {
                        addr,
                        bufs: pass.bufs.clone(),
                        need: pass.need.clone(),
                    });
                    let r = body(s, addr, c as usize);
                    s.wide = None;
                    r?;
                }
                Ok(())
            })?;
            from = Some(last);
        }
        Ok(())
    }

    /// The nodes `roots` depend on, not looking past the nodes of `known`
    /// (whose values are read from their buffers).
    fn needed(&self, roots: &[usize], known: &[usize]) -> Vec<bool> {
        let mut need = vec![false; self.k.nodes.len()];
        let mut stack = roots.to_vec();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut need[i], true) || known.contains(&i) {
                continue;
            }
            stack.extend(crate::fusion::enode_operands(&self.k.nodes[i]));
        }
        need
    }
}

/// In a row group (a block of rows at a time through every kernel),
/// a later kernel that reads a row of a buffer the group's first
/// kernel also reads, and no kernel of the group writes, prefetches the
/// same row of the next block: the bytes to it (`block` rows on). The
/// first kernel then finds its rows in L2 instead of waiting on memory
/// (softmax: the row max reads `x`, the exp row prefetches it; 1.2 →
/// 0.9 ms, docs/benchmarks.md).
pub(super) fn prefetch_distance(
    plan: &Plan,
    k: &Kernel,
    slot: usize,
    strides: &[i64],
) -> Option<i64> {
    let at = (plan.steps.iter())
        .position(|st| matches!(st, Step::Kernel(st_k) if std::ptr::eq(st_k, k)))?;
    let g = plan.groups.iter().find(|g| g.start < at && at < g.end)?;
    let written = g
        .kernels(plan)
        .any(|k| k.out == slot || k.stash.as_ref().is_some_and(|st| st.slot == slot));
    let Step::Kernel(first) = &plan.steps[g.start] else {
        return None;
    };
    let first_reads = first
        .nodes
        .iter()
        .any(|n| matches!(n, ENode::Load { slot: s, .. } if *s == slot));
    let row = *strides.first()?;
    let esize = plan.slots[slot].dtype.size() as i64;
    (!written && first_reads && row > 0).then(|| row * g.block as i64 * esize)
}

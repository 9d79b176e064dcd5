//! A kernel's loop nest: the outer dims as loops, the innermost one
//! vectorized where the lowering has vector code for every node
//! (`vector_type`, by a dry run), then a scalar tail; every accessor
//! advanced by its stride.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Function, InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_module::Module;
use tensorlift_ir::{DType, Error, ReduceOp, Result};

use crate::fusion::{ENode, KernelKind, Plan, RowGroup, SlotId, Step};
use crate::rt::RtFn;

use super::cost::element_cost;
use super::target::{has_sse41, math_int_ty, vec_ty};
use super::{
    Accessor, Imports, KernelGen, LowerError, Lowered, Mode, OUT, STASH, V, comp_ty, trusted,
    unaligned,
};

/// Whether a load of `from` in a kernel of `to` is converted as it is read
/// (the float widths, whose vectors have different lane counts).
fn converted_on_load(from: DType, to: DType) -> bool {
    matches!(
        (from, to),
        (DType::F32, DType::F64) | (DType::F64, DType::F32)
    )
}

impl<'a, 'b> KernelGen<'a, 'b> {
    /// Accessors: (key, offset, strides, element size) for every load/iota and the output.
    pub(super) fn accessors(&self) -> Vec<Accessor> {
        let mut v: Vec<Accessor> = self
            .k
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                ENode::Load {
                    dtype,
                    offset,
                    strides,
                    ..
                }
                | ENode::Gather {
                    dtype,
                    offset,
                    strides,
                    ..
                } => Some((i, *offset, strides.clone(), dtype.size() as i64)),
                ENode::Iota {
                    offset, strides, ..
                } => Some((i, *offset, strides.clone(), 0)),
                ENode::Const(_)
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Compare(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Convert(..)
                | ENode::Bitcast(..) => None,
            })
            .collect();
        v.push((
            OUT,
            0,
            self.k.out_strides.clone(),
            self.out_dtype().size() as i64,
        ));
        if let Some(st) = &self.k.stash {
            let esize = self.plan.slots[st.slot].dtype.size() as i64;
            v.push((STASH, 0, st.strides.clone(), esize));
        }
        v
    }

    /// Stores the stashed node's value (if the kernel has a stash) at the
    /// stash position plus `off` bytes.
    fn store_stash(&mut self, vals: &[V], off: i32) {
        if let Some(st) = &self.k.stash {
            let v = vals[st.node].s();
            let p = self.b.use_var(self.pos[&STASH]);
            self.b.ins().store(unaligned(), v, p, off);
        }
    }

    pub(super) fn emit(&mut self) -> Result<()> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let bufs = self.b.block_params(entry)[0];
        let (begin, end) = (self.b.block_params(entry)[2], self.b.block_params(entry)[3]);
        if crate::fusion::range_capable(self.k) {
            self.range = Some((begin, end));
        }
        self.emit_body(bufs)?;
        let zero = self.b.ins().iconst(types::I32, 0);
        self.b.ins().return_(&[zero]);
        Ok(())
    }

    /// The kernel's code at the builder's current position, reading slot
    /// pointers from `bufs` (no function of its own: `main` inlines scalar
    /// kernels, see `driver::inline_in_main`).
    pub(super) fn emit_body(&mut self, bufs: Value) -> Result<()> {
        let mut slots: Vec<usize> = self.k.nodes.iter().filter_map(ENode::slot).collect();
        slots.push(self.k.out);
        slots.extend(self.k.stash.as_ref().map(|st| st.slot));
        slots.sort_unstable();
        slots.dedup();
        for s in slots {
            let p = self.b.ins().load(self.ptr, trusted(), bufs, (s * 8) as i32);
            self.bases.insert(s, p);
        }
        let rank = self.k.dims.len();
        if let KernelKind::Reduce { op, .. } = &self.k.kind {
            self.emit_reduce_init(*op)?;
        }
        let mut idx = Vec::new();
        if rank == 0 {
            let one = self.b.ins().iconst(types::I64, 1);
            self.inner(&[], 1, None, one)?;
        } else {
            self.nest(0, &mut idx)?;
        }
        Ok(())
    }

    /// A rank-0 loop kernel at the builder's current position in `main`:
    /// one evaluation, no loop, reading and writing the slots in `regs` as
    /// Cranelift variables (see `driver::register_slots`) and the others through
    /// their pointers in `bufs`.
    pub(super) fn emit_scalar(
        &mut self,
        bufs: Value,
        regs: &HashMap<SlotId, Variable>,
    ) -> Result<()> {
        self.regs.clone_from(regs);
        let mut bases: HashMap<SlotId, Value> = HashMap::new();
        for (key, offset, _, esize) in self.accessors() {
            let slot = match key {
                OUT => self.k.out,
                STASH => return Err(Error::internal("an inline kernel with a stash")),
                i => match &self.k.nodes[i] {
                    ENode::Load { slot, .. } | ENode::Gather { slot, .. } => *slot,
                    ENode::Const(_)
                    | ENode::Unary(..)
                    | ENode::Binary(..)
                    | ENode::Compare(..)
                    | ENode::Select(..)
                    | ENode::Clamp(..)
                    | ENode::Convert(..)
                    | ENode::Bitcast(..) => {
                        return Err(Error::internal("an accessor that is not a load or iota"));
                    }
                    ENode::Iota { .. } => {
                        // An iota's position is its value.
                        let var = self.b.declare_var(types::I64);
                        let v = self.b.ins().iconst(types::I64, offset);
                        self.b.def_var(var, v);
                        self.pos.insert(key, var);
                        continue;
                    }
                },
            };
            if esize == 0 || regs.contains_key(&slot) {
                continue;
            }
            let base = *bases.entry(slot).or_insert_with(|| {
                self.b
                    .ins()
                    .load(self.ptr, trusted(), bufs, (slot * 8) as i32)
            });
            let p = self.b.ins().iadd_imm_s(base, offset * esize);
            let var = self.b.declare_var(self.ptr);
            self.b.def_var(var, p);
            self.pos.insert(key, var);
        }
        let vals = self.eval(Mode::Scalar)?;
        let root = vals[self.k.root];
        match regs.get(&self.k.out) {
            Some(&var) => self.b.def_var(var, root.s()),
            None => self.store_out(root)?,
        }
        Ok(())
    }

    /// `for i in 0..n { body(i) }` with `i` as a block parameter.
    fn for_loop(
        &mut self,
        n: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<()>,
    ) -> Result<Value> {
        self.for_loop_from(None, n, step, body)
    }

    /// `for (i = from; i + step <= n; i += step) body(i)` (`from` defaults
    /// to 0); returns the index the loop stopped at.
    pub(super) fn for_loop_from(
        &mut self,
        from: Option<Value>,
        n: Value,
        step: i64,
        body: &mut dyn FnMut(&mut Self, Value) -> Result<()>,
    ) -> Result<Value> {
        let header = self.b.create_block();
        let body_blk = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(header, types::I64);
        let zero = match from {
            Some(v) => v,
            None => self.b.ins().iconst(types::I64, 0),
        };
        self.b.ins().jump(header, &[zero.into()]);
        self.b.switch_to_block(header);
        let i = self.b.block_params(header)[0];
        let cond = if step == 1 {
            self.b.ins().icmp(IntCC::SignedLessThan, i, n)
        } else {
            // Vector loop: while i + step <= n.
            let end = self.b.ins().iadd_imm_s(i, step);
            self.b.ins().icmp(IntCC::SignedLessThanOrEqual, end, n)
        };
        self.b.ins().brif(cond, body_blk, &[], exit, &[]);
        self.b.switch_to_block(body_blk);
        self.b.seal_block(body_blk);
        body(self, i)?;
        let next = self.b.ins().iadd_imm_s(i, step);
        self.b.ins().jump(header, &[next.into()]);
        self.b.seal_block(header);
        self.b.switch_to_block(exit);
        self.b.seal_block(exit);
        Ok(i)
    }

    fn nest(&mut self, d: usize, idx: &mut Vec<Value>) -> Result<()> {
        let rank = self.k.dims.len();
        // A row dot product runs its rows (the innermost two dims, or the
        // one row of a rank-1 kernel) as calls (`emit_dot_rows`).
        if (d + 2 == rank || rank == 1)
            && let Some(fr) = self.dot_row()?
        {
            return self.emit_dot_rows(&fr, idx, (rank > 1).then_some(d));
        }
        // A column sum: its rows and columns as one `tl_wide_cols_*` call.
        if d + 2 == rank
            && let Some((rows_stride, f)) = self.column_sum()
        {
            return self.emit_column_sum(idx, rows_stride, f);
        }
        // A transpose tile of a plain copy (`tile::tile_kernels`): its two
        // innermost dims as blocks through vector registers.
        if d + 2 == rank
            && d > 0
            && let Some(t) = self.transpose_tile()
        {
            return self.emit_transpose_tile(&t, idx);
        }
        // The outermost dim runs over [begin, end) when the kernel is split.
        let range = if d == 0 { self.range } else { None };
        if d + 1 == rank {
            let n = self.k.dims[d];
            // A rank-1 kernel of a row group runs a block of rows per
            // call: its row is that long, not the whole dim (wide math's
            // chunk loops would not pay for their code).
            let n = match (rank, self.row_group()) {
                (1, Some(g)) => n.min(g.block),
                _ => n,
            };
            return match range {
                Some((b, e)) => {
                    let count = self.b.ins().isub(e, b);
                    self.inner(idx, n, Some(b), count)
                }
                None => {
                    let count = self.b.ins().iconst(types::I64, n as i64);
                    self.inner(idx, n, None, count)
                }
            };
        }
        let (from, n) = match range {
            Some((b, e)) => (Some(b), e),
            None => (None, self.b.ins().iconst(types::I64, self.k.dims[d] as i64)),
        };
        self.for_loop_from(from, n, 1, &mut |s, i| {
            idx.push(i);
            s.nest(d + 1, idx)?;
            idx.pop();
            Ok(())
        })?;
        Ok(())
    }

    /// For a float sum over the second-innermost dim of a plain load that
    /// keeps the innermost one (contiguous in the operand and the output,
    /// 16 columns or more): the operand's row stride in elements and the
    /// routine of `wide::cols` that sums it.
    fn column_sum(&self) -> Option<(i64, RtFn)> {
        let rank = self.k.dims.len();
        let KernelKind::Reduce {
            op: ReduceOp::Sum,
            reduced,
        } = &self.k.kind
        else {
            return None;
        };
        let [ENode::Load { dtype, strides, .. }] = self.k.nodes.as_slice() else {
            return None;
        };
        let f = if *dtype == DType::F32 {
            RtFn::WideColsF32
        } else if *dtype == DType::F64 {
            RtFn::WideColsF64
        } else {
            return None;
        };
        let (r, c) = (rank.checked_sub(2)?, rank - 1);
        let fits = *dtype == self.out_dtype()
            && self.k.stash.is_none()
            && reduced[r]
            && !reduced[c]
            && strides[c] == 1
            && self.k.out_strides[c] == 1
            && self.k.dims[c] >= 16;
        fits.then_some((strides[r], f))
    }

    /// One call of the column-sum routine `f` for the rows and columns of
    /// the outer indices `outer` (the output already holds the sum so far,
    /// the reduction's identity at first).
    fn emit_column_sum(&mut self, outer: &[Value], rows_stride: i64, f: RtFn) -> Result<()> {
        let x = self.position_of(0, outer)?;
        let o = self.position_of(OUT, outer)?;
        let rank = self.k.dims.len();
        let [rows, rs, cols] = [
            self.k.dims[rank - 2] as i64,
            rows_stride,
            self.k.dims[rank - 1] as i64,
        ]
        .map(|v| self.b.ins().iconst(types::I64, v));
        self.call(f, &[x, rows, rs, cols, o])?;
        Ok(())
    }

    /// For a copy kernel whose two innermost dims are a transpose tile
    /// (`p`, along which the operand is contiguous, then `q`, along which
    /// the output is): its layout in bytes, when both dims hold whole
    /// blocks of a 16-byte vector's lanes and every offset in the tile fits
    /// an instruction's displacement.
    fn transpose_tile(&self) -> Option<TransposeTile> {
        let rank = self.k.dims.len();
        let [ENode::Load { dtype, strides, .. }] = self.k.nodes.as_slice() else {
            return None;
        };
        if !self.opts.vectorize
            || !has_sse41()
            || !matches!(self.k.kind, KernelKind::Loop)
            || self.k.stash.is_some()
            || *dtype != self.out_dtype()
            || rank < 3
        {
            return None;
        }
        let esize = dtype.size();
        let lanes = 16usize.checked_div(esize).filter(|l| matches!(l, 2 | 4))?;
        let (p, q) = (rank - 2, rank - 1);
        let (np, nq) = (self.k.dims[p], self.k.dims[q]);
        if strides[p] != 1
            || self.k.out_strides[q] != 1
            || !np.is_multiple_of(lanes)
            || !nq.is_multiple_of(lanes)
            || np * nq > 1024
        {
            return None;
        }
        let e = esize as i64;
        let (row, col) = (
            strides[q].checked_mul(e)?,
            self.k.out_strides[p].checked_mul(e)?,
        );
        let reach = |step: i64, n: usize| step.checked_mul(n as i64)?.checked_abs();
        let fits = |a: Option<i64>, b: Option<i64>| {
            a.zip(b)
                .and_then(|(a, b)| a.checked_add(b))
                .is_some_and(|m| m < i64::from(i32::MAX))
        };
        (fits(reach(row, nq), reach(e, np)) && fits(reach(col, np), reach(e, nq))).then_some(
            TransposeTile {
                lanes,
                esize: esize as u8,
                np,
                nq,
                row,
                col,
            },
        )
    }

    /// The tile of [`Self::transpose_tile`] at the outer indices `outer`:
    /// for each block of `lanes`×`lanes` elements, one vector load per row
    /// of the operand, the block transposed by unpacking pairs of vectors
    /// (lanes, then pairs of lanes), one vector store per output row.
    /// Bytes are moved as they are: the copy is exact for every type.
    fn emit_transpose_tile(&mut self, t: &TransposeTile, outer: &[Value]) -> Result<()> {
        let src = self.position_of(0, outer)?;
        let dst = self.position_of(OUT, outer)?;
        let e = i64::from(t.esize);
        for p0 in (0..t.np).step_by(t.lanes) {
            for q0 in (0..t.nq).step_by(t.lanes) {
                let rows: Vec<Value> = (0..t.lanes)
                    .map(|c| {
                        let off = p0 as i64 * e + (q0 + c) as i64 * t.row;
                        self.b
                            .ins()
                            .load(types::I8X16, unaligned(), src, off as i32)
                    })
                    .collect();
                let cols = self.transpose_block(&rows, t.esize);
                for (l, v) in cols.into_iter().enumerate() {
                    let off = (p0 + l) as i64 * t.col + q0 as i64 * e;
                    self.b.ins().store(unaligned(), v, dst, off as i32);
                }
            }
        }
        Ok(())
    }

    /// `rows` (2 or 4 vectors of as many lanes) transposed.
    fn transpose_block(&mut self, rows: &[Value], esize: u8) -> Vec<Value> {
        let shuffle = |s: &mut Self, a: Value, b: Value, lanes: [u8; 4]| {
            let lanes = &lanes[..16 / usize::from(esize)];
            let mask: Vec<u8> = lanes
                .iter()
                .flat_map(|l| (0..esize).map(move |i| l * esize + i))
                .collect();
            let mask = s.b.func.dfg.immediates.push(mask.into());
            s.b.ins().shuffle(a, b, mask)
        };
        if let [a, b] = rows {
            return vec![
                shuffle(self, *a, *b, [0, 2, 0, 0]),
                shuffle(self, *a, *b, [1, 3, 0, 0]),
            ];
        }
        let [a, b, c, d] = [rows[0], rows[1], rows[2], rows[3]];
        let ab_lo = shuffle(self, a, b, [0, 4, 1, 5]);
        let ab_hi = shuffle(self, a, b, [2, 6, 3, 7]);
        let cd_lo = shuffle(self, c, d, [0, 4, 1, 5]);
        let cd_hi = shuffle(self, c, d, [2, 6, 3, 7]);
        vec![
            shuffle(self, ab_lo, cd_lo, [0, 1, 4, 5]),
            shuffle(self, ab_lo, cd_lo, [2, 3, 6, 7]),
            shuffle(self, ab_hi, cd_hi, [0, 1, 4, 5]),
            shuffle(self, ab_hi, cd_hi, [2, 3, 6, 7]),
        ]
    }

    /// Sets up accessor positions for the innermost loop given the outer
    /// indices, then runs it (vector part, then scalar tail).
    fn inner(
        &mut self,
        outer: &[Value],
        n: usize,
        start: Option<Value>,
        count: Value,
    ) -> Result<()> {
        let rank = self.k.dims.len();
        let accs = self.accessors();
        for acc in &accs {
            let val = self.position(acc, outer, start);
            let var = self.b.declare_var(types::I64);
            self.b.def_var(var, val);
            self.pos.insert(acc.0, var);
        }
        let inner_stride = |s: &Vec<i64>| if rank == 0 { 0 } else { s[rank - 1] };
        let reduce_inner = matches!(&self.k.kind, KernelKind::Reduce { reduced, .. } if rank > 0 && reduced[rank - 1]);
        let f64_sum = self.f64_sum()?;
        // Register accumulator for a reduction over the innermost dim (an
        // f64 one for an exact f32 sum).
        let acc = if reduce_inner {
            let ty = comp_ty(self.out_dtype());
            let var = self.b.declare_var(if f64_sum { types::F64 } else { ty });
            let p = self.b.use_var(self.pos[&OUT]);
            let v = self.b.ins().load(ty, trusted(), p, 0);
            let v = if f64_sum {
                self.b.ins().fpromote(types::F64, v)
            } else {
                v
            };
            self.b.def_var(var, v);
            Some(var)
        } else {
            None
        };
        let nv = count;
        // The row's length when it is the kernel's own (not a range of a
        // split): loops that cannot run for it are not emitted.
        let fixed = start.is_none().then_some(n as i64);
        let mut start = None;
        // Whether the vector loops leave no element for a scalar tail.
        let mut no_tail = false;
        let vector = self.vector_type(n)?;
        if let Some(fr) = vector.and_then(|vt| self.fused_row(vt, n)) {
            self.emit_fused_row(&fr, nv, acc)?;
            start = Some(nv);
            no_tail = true;
        } else if let Some(vt) = vector {
            let lanes = vt.lane_count() as i64;
            // Hoist stride-0 loads and constants out of the vector loop.
            self.hoisted.clear();
            for (i, node) in self.k.nodes.iter().enumerate() {
                // A gather's index, fixed for the row: one scalar.
                if self.gather_index[i]
                    && let ENode::Load { dtype, .. } = node
                {
                    let p = self.b.use_var(self.pos[&i]);
                    let v = self.b.ins().load(comp_ty(*dtype), trusted(), p, 0);
                    self.hoisted.insert(i, v);
                    continue;
                }
                if let ENode::Load { strides, dtype, .. } = node
                    && inner_stride(strides) == 0
                {
                    let p = self.b.use_var(self.pos[&i]);
                    let v = self.b.ins().load(comp_ty(*dtype), trusted(), p, 0);
                    let dt = self.out_dtype();
                    let v = if converted_on_load(*dtype, dt) {
                        // Converted here, as `vector_load` does.
                        self.convert(V::S(v), *dtype, dt)?.s()
                    } else {
                        v
                    };
                    let lt = if converted_on_load(*dtype, dt) {
                        vt
                    } else {
                        vec_ty(*dtype).unwrap_or(vt)
                    };
                    let v = self.b.ins().splat(lt, v);
                    self.hoisted.insert(i, v);
                }
                // Constants splat once, not once per unrolled copy and pass.
                if let ENode::Const(l) = node
                    && let V::S(v) = self.const_value(l, Mode::Vector(vt))
                {
                    self.hoisted.insert(i, v);
                }
            }
            // Reductions over the innermost dim keep several independent
            // vector accumulators so the loop is not bound by the latency
            // of one dependency chain.
            // A body with a transcendental function is long enough to hide
            // the accumulator's latency by itself, and unrolled copies of
            // it would only spill its constants.
            let costly = element_cost(self.k) >= crate::fusion::TRANSCENDENTAL_COST;
            let wide = self.wide_nodes(vt, n);
            // Wide rows take the transcendental work out of the loop, so a
            // reduction of them keeps one accumulator per vector of a
            // chunk pass's iteration (two).
            let unroll: i64 = match (acc, &wide) {
                (Some(_), Some(_)) => 2,
                (Some(_), None) if !costly => 4,
                // Cheap elementwise rows: four independent vectors per
                // step, so loads, arithmetic and stores of several
                // vectors overlap and the loop's overhead is shared.
                (None, None) if !costly => 4,
                _ => 1,
            };
            let mut vaccs = Vec::new();
            if let (Some(_), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let init = self.reduce_init(*op)?;
                let v = self.b.ins().splat(vt, init);
                let mut inits = vec![v; unroll as usize];
                // Float max/min: two companions shared by the accumulators
                // (see `float_extreme_step`): the lanes that saw a NaN (none
                // yet) and the AND (max) / OR (min) of every element's bits.
                if let Some(is_max) = self.float_extreme() {
                    let ity = math_int_ty(vt);
                    let none = self.splat_i(ity, 0);
                    let bits = self.splat_i(ity, if is_max { -1 } else { 0 });
                    for m in [none, bits] {
                        inits.push(self.b.ins().bitcast(vt, MemFlagsData::new(), m));
                    }
                }
                for v in inits {
                    let var = self.b.declare_var(vt);
                    self.b.def_var(var, v);
                    vaccs.push(var);
                }
            }
            let mut from = None;
            let passes: &[(i64, i64)] = match wide {
                Some(wide) => {
                    from = Some(self.wide_chunks(&wide, nv, vt, &vaccs, &accs)?);
                    &[]
                }
                None if unroll > 1 && fixed.is_some_and(|n| n % (lanes * unroll) == 0) => {
                    &[(lanes * unroll, unroll)]
                }
                // Rows shorter than an unrolled step never take it.
                None if unroll > 1 && (n as i64) >= lanes * unroll => {
                    &[(lanes * unroll, unroll), (lanes, 1)]
                }
                None => &[(lanes, 1)],
            };
            no_tail = fixed.is_some_and(|n| n % lanes == 0);
            for &(step, copies) in passes {
                let last = self.for_loop_from(from, nv, step, &mut |s, _i| {
                    s.vector_step(vt, step, copies, &vaccs, &accs)
                })?;
                from = Some(last);
            }
            let last = from.ok_or_else(|| Error::internal("vector loop missing"))?;
            // Fold the vector partials into the scalar accumulator, lane by lane.
            if let (Some(sa), KernelKind::Reduce { op, .. }) = (acc, &self.k.kind) {
                let partials = self.vector_partials(vt, &vaccs);
                let mut v = partials[0];
                for w in &partials[1..] {
                    v = self.reduce_op(*op, v, *w, Mode::Vector(vt))?;
                }
                let mut a = self.b.use_var(sa);
                for l in 0..lanes {
                    let e = self.b.ins().extractlane(v, l as u8);
                    a = self.reduce_op(*op, a, e, Mode::Scalar)?;
                }
                self.b.def_var(sa, a);
            }
            start = Some(last);
        }
        // Scalar loop (the tail after a vector loop, or the whole row).
        let first = match start {
            Some(s) => s,
            None => self.b.ins().iconst(types::I64, 0),
        };
        if no_tail {
            return self.store_accumulator(acc);
        }
        let remaining = self.b.ins().isub(nv, first);
        let accs2 = accs.clone();
        self.for_loop(remaining, 1, &mut |s, _i| {
            let vals = s.eval(Mode::Scalar)?;
            s.store_stash(&vals, 0);
            let root_v = vals[s.k.root];
            match (&s.k.kind, acc) {
                (KernelKind::Loop, _) => s.store_out(root_v)?,
                (KernelKind::Reduce { .. }, Some(a)) if f64_sum => {
                    let cur = s.b.use_var(a);
                    let x = s.b.ins().fpromote(types::F64, root_v.s());
                    let r = s.b.ins().fadd(cur, x);
                    s.b.def_var(a, r);
                }
                (KernelKind::Reduce { op, .. }, Some(a)) => {
                    let cur = s.b.use_var(a);
                    let r = s.reduce_op(*op, cur, root_v.s(), Mode::Scalar)?;
                    s.b.def_var(a, r);
                }
                (KernelKind::Reduce { op, .. }, None) => {
                    let p = s.b.use_var(s.pos[&OUT]);
                    let ty = comp_ty(s.out_dtype());
                    let cur = s.b.ins().load(ty, trusted(), p, 0);
                    let r = s.reduce_op(*op, cur, root_v.s(), Mode::Scalar)?;
                    s.b.ins().store(trusted(), r, p, 0);
                }
            }
            for (key, _, strides, esize) in &accs2 {
                let st = inner_stride(strides);
                if st != 0 {
                    let var = s.pos[key];
                    let p = s.b.use_var(var);
                    let p =
                        s.b.ins()
                            .iadd_imm_s(p, if *esize == 0 { st } else { st * esize });
                    s.b.def_var(var, p);
                }
            }
            Ok(())
        })?;
        self.store_accumulator(acc)
    }

    /// Stores a row reduction's register accumulator (if any) to its output.
    fn store_accumulator(&mut self, acc: Option<Variable>) -> Result<()> {
        if let Some(a) = acc {
            let p = self.b.use_var(self.pos[&OUT]);
            let v = self.b.use_var(a);
            let v = if self.f64_sum()? {
                self.b.ins().fdemote(types::F32, v)
            } else {
                v
            };
            self.b.ins().store(trusted(), v, p, 0);
        }
        Ok(())
    }

    /// Whether this kernel is an exact-mode f32 sum, which accumulates in
    /// f64 and rounds once, as the interpreter does: only over the
    /// innermost dim alone (the planner's `native_reduce` leaves every
    /// other exact f32 sum to the interpreter's kernel, since partial sums
    /// kept in the f32 output would round).
    fn f64_sum(&self) -> Result<bool> {
        let KernelKind::Reduce { op, reduced } = &self.k.kind else {
            return Ok(false);
        };
        if !(self.opts.exact && *op == ReduceOp::Sum && self.out_dtype() == DType::F32) {
            return Ok(false);
        }
        match reduced.split_last() {
            Some((true, outer)) if outer.iter().all(|r| !r) => Ok(true),
            _ => Err(Error::internal(format!(
                "kernel '{}': an exact f32 sum over dims {reduced:?}, not the innermost alone",
                self.k.name
            ))),
        }
    }

    /// The row group this kernel runs in, if any.
    fn row_group(&self) -> Option<&'a RowGroup> {
        let plan: &'a Plan = self.plan;
        plan.groups.iter().find(|g| {
            plan.steps[g.start..g.end]
                .iter()
                .any(|st| matches!(st, Step::Kernel(k) if std::ptr::eq(k, self.k)))
        })
    }

    /// [`Self::position`] of the accessor `key` (a node's index, [`OUT`]
    /// or [`STASH`]) at the outer indices `outer` and the innermost 0.
    pub(super) fn position_of(&mut self, key: usize, outer: &[Value]) -> Result<Value> {
        let acc = (self.accessors().into_iter())
            .find(|a| a.0 == key)
            .ok_or_else(|| {
                Error::internal(format!("kernel '{}' has no accessor {key}", self.k.name))
            })?;
        Ok(self.position(&acc, outer, None))
    }

    /// Where accessor `acc` is at the outer indices `outer` (dims `0..`)
    /// and the innermost index `start` (0 when None): a byte pointer, or
    /// an iota's element position.
    pub(super) fn position(
        &mut self,
        acc: &Accessor,
        outer: &[Value],
        start: Option<Value>,
    ) -> Value {
        let (key, offset, strides, esize) = acc;
        let rank = self.k.dims.len();
        let mut pos = self.b.ins().iconst(types::I64, *offset);
        if let Some(st) = start
            && strides[rank - 1] != 0
        {
            let t = self.b.ins().imul_imm_s(st, strides[rank - 1]);
            pos = self.b.ins().iadd(pos, t);
        }
        for (d, i) in outer.iter().enumerate() {
            if strides[d] != 0 {
                let t = self.b.ins().imul_imm_s(*i, strides[d]);
                pos = self.b.ins().iadd(pos, t);
            }
        }
        if *esize == 0 {
            return pos;
        }
        let slot = if *key == OUT {
            self.k.out
        } else if *key == STASH {
            self.k.stash.as_ref().map_or(self.k.out, |st| st.slot)
        } else {
            self.load_slot(*key)
        };
        let bytes = self.b.ins().imul_imm_s(pos, *esize);
        let base = self.bases[&slot];
        self.b.ins().iadd(base, bytes)
    }

    /// One step of a vector loop: `copies` vectors evaluated (at element
    /// offsets `u·lanes`), stored or folded into the accumulators, then the
    /// accessors advanced by `step` elements.
    pub(super) fn vector_step(
        &mut self,
        vt: Type,
        step: i64,
        copies: i64,
        vaccs: &[Variable],
        accs: &[Accessor],
    ) -> Result<()> {
        let lanes = vt.lane_count() as i64;
        for u in 0..copies {
            self.load_off = u * lanes;
            let vals = self.eval(Mode::Vector(vt))?;
            self.load_off = 0;
            let root = vals[self.k.root].s();
            let esize = self.out_dtype().size() as i32;
            let off = (u * lanes) as i32 * esize;
            let stash_esize = self
                .k
                .stash
                .as_ref()
                .map_or(0, |st| self.plan.slots[st.slot].dtype.size() as i32);
            self.store_stash(&vals, (u * lanes) as i32 * stash_esize);
            match (&self.k.kind, vaccs.get(u as usize)) {
                (KernelKind::Loop, _) => {
                    let p = self.b.use_var(self.pos[&OUT]);
                    self.b.ins().store(unaligned(), root, p, off);
                }
                (KernelKind::Reduce { op, .. }, Some(va)) => match self.float_extreme() {
                    Some(is_max) => self.float_extreme_step(is_max, vt, vaccs, u as usize, root),
                    None => {
                        let a = self.b.use_var(*va);
                        let r = self.reduce_op(*op, a, root, Mode::Vector(vt))?;
                        self.b.def_var(*va, r);
                    }
                },
                (KernelKind::Reduce { op, .. }, None) => {
                    let p = self.b.use_var(self.pos[&OUT]);
                    let a = self.b.ins().load(vt, unaligned(), p, off);
                    let r = self.reduce_op(*op, a, root, Mode::Vector(vt))?;
                    self.b.ins().store(unaligned(), r, p, off);
                }
            }
        }
        self.advance(accs, step);
        Ok(())
    }

    /// The accessors that move along the innermost dim (byte pointers with
    /// a non-zero inner stride): their variables, current positions and
    /// bytes per element.
    pub(super) fn moving(&mut self, accs: &[Accessor]) -> Vec<(Variable, Value, i64)> {
        let rank = self.k.dims.len();
        accs.iter()
            .filter(|(_, _, strides, esize)| rank > 0 && strides[rank - 1] != 0 && *esize != 0)
            .map(|(key, _, strides, esize)| {
                let var = self.pos[key];
                (var, self.b.use_var(var), strides[rank - 1] * esize)
            })
            .collect()
    }

    /// Sets the moving accessors to element `j` past their positions
    /// `start` (from [`Self::moving`]). A chunk pass places them from its
    /// loop index instead of carrying them: values live across a call are
    /// spilled, and a pointer carried through the loop in its spill slot
    /// made every iteration wait on the previous one's store.
    pub(super) fn place(&mut self, start: &[(Variable, Value, i64)], j: Value) {
        for (var, base, bytes) in start {
            // A shift for element sizes, so that the add folds into the
            // loads' and stores' addressing.
            let off = match bytes {
                1 | 2 | 4 | 8 => self
                    .b
                    .ins()
                    .ishl_imm_s(j, i64::from(bytes.trailing_zeros())),
                _ => self.b.ins().imul_imm_s(j, *bytes),
            };
            let p = self.b.ins().iadd(*base, off);
            self.b.def_var(*var, p);
        }
    }

    /// Advances the moving accessors by `elems` elements of the innermost dim.
    fn advance(&mut self, accs: &[Accessor], elems: i64) {
        let rank = self.k.dims.len();
        for (key, _, strides, esize) in accs {
            let st = if rank == 0 { 0 } else { strides[rank - 1] };
            if st != 0 && *esize != 0 {
                let var = self.pos[key];
                let p = self.b.use_var(var);
                let p = self.b.ins().iadd_imm_s(p, st * esize * elems);
                self.b.def_var(var, p);
            }
        }
    }

    fn load_slot(&self, node: usize) -> usize {
        match &self.k.nodes[node] {
            ENode::Load { slot, .. } | ENode::Gather { slot, .. } => *slot,
            ENode::Const(_)
            | ENode::Iota { .. }
            | ENode::Unary(..)
            | ENode::Binary(..)
            | ENode::Compare(..)
            | ENode::Select(..)
            | ENode::Clamp(..)
            | ENode::Convert(..)
            | ENode::Bitcast(..) => self.k.out,
        }
    }

    /// The SIMD type for this kernel's innermost loop, if it can be
    /// vectorized. Checked here: the row's shape — its length, one lane
    /// type, contiguous or hoisted loads, masks feeding selects only.
    /// Whether every node, and a reduction's fold, has vector code is the
    /// lowering's to say: `dry_run` lowers them in `Mode::Vector`, and a
    /// form without vector code refuses (`LowerError::NoVectorForm`).
    pub(super) fn vector_type(&self, n: usize) -> Result<Option<Type>> {
        if !self.opts.vectorize || !has_sse41() {
            return Ok(None);
        }
        let dt = self.out_dtype();
        let Some(vt) = vec_ty(dt) else {
            return Ok(None);
        };
        let rank = self.k.dims.len();
        if rank == 0 || n < vt.lane_count() as usize {
            return Ok(None);
        }
        // Exact mode keeps a float sum or product along the row in order:
        // the vector accumulators would reassociate it.
        if let KernelKind::Reduce { op, reduced } = &self.k.kind
            && self.opts.exact
            && dt.is_float()
            && reduced[rank - 1]
            && matches!(op, ReduceOp::Sum | ReduceOp::Prod)
        {
            return Ok(None);
        }
        // A comparison's lane mask (of `dt` operands) only feeds selects,
        // as their predicate, and conversions to `dt` (1 or 0): bool lanes
        // of another width never reach memory.
        let mask_only = |i: usize| {
            i != self.k.root
                && self.k.nodes.iter().all(|u| match u {
                    ENode::Select(_, a, b, _) => *a != i && *b != i,
                    ENode::Convert(_, _, to) => *to == dt,
                    u @ (ENode::Load { .. }
                    | ENode::Gather { .. }
                    | ENode::Const(_)
                    | ENode::Iota { .. }
                    | ENode::Unary(..)
                    | ENode::Binary(..)
                    | ENode::Compare(..)
                    | ENode::Clamp(..)
                    | ENode::Bitcast(..)) => !crate::fusion::enode_operands(u).contains(&i),
                })
        };
        // A load of another type feeds conversions only (loaded as its own
        // vector of the row's lane count, or converted as it is read; see
        // `vector_load`).
        let converted_only = |i: usize| {
            i != self.k.root
                && self.k.stash.as_ref().is_none_or(|st| st.node != i)
                && self.k.nodes.iter().all(|u| match u {
                    ENode::Convert(..) => true,
                    u @ (ENode::Load { .. }
                    | ENode::Gather { .. }
                    | ENode::Const(_)
                    | ENode::Iota { .. }
                    | ENode::Unary(..)
                    | ENode::Binary(..)
                    | ENode::Compare(..)
                    | ENode::Select(..)
                    | ENode::Clamp(..)
                    | ENode::Bitcast(..)) => !crate::fusion::enode_operands(u).contains(&i),
                })
        };
        // Every value has the row's type but these, and loads walk the row
        // contiguously or not at all (hoisted and splat); a gather walks a
        // row of its table (its index fixed for the row, a scalar load).
        let index_only = &self.gather_index;
        let fixed = |i: usize| matches!(&self.k.nodes[i], ENode::Load { strides, .. } if strides[rank - 1] == 0);
        for (i, node) in self.k.nodes.iter().enumerate() {
            let ok = match node {
                ENode::Load { .. } if index_only[i] => fixed(i),
                ENode::Load { dtype, strides, .. } => {
                    matches!(strides[rank - 1], 0 | 1) && (*dtype == dt || converted_only(i))
                }
                ENode::Gather {
                    dtype,
                    strides,
                    index,
                    ..
                } => {
                    strides[rank - 1] == 1
                        && index_only[*index]
                        && fixed(*index)
                        && (*dtype == dt || converted_only(i))
                }
                ENode::Compare(_, _, _, d) => *d == dt && mask_only(i),
                ENode::Convert(x, from, to) => *to == dt && self.dtype_of(*x) == *from,
                ENode::Const(_)
                | ENode::Iota { .. }
                | ENode::Unary(..)
                | ENode::Binary(..)
                | ENode::Select(..)
                | ENode::Clamp(..)
                | ENode::Bitcast(..) => node.dtype() == dt,
            };
            if !ok {
                return Ok(None);
            }
        }
        match self.dry_run(vt) {
            Ok(()) => Ok(Some(vt)),
            Err(LowerError::NoVectorForm) => Ok(None),
            Err(LowerError::Failed(e)) => Err(e),
        }
    }

    /// Lowers the kernel's nodes in `Mode::Vector(vt)`, and a reduction's
    /// fold on them, into a scratch function (accessors at placeholder
    /// positions, runtime calls to stand-ins): `NoVectorForm` where a
    /// lowering has no vector code for a node. Nothing reaches the module
    /// or the kernel's function.
    fn dry_run(&self, vt: Type) -> Lowered<()> {
        let call_conv = match &self.imports {
            Imports::Module(m, _) => m.isa().default_call_conv(),
            Imports::DryRun(call_conv) => *call_conv,
        };
        let mut func = Function::new();
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut ctx);
        let block = b.create_block();
        b.switch_to_block(block);
        let imports = Imports::DryRun(call_conv);
        let mut g =
            KernelGen::with_imports(&mut b, imports, self.plan, self.k, self.opts, self.ptr);
        for (key, ..) in self.accessors() {
            let var = g.b.declare_var(g.ptr);
            let placeholder = g.b.ins().iconst(g.ptr, 0);
            g.b.def_var(var, placeholder);
            g.pos.insert(key, var);
        }
        let vals = g.eval(Mode::Vector(vt))?;
        if let KernelKind::Reduce { op, .. } = &self.k.kind {
            let root = vals[self.k.root].s();
            g.reduce_op(*op, root, root, Mode::Vector(vt))?;
        }
        Ok(())
    }
}

/// The layout of a transpose tile (see `KernelGen::transpose_tile`).
struct TransposeTile {
    /// Elements per 16-byte vector (4 or 2).
    lanes: usize,
    /// Bytes per element.
    esize: u8,
    /// Elements along `p` (contiguous in the operand) and `q` (in the output).
    np: usize,
    /// See `np`.
    nq: usize,
    /// Bytes between the operand's elements of consecutive `q`.
    row: i64,
    /// Bytes between the output's elements of consecutive `p`.
    col: i64,
}

/// Per node: whether it is a load only gathers read, as their index (a
/// scalar per row in vector code), and neither the root nor stored.
pub(super) fn gather_indices(nodes: &[ENode], root: usize) -> Vec<bool> {
    if !nodes.iter().any(|n| matches!(n, ENode::Gather { .. })) {
        return vec![false; nodes.len()];
    }
    let mut index = vec![false; nodes.len()];
    let mut other = vec![false; nodes.len()];
    other[root] = true;
    for n in nodes {
        // (`enode_operands` names every other node's operands.)
        if let ENode::Gather { index: i, .. } = n {
            index[*i] = true;
        } else {
            for i in crate::fusion::enode_operands(n) {
                other[i] = true;
            }
        }
    }
    (0..nodes.len())
        .map(|i| index[i] && !other[i] && matches!(nodes[i], ENode::Load { .. }))
        .collect()
}

//! Reductions: the identity, the combining step, and the vector
//! accumulators of a float max or min with their NaN and zero-sign
//! companions.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Type, Value, types};
use cranelift_frontend::Variable;
use tensorlift_ir::{BinaryOp, ReduceOp, Result};

use crate::fusion::KernelKind;

use super::target::math_int_ty;
use super::{KernelGen, Lowered, Mode, V, comp_ty, fcmp, trusted};

impl<'a, 'b> KernelGen<'a, 'b> {
    /// `Some(true)` for a float max reduction, `Some(false)` for a float
    /// min: reductions whose vector accumulators use `float_extreme_step`.
    pub(super) fn float_extreme(&self) -> Option<bool> {
        match &self.k.kind {
            KernelKind::Reduce {
                op: ReduceOp::Max, ..
            } if self.out_dtype().is_float() => Some(true),
            KernelKind::Reduce {
                op: ReduceOp::Min, ..
            } if self.out_dtype().is_float() => Some(false),
            KernelKind::Loop | KernelKind::Reduce { .. } => None,
        }
    }

    /// One step of a float max (min) vector accumulator `u` on `x` (the
    /// last two of `vaccs` are the companions, shared by the accumulators:
    /// a lane that is NaN or zero in one accumulator's result is so in the
    /// final result only if it is in all of them or the result is).
    /// Cranelift's `fmax` (NaN-propagating, +0 above -0) lowers to eight
    /// instructions on a five-deep dependency chain, which bound a row
    /// max by latency. Instead: `x > acc ? x : acc` (one `maxps`, NaN lanes
    /// of x left out), the lanes where x is NaN or-ed into a mask, and the
    /// bits of x and-ed (or-ed) together so that a zero result gets its
    /// sign right (`vector_partials` puts both back). Same results as
    /// `fmax` element by element.
    pub(super) fn float_extreme_step(
        &mut self,
        is_max: bool,
        vt: Type,
        vaccs: &[Variable],
        u: usize,
        x: Value,
    ) {
        let m = vaccs.len() - 2;
        let (va, nan_var, bits_var) = (vaccs[u], vaccs[m], vaccs[m + 1]);
        let flags = MemFlagsData::new();
        let ity = math_int_ty(vt);
        let a = self.b.use_var(va);
        let better = if is_max {
            fcmp(self.b, FloatCC::LessThan, a, x)
        } else {
            fcmp(self.b, FloatCC::LessThan, x, a)
        };
        let r = self.sel(better, x, a, vt);
        self.b.def_var(va, r);
        let nan = fcmp(self.b, FloatCC::Unordered, x, x);
        let seen = self.b.use_var(nan_var);
        let seen = self.b.ins().bitcast(ity, flags, seen);
        let seen = self.b.ins().bor(seen, nan);
        let seen = self.b.ins().bitcast(vt, flags, seen);
        self.b.def_var(nan_var, seen);
        let xb = self.b.ins().bitcast(ity, flags, x);
        let bits = self.b.use_var(bits_var);
        let bits = self.b.ins().bitcast(ity, flags, bits);
        let bits = if is_max {
            self.b.ins().band(bits, xb)
        } else {
            self.b.ins().bor(bits, xb)
        };
        let bits = self.b.ins().bitcast(vt, flags, bits);
        self.b.def_var(bits_var, bits);
    }

    /// The vector accumulators' values; for a float max/min, each with the
    /// companions applied: NaN where a NaN was seen, and a zero result
    /// signed as `fmax`/`fmin` would have it (for a max that is zero, no
    /// element was positive, so it is +0 exactly when some element's sign
    /// bit was clear; for a min, -0 when some element's was set).
    pub(super) fn vector_partials(&mut self, vt: Type, vaccs: &[Variable]) -> Vec<Value> {
        if self.float_extreme().is_none() {
            return vaccs.iter().map(|v| self.b.use_var(*v)).collect();
        }
        let m = vaccs.len() - 2;
        let flags = MemFlagsData::new();
        let ity = math_int_ty(vt);
        let sign_bit = if vt.lane_type() == types::F64 {
            i64::MIN
        } else {
            i64::from(i32::MIN)
        };
        (0..m)
            .map(|u| {
                let r = self.b.use_var(vaccs[u]);
                let seen = self.b.use_var(vaccs[m]);
                let bits = self.b.use_var(vaccs[m + 1]);
                let bits = self.b.ins().bitcast(ity, flags, bits);
                let sign = self.splat_i(ity, sign_bit);
                let zero_bits = self.b.ins().band(bits, sign);
                let signed_zero = self.b.ins().bitcast(vt, flags, zero_bits);
                let zero = self.splat_f(vt, 0.0);
                let is_zero = fcmp(self.b, FloatCC::Equal, r, zero);
                let r = self.sel(is_zero, signed_zero, r, vt);
                let nan = self.splat_f(vt, f64::NAN);
                let seen = self.b.ins().bitcast(ity, flags, seen);
                self.sel(seen, nan, r, vt)
            })
            .collect()
    }

    pub(super) fn reduce_init(&mut self, op: ReduceOp) -> Result<Value> {
        let d = self.out_dtype();
        let ty = comp_ty(d);
        Ok(match (op, d) {
            (ReduceOp::Sum, d) if d.is_float() => self.fconst(ty, 0.0),
            (ReduceOp::Prod, d) if d.is_float() => self.fconst(ty, 1.0),
            (ReduceOp::Max, d) if d.is_float() => self.fconst(ty, f64::NEG_INFINITY),
            (ReduceOp::Min, d) if d.is_float() => self.fconst(ty, f64::INFINITY),
            (ReduceOp::Sum | ReduceOp::Or, _) => self.ic(ty, 0),
            (ReduceOp::Prod | ReduceOp::And, _) => self.ic(ty, 1),
            (ReduceOp::Max, d) => {
                let v = if d.is_signed_int() {
                    -(1i128 << (d.size() * 8 - 1))
                } else {
                    0
                };
                self.ic(ty, v as i64)
            }
            (ReduceOp::Min, d) => {
                let v: i128 = if d.is_signed_int() {
                    (1i128 << (d.size() * 8 - 1)) - 1
                } else {
                    (1i128 << (d.size() * 8)) - 1
                };
                self.ic(ty, v as i64)
            }
        })
    }

    /// One step of the reduction, `op(a, x)`: the binary op it folds with,
    /// lowered as that op (so its vector forms are the binary op's).
    pub(super) fn reduce_op(
        &mut self,
        op: ReduceOp,
        a: Value,
        x: Value,
        mode: Mode,
    ) -> Lowered<Value> {
        let fold = match op {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Prod => BinaryOp::Mul,
            ReduceOp::Max => BinaryOp::Max,
            ReduceOp::Min => BinaryOp::Min,
            ReduceOp::And => BinaryOp::And,
            ReduceOp::Or => BinaryOp::Or,
        };
        let d = self.out_dtype();
        Ok(self.binary(fold, V::S(a), V::S(x), d, mode)?.s())
    }

    /// Writes the reduction's identity into every output element this call
    /// owns (the rows of `[begin, end)` when split).
    pub(super) fn emit_reduce_init(&mut self, op: ReduceOp) -> Result<()> {
        let len = self.plan.slots[self.k.out].dims.iter().product::<usize>() as i64;
        let init = self.reduce_init(op)?;
        let base = self.bases[&self.k.out];
        let esize = self.out_dtype().size() as i64;
        let (from, n) = match self.range {
            Some((b, e)) => {
                let row = self.k.out_strides[0];
                (
                    Some(self.b.ins().imul_imm_s(b, row)),
                    self.b.ins().imul_imm_s(e, row),
                )
            }
            None => (None, self.b.ins().iconst(types::I64, len)),
        };
        self.for_loop_from(from, n, 1, &mut |s, i| {
            let off = s.b.ins().imul_imm_s(i, esize);
            let p = s.b.ins().iadd(base, off);
            s.b.ins().store(trusted(), init, p, 0);
            Ok(())
        })?;
        Ok(())
    }
}

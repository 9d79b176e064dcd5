//! Each node of a kernel as Cranelift instructions: loads and stores,
//! constants, unary and binary ops, comparisons, conversions and bitcasts,
//! complex values, and calls of runtime functions for the rest.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Type, Value, types,
};
use tensorlift_ir::{BinaryOp, CmpOp, DType, Error, Result, Scalar, UnaryOp};

use crate::fusion::ENode;
use crate::rt::RtFn;

use super::target::{has_fma, has_iabs, has_icmp, has_iminmax, has_imul, vec_ty};
use super::{
    KernelGen, LowerError, Lowered, Mode, OUT, V, comp_ty, fcmp, needs, trusted, unaligned,
};

impl<'a, 'b> KernelGen<'a, 'b> {
    /// An integer constant of `ty`, given as the two's-complement value
    /// (narrow types take the low bits, as Cranelift requires).
    pub(super) fn ic(&mut self, ty: Type, v: i64) -> Value {
        let bits = ty.lane_type().bits();
        let v = if bits < 64 {
            v & ((1i64 << bits) - 1)
        } else {
            v
        };
        self.b.ins().iconst(ty.lane_type(), v)
    }

    pub(super) fn fconst(&mut self, ty: Type, v: f64) -> Value {
        if ty == types::F32 {
            self.b.ins().f32const(tensorlift_ir::narrow_f32(v))
        } else {
            self.b.ins().f64const(v)
        }
    }

    pub(super) fn store_out(&mut self, v: V) -> Result<()> {
        let p = self.b.use_var(self.pos[&OUT]);
        let d = self.out_dtype();
        self.store(d, v, p)
    }

    fn store(&mut self, d: DType, v: V, p: Value) -> Result<()> {
        match (d, v) {
            (DType::C64 | DType::C128, V::C(re, im)) => {
                let half = (d.size() / 2) as i32;
                self.b.ins().store(trusted(), re, p, 0);
                self.b.ins().store(trusted(), im, p, half);
            }
            (DType::F16, V::S(x)) => {
                let bits = self.call(RtFn::F32ToF16, &[x])?[0];
                let h = self.b.ins().ireduce(types::I16, bits);
                self.b.ins().store(trusted(), h, p, 0);
            }
            (DType::BF16, V::S(x)) => {
                // The value is exactly representable: its top 16 bits are the bf16.
                let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
                let hi = self.b.ins().ushr_imm_u(bits, 16);
                let h = self.b.ins().ireduce(types::I16, hi);
                self.b.ins().store(trusted(), h, p, 0);
            }
            (_, V::S(x)) => {
                self.b.ins().store(trusted(), x, p, 0);
            }
            (_, V::C(..)) => return Err(Error::internal("complex value stored into a real slot")),
        }
        Ok(())
    }

    fn load(&mut self, d: DType, p: Value) -> Result<V> {
        Ok(match d {
            DType::C64 | DType::C128 => {
                let t = comp_ty(d);
                let half = (d.size() / 2) as i32;
                V::C(
                    self.b.ins().load(t, trusted(), p, 0),
                    self.b.ins().load(t, trusted(), p, half),
                )
            }
            DType::F16 => {
                let h = self.b.ins().load(types::I16, trusted(), p, 0);
                let w = self.b.ins().uextend(types::I32, h);
                V::S(self.call(RtFn::F16ToF32, &[w])?[0])
            }
            DType::BF16 => {
                let h = self.b.ins().load(types::I16, trusted(), p, 0);
                V::S(self.bf16_to_f32(h))
            }
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F32
            | DType::F64
            | DType::String => V::S(self.b.ins().load(comp_ty(d), trusted(), p, 0)),
        })
    }

    fn bf16_to_f32(&mut self, h: Value) -> Value {
        let w = self.b.ins().uextend(types::I32, h);
        let w = self.b.ins().ishl_imm_s(w, 16);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), w)
    }

    /// Rounds an f32 to the half type `d` and back (halves compute in f32
    /// and round after every op, as the interpreter does).
    fn round_half(&mut self, d: DType, x: Value) -> Result<Value> {
        Ok(match d {
            DType::F16 => {
                let bits = self.call(RtFn::F32ToF16, &[x])?[0];
                self.call(RtFn::F16ToF32, &[bits])?[0]
            }
            DType::BF16 => {
                let bits = self.call(RtFn::F32ToBf16, &[x])?[0];
                let h = self.b.ins().ireduce(types::I16, bits);
                self.bf16_to_f32(h)
            }
            DType::Bool
            | DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
            | DType::F32
            | DType::F64
            | DType::C64
            | DType::C128
            | DType::String => x,
        })
    }

    pub(super) fn const_value(&mut self, l: &tensorlift_ir::Literal, mode: Mode) -> V {
        let d = l.dtype;
        let v = match l.element(0) {
            Scalar::Bool(b) => V::S(self.ic(types::I8, i64::from(b))),
            Scalar::Int(i) => V::S(self.ic(comp_ty(d), i as i64)),
            Scalar::Float(f, bits) => {
                let t = comp_ty(d);
                match (d, bits) {
                    (DType::F64, Some(b)) => V::S(self.b.ins().f64const(f64::from_bits(b))),
                    (DType::F32, Some(b)) => V::S(self.b.ins().f32const(f32::from_bits(b as u32))),
                    _ => V::S(self.fconst(t, f)),
                }
            }
            Scalar::Complex(re, im) => {
                let t = comp_ty(d);
                V::C(self.fconst(t, re), self.fconst(t, im))
            }
        };
        match (mode, v) {
            (Mode::Vector(vt), V::S(x)) => V::S(self.b.ins().splat(vt, x)),
            _ => v,
        }
    }

    /// A vector of `vt`'s lane count loaded from `p + off` as `dtype`
    /// elements: that type's vector (another type's feeds conversions
    /// only), or for the float widths the elements converted as they are
    /// read (f32 → f64: two f32 and `cvtps2pd`; f64 → f32: two f64
    /// vectors, `cvtpd2ps` each, halves joined). No vector form for other
    /// lane counts.
    fn vector_load(&mut self, dtype: DType, vt: Type, p: Value, off: i32) -> Lowered<Value> {
        // (Bitcasts between lane counts name the byte order.)
        let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        match (dtype, vt) {
            (DType::F32, types::F64X2) => {
                let w = self.b.ins().load(types::I64, unaligned(), p, off);
                let v = self.b.ins().scalar_to_vector(types::I64X2, w);
                let v = self.b.ins().bitcast(types::F32X4, flags, v);
                Ok(self.b.ins().fvpromote_low(v))
            }
            (DType::F64, types::F32X4) => {
                let a = self.b.ins().load(types::F64X2, unaligned(), p, off);
                let b = self.b.ins().load(types::F64X2, unaligned(), p, off + 16);
                let a = self.b.ins().fvdemote(a);
                let b = self.b.ins().fvdemote(b);
                let a = self.b.ins().bitcast(types::I64X2, flags, a);
                let b = self.b.ins().bitcast(types::I64X2, flags, b);
                let hi = self.b.ins().extractlane(b, 0);
                let v = self.b.ins().insertlane(a, hi, 1);
                Ok(self.b.ins().bitcast(types::F32X4, flags, v))
            }
            _ => match vec_ty(dtype) {
                Some(lt) if lt.lane_count() == vt.lane_count() => {
                    Ok(self.b.ins().load(lt, unaligned(), p, off))
                }
                Some(_) | None => Err(LowerError::NoVectorForm),
            },
        }
    }

    /// Evaluates every node of the kernel at the current position. In
    /// `Mode::Vector`, a node whose lowering has no vector code for its
    /// form is `LowerError::NoVectorForm` (what `vector_type` asks).
    pub(super) fn eval(&mut self, mode: Mode) -> Lowered<Vec<V>> {
        let nodes = self.k.nodes.clone();
        let mut vals: Vec<V> = Vec::with_capacity(nodes.len());
        let mut unused = None;
        for (i, n) in nodes.iter().enumerate() {
            // In a chunk pass of a wide row: nodes the pass does not need
            // get a placeholder, wide nodes already mapped are read back.
            if let (Some(w), Mode::Vector(vt)) = (&self.wide, mode) {
                if !w.need[i] {
                    let u = *unused.get_or_insert_with(|| self.b.ins().iconst(types::I8, 0));
                    vals.push(V::S(u));
                    continue;
                }
                if let Some(off) = w.bufs.get(&i) {
                    let (addr, off) = (w.addr, *off);
                    vals.push(V::S(self.b.ins().load(vt, trusted(), addr, off)));
                    continue;
                }
            }
            let v = match n {
                ENode::Load { dtype, slot, .. } => match mode {
                    Mode::Vector(vt) => match self.hoisted.get(&i) {
                        Some(v) => V::S(*v),
                        // A gather's index: one scalar for the row.
                        None if self.gather_index[i] => {
                            let p = self.b.use_var(self.pos[&i]);
                            self.load(*dtype, p)?
                        }
                        None => {
                            let p = self.b.use_var(self.pos[&i]);
                            let off = (self.load_off * dtype.size() as i64) as i32;
                            // Another type's load only feeds conversions.
                            V::S(self.vector_load(*dtype, vt, p, off)?)
                        }
                    },
                    Mode::Scalar => match self.regs.get(slot) {
                        Some(&var) => V::S(self.b.use_var(var)),
                        None => {
                            let p = self.b.use_var(self.pos[&i]);
                            self.load(*dtype, p)?
                        }
                    },
                },
                ENode::Gather {
                    dtype,
                    index,
                    scale,
                    bound,
                    ..
                } => {
                    let esize = dtype.size() as i64;
                    let at = self.gather_offset(vals[*index].s(), self.dtype_of(*index), *bound);
                    let bytes = self.b.ins().imul_imm_s(at, scale * esize);
                    let p = self.b.use_var(self.pos[&i]);
                    let p = self.b.ins().iadd(p, bytes);
                    match mode {
                        Mode::Vector(vt) => {
                            let off = (self.load_off * esize) as i32;
                            V::S(self.vector_load(*dtype, vt, p, off)?)
                        }
                        Mode::Scalar => self.load(*dtype, p)?,
                    }
                }
                ENode::Const(l) => match (mode, self.hoisted.get(&i)) {
                    (Mode::Vector(_), Some(v)) => V::S(*v),
                    (Mode::Vector(_) | Mode::Scalar, _) => self.const_value(l, mode),
                },
                ENode::Iota { dtype, .. } => match mode {
                    // Its value is the element's position: scalar code.
                    Mode::Vector(_) => return Err(LowerError::NoVectorForm),
                    Mode::Scalar => {
                        let p = self.b.use_var(self.pos[&i]);
                        self.convert(V::S(p), DType::I64, *dtype)?
                    }
                },
                ENode::Unary(u, x, d) => {
                    let r = self.unary(*u, vals[*x], self.dtype_of(*x), mode)?;
                    self.round_if_half(*d, r)?
                }
                ENode::Binary(op, x, y, d) => {
                    let r = self.binary(*op, vals[*x], vals[*y], *d, mode)?;
                    self.round_if_half(*d, r)?
                }
                ENode::Compare(c, x, y, d) => self.compare(*c, vals[*x], vals[*y], *d)?,
                ENode::Select(p, x, y, _) => match (vals[*x], vals[*y]) {
                    (V::C(a, b), V::C(c, e)) => {
                        let pv = vals[*p].s();
                        V::C(self.b.ins().select(pv, a, c), self.b.ins().select(pv, b, e))
                    }
                    (a, c) => {
                        let pv = vals[*p].s();
                        V::S(match mode {
                            // A lane mask from a vector comparison; other
                            // bool values have no lanes of the row's width.
                            Mode::Vector(vt) => match nodes[*p] {
                                ENode::Compare(..) => self.sel(pv, a.s(), c.s(), vt),
                                ENode::Load { .. }
                                | ENode::Gather { .. }
                                | ENode::Const(_)
                                | ENode::Iota { .. }
                                | ENode::Unary(..)
                                | ENode::Binary(..)
                                | ENode::Select(..)
                                | ENode::Clamp(..)
                                | ENode::Convert(..)
                                | ENode::Bitcast(..) => return Err(LowerError::NoVectorForm),
                            },
                            Mode::Scalar => self.b.ins().select(pv, a.s(), c.s()),
                        })
                    }
                },
                ENode::Clamp(x, lo, hi, d) => {
                    let (x, lo, hi) = (vals[*x].s(), vals[*lo].s(), vals[*hi].s());
                    V::S(if d.is_float() {
                        let m = self.b.ins().fmax(x, lo);
                        let r = self.b.ins().fmin(m, hi);
                        let ty = self.b.func.dfg.value_type(r);
                        self.canonical_nan(r, ty)
                    } else if let Mode::Vector(_) = mode {
                        // Integer clamps stay scalar (no vector form yet).
                        return Err(LowerError::NoVectorForm);
                    } else if d.is_signed_int() {
                        let m = self.b.ins().smax(x, lo);
                        self.b.ins().smin(m, hi)
                    } else {
                        let m = self.b.ins().umax(x, lo);
                        self.b.ins().umin(m, hi)
                    })
                }
                ENode::Convert(x, from, to) => self.convert(vals[*x], *from, *to)?,
                ENode::Bitcast(x, from, to) => self.bitcast(vals[*x], *from, *to, mode)?,
            };
            vals.push(v);
        }
        Ok(vals)
    }

    /// A gather's index `x` (an integer of `dt`) as an i64 in `[0, bound)`:
    /// the runtime step before the kernel rejected any other, so the clamp
    /// only keeps the address inside the table whatever happens.
    fn gather_offset(&mut self, x: Value, dt: DType, bound: i64) -> Value {
        let ty = self.b.func.dfg.value_type(x);
        let x = match (ty == types::I64, dt.is_signed_int()) {
            (true, _) => x,
            (false, true) => self.b.ins().sextend(types::I64, x),
            (false, false) => self.b.ins().uextend(types::I64, x),
        };
        let hi = self.b.ins().iconst(types::I64, (bound - 1).max(0));
        if dt.is_signed_int() {
            let zero = self.b.ins().iconst(types::I64, 0);
            let x = self.b.ins().smax(x, zero);
            self.b.ins().smin(x, hi)
        } else {
            self.b.ins().umin(x, hi)
        }
    }

    fn round_if_half(&mut self, d: DType, v: V) -> Result<V> {
        Ok(match v {
            V::S(x) if d.is_half() => V::S(self.round_half(d, x)?),
            V::S(_) | V::C(..) => v,
        })
    }

    /// `u(x)`; in `Mode::Vector`, no vector form for integer `sign` and
    /// `not`, `is_finite`, the approximated functions in exact mode, and
    /// integer `abs`/`square` on lanes without the instruction.
    fn unary(&mut self, u: UnaryOp, x: V, xd: DType, mode: Mode) -> Lowered<V> {
        if let V::C(re, im) = x {
            return Ok(self.complex_unary(u, re, im, xd)?);
        }
        let x = x.s();
        let ty = self.b.func.dfg.value_type(x);
        let is_float = xd.is_float();
        let vector = matches!(mode, Mode::Vector(_));
        Ok(V::S(match u {
            UnaryOp::Neg if is_float => self.b.ins().fneg(x),
            UnaryOp::Neg => self.b.ins().ineg(x),
            UnaryOp::Abs if is_float => self.b.ins().fabs(x),
            UnaryOp::Abs if xd.is_signed_int() => {
                needs(has_iabs(ty))?;
                self.b.ins().iabs(x)
            }
            // Unsigned: the identity.
            UnaryOp::Abs => x,
            UnaryOp::Sign if is_float && ty.is_vector() => {
                // copysign(1, x) by bits (1.0's sign bit is clear), NaN and
                // ±0 kept, in lanes.
                let one = self.splat_f(ty, 1.0);
                let s = self.with_sign_of(one, x, ty);
                let zero = self.splat_f(ty, 0.0);
                // (x86 vectors have no unordered-or-equal compare.)
                let is_zero = fcmp(self.b, FloatCC::Equal, x, zero);
                let is_nan = fcmp(self.b, FloatCC::Unordered, x, x);
                let keep = self.b.ins().bor(is_zero, is_nan);
                self.sel(keep, x, s, ty)
            }
            UnaryOp::Sign if is_float => {
                let one = self.splat_f(ty, 1.0);
                let s = self.b.ins().fcopysign(one, x);
                let zero = self.splat_f(ty, 0.0);
                let keep = fcmp(self.b, FloatCC::UnorderedOrEqual, x, zero);
                self.b.ins().select(keep, x, s)
            }
            // Selects on comparisons: scalar code.
            UnaryOp::Sign if vector => return Err(LowerError::NoVectorForm),
            UnaryOp::Sign => {
                let zero = self.ic(ty, 0);
                let one = self.ic(ty, 1);
                if xd.is_signed_int() {
                    let neg = self.ic(ty, -1);
                    let gt = self.b.ins().icmp(IntCC::SignedGreaterThan, x, zero);
                    let lt = self.b.ins().icmp(IntCC::SignedLessThan, x, zero);
                    let t = self.b.ins().select(lt, neg, zero);
                    self.b.ins().select(gt, one, t)
                } else {
                    let nz = self.b.ins().icmp(IntCC::NotEqual, x, zero);
                    self.b.ins().select(nz, one, zero)
                }
            }
            UnaryOp::Floor => self.b.ins().floor(x),
            UnaryOp::Ceil => self.b.ins().ceil(x),
            UnaryOp::Round => self.b.ins().nearest(x),
            UnaryOp::Sqrt => self.b.ins().sqrt(x),
            UnaryOp::Rsqrt => {
                let s = self.b.ins().sqrt(x);
                let one = self.splat_f(ty, 1.0);
                self.b.ins().fdiv(one, s)
            }
            UnaryOp::Reciprocal => {
                let one = self.splat_f(ty, 1.0);
                self.b.ins().fdiv(one, x)
            }
            UnaryOp::Square if is_float => self.b.ins().fmul(x, x),
            UnaryOp::Square => {
                needs(has_imul(ty))?;
                self.b.ins().imul(x, x)
            }
            // A bool result: no lanes of the row's width.
            UnaryOp::IsFinite if vector => return Err(LowerError::NoVectorForm),
            UnaryOp::IsFinite => {
                let a = self.b.ins().fabs(x);
                let inf = self.splat_f(ty, f64::INFINITY);
                fcmp(self.b, FloatCC::LessThan, a, inf)
            }
            // Bool has no vector type; integer `not` stays scalar (no
            // vector form yet, though `bnot` takes lanes).
            UnaryOp::Not if vector => return Err(LowerError::NoVectorForm),
            UnaryOp::Not if xd == DType::Bool => self.b.ins().bxor_imm_u(x, 1),
            UnaryOp::Not => self.b.ins().bnot(x),
            UnaryOp::Exp if ty.lane_type() == types::F32 && !self.opts.exact => self.exp_f32(x, ty),
            UnaryOp::Exp if ty.lane_type() == types::F64 && !self.opts.exact => self.exp_f64(x, ty),
            UnaryOp::Tanh if ty.lane_type() == types::F32 && !self.opts.exact => self.tanh(x, ty),
            UnaryOp::Log if ty.lane_type() == types::F32 && !self.opts.exact => self.log_f32(x, ty),
            UnaryOp::Expm1 if !self.opts.exact => self.expm1(x, ty),
            UnaryOp::Log1p if !self.opts.exact => self.log1p(x, ty),
            UnaryOp::Sin if !self.opts.exact => self.sincos(x, ty, false)?,
            UnaryOp::Cos if !self.opts.exact => self.sincos(x, ty, true)?,
            UnaryOp::Erf if ty.lane_type() == types::F32 && !self.opts.exact => self.erf_f32(x, ty),
            UnaryOp::Erf if ty.lane_type() == types::F64 && !self.opts.exact => self.erf_f64(x, ty),
            UnaryOp::Logistic if !self.opts.exact => self.logistic(x, ty),
            UnaryOp::Tanh if ty.lane_type() == types::F64 && !self.opts.exact => self.tanh(x, ty),
            UnaryOp::Log if ty.lane_type() == types::F64 && !self.opts.exact => self.log_f64(x, ty),
            UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Erf => {
                // A libm call per element.
                if vector {
                    return Err(LowerError::NoVectorForm);
                }
                let code = self.b.ins().iconst(types::I32, u as i64);
                let libm = if ty == types::F32 {
                    RtFn::F32Un
                } else {
                    RtFn::F64Un
                };
                self.call(libm, &[code, x])?[0]
            }
        }))
    }

    pub(super) fn splat_f(&mut self, ty: Type, v: f64) -> Value {
        let lane = ty.lane_type();
        let c = self.fconst(lane, v);
        if ty.is_vector() {
            self.b.ins().splat(ty, c)
        } else {
            c
        }
    }

    pub(super) fn splat_i(&mut self, ty: Type, v: i64) -> Value {
        let c = self.ic(ty, v);
        if ty.is_vector() {
            self.b.ins().splat(ty, c)
        } else {
            c
        }
    }

    /// `r`, or the canonical quiet NaN where `r` is a NaN: what `min`/`max`
    /// give for a NaN operand (the NaN policy; the interpreter's and the
    /// vector reductions').
    pub(super) fn canonical_nan(&mut self, r: Value, ty: Type) -> Value {
        let nan = fcmp(self.b, FloatCC::Unordered, r, r);
        let canon = self.splat_f(ty, f64::NAN);
        self.sel(nan, canon, r, ty)
    }

    /// `cond ? a : b` for scalars (`select`) and vectors (lane masks, `bitselect`).
    /// The mask is reinterpreted as `a`'s type, so float and integer lanes
    /// both work.
    pub(super) fn sel(&mut self, cond: Value, a: Value, b: Value, ty: Type) -> Value {
        if ty.is_vector() {
            let vt = self.b.func.dfg.value_type(a);
            let m = self.b.ins().bitcast(vt, MemFlagsData::new(), cond);
            self.b.ins().bitselect(m, a, b)
        } else {
            self.b.ins().select(cond, a, b)
        }
    }

    fn complex_unary(&mut self, u: UnaryOp, re: Value, im: Value, xd: DType) -> Result<V> {
        let t = comp_ty(xd);
        Ok(match u {
            UnaryOp::Neg => V::C(self.b.ins().fneg(re), self.b.ins().fneg(im)),
            UnaryOp::Square => self.cmul(re, im, re, im),
            UnaryOp::Abs => {
                let abs = if t == types::F32 {
                    RtFn::C64Abs
                } else {
                    RtFn::C128Abs
                };
                V::S(self.call(abs, &[re, im])?[0])
            }
            UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Log
            | UnaryOp::Log1p
            | UnaryOp::Tanh
            | UnaryOp::Logistic
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Erf
            | UnaryOp::Not
            | UnaryOp::IsFinite
            | UnaryOp::Reciprocal => {
                let un = if t == types::F32 {
                    RtFn::C64Un
                } else {
                    RtFn::C128Un
                };
                self.call_complex(un, u as i64, t, &[re, im])?
            }
        })
    }

    /// Calls a complex runtime function `f(op, parts..., out)` that writes
    /// its (re, im) result to a stack slot, and loads the result.
    fn call_complex(&mut self, f: RtFn, op: i64, t: Type, parts: &[Value]) -> Result<V> {
        let slot =
            self.b
                .create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 16, 3));
        let p = self.b.ins().stack_addr(self.ptr, slot, 0);
        let code = self.b.ins().iconst(types::I32, op);
        let mut args = vec![code];
        args.extend_from_slice(parts);
        args.push(p);
        self.call(f, &args)?;
        let half = t.bytes() as i32;
        Ok(V::C(
            self.b.ins().load(t, trusted(), p, 0),
            self.b.ins().load(t, trusted(), p, half),
        ))
    }

    fn cmul(&mut self, a: Value, b: Value, c: Value, d: Value) -> V {
        let ac = self.b.ins().fmul(a, c);
        let bd = self.b.ins().fmul(b, d);
        let ad = self.b.ins().fmul(a, d);
        let bc = self.b.ins().fmul(b, c);
        V::C(self.b.ins().fsub(ac, bd), self.b.ins().fadd(ad, bc))
    }

    /// `op(x, y)` of dtype `d`; in `Mode::Vector`, no vector form for
    /// shifts, integer division and `rem` but on i32 lanes, float `rem`,
    /// `pow` but the inline approximations, and integer `*`, `max`, `min`
    /// on lanes without the instruction.
    pub(super) fn binary(&mut self, op: BinaryOp, x: V, y: V, d: DType, mode: Mode) -> Lowered<V> {
        if let (V::C(a, b), V::C(c, e)) = (x, y) {
            return Ok(self.complex_binary(op, a, b, c, e, d)?);
        }
        let (x, y) = (x.s(), y.s());
        let ty = self.b.func.dfg.value_type(x);
        let f = d.is_float();
        let s = d.is_signed_int();
        let vector = matches!(mode, Mode::Vector(_));
        Ok(V::S(match op {
            BinaryOp::Add if f => self.b.ins().fadd(x, y),
            BinaryOp::Sub if f => self.b.ins().fsub(x, y),
            BinaryOp::Mul if f => self.b.ins().fmul(x, y),
            BinaryOp::Div if f => self.b.ins().fdiv(x, y),
            BinaryOp::Max if f => {
                let r = self.b.ins().fmax(x, y);
                self.canonical_nan(r, ty)
            }
            BinaryOp::Min if f => {
                let r = self.b.ins().fmin(x, y);
                self.canonical_nan(r, ty)
            }
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => {
                needs(has_imul(ty))?;
                self.b.ins().imul(x, y)
            }
            BinaryOp::Max | BinaryOp::Min if !has_iminmax(ty) => {
                return Err(LowerError::NoVectorForm);
            }
            BinaryOp::Max if s => self.b.ins().smax(x, y),
            BinaryOp::Max => self.b.ins().umax(x, y),
            BinaryOp::Min if s => self.b.ins().smin(x, y),
            BinaryOp::Min => self.b.ins().umin(x, y),
            BinaryOp::And => self.b.ins().band(x, y),
            BinaryOp::Or => self.b.ins().bor(x, y),
            BinaryOp::Xor => self.b.ins().bxor(x, y),
            // Cranelift's vector shifts take one amount for every lane; the
            // amount here is per element.
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical | BinaryOp::ShiftRightArithmetic
                if !f && vector =>
            {
                return Err(LowerError::NoVectorForm);
            }
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical | BinaryOp::ShiftRightArithmetic
                if !f =>
            {
                self.shift(op, x, y, ty)
            }
            BinaryOp::Div | BinaryOp::Rem if s && ty == types::I32X4 => {
                self.int_divrem_i32x4(op == BinaryOp::Div, x, y)
            }
            // Selects on the divisor and a divide per element: scalar code.
            BinaryOp::Div | BinaryOp::Rem if !f && vector => return Err(LowerError::NoVectorForm),
            BinaryOp::Div | BinaryOp::Rem if !f => {
                self.int_divrem(op == BinaryOp::Div, s, x, y, ty)
            }
            BinaryOp::Pow if ty.lane_type() == types::F32 && !self.opts.exact => {
                self.pow_f32(x, y, ty)
            }
            BinaryOp::Pow if ty.lane_type() == types::F64 && !self.opts.exact && has_fma() => {
                self.pow_f64(x, y, ty)
            }
            BinaryOp::Rem | BinaryOp::Pow if f => {
                // A libm call per element.
                if vector {
                    return Err(LowerError::NoVectorForm);
                }
                let code = self.b.ins().iconst(types::I32, op as i64);
                let libm = if ty == types::F32 {
                    RtFn::F32Bin
                } else {
                    RtFn::F64Bin
                };
                self.call(libm, &[code, x, y])?[0]
            }
            // A runtime call per element.
            BinaryOp::Pow if vector => return Err(LowerError::NoVectorForm),
            BinaryOp::Pow => {
                let pow = match d {
                    DType::I8 => RtFn::PowI8,
                    DType::I16 => RtFn::PowI16,
                    DType::I32 => RtFn::PowI32,
                    DType::I64 => RtFn::PowI64,
                    DType::U8 => RtFn::PowU8,
                    DType::U16 => RtFn::PowU16,
                    DType::U32 => RtFn::PowU32,
                    DType::U64 => RtFn::PowU64,
                    DType::Bool
                    | DType::F16
                    | DType::BF16
                    | DType::F32
                    | DType::F64
                    | DType::C64
                    | DType::C128
                    | DType::String => {
                        return Err(Error::internal(format!(
                            "integer pow on {d} reached code generation"
                        ))
                        .into());
                    }
                };
                self.call(pow, &[x, y])?[0]
            }
            BinaryOp::Div
            | BinaryOp::Rem
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => {
                return Err(Error::internal(format!(
                    "{} on {d} reached code generation",
                    op.name()
                ))
                .into());
            }
        }))
    }

    /// An integer shift with XLA's out-of-range rule (the interpreter's, in
    /// `kernels::scalar`): Cranelift masks the amount to the lane width, so
    /// an amount of `bits` or more (read as unsigned) is caught first and
    /// gives 0, or for an arithmetic shift the sign bit in every bit.
    fn shift(&mut self, op: BinaryOp, x: Value, y: Value, ty: Type) -> Value {
        let bits = self.ic(ty, i64::from(ty.lane_bits()));
        let in_range = self.b.ins().icmp(IntCC::UnsignedLessThan, y, bits);
        if op == BinaryOp::ShiftRightArithmetic {
            let top = self.ic(ty, i64::from(ty.lane_bits()) - 1);
            let amount = self.b.ins().select(in_range, y, top);
            return self.b.ins().sshr(x, amount);
        }
        let r = if op == BinaryOp::ShiftLeft {
            self.b.ins().ishl(x, y)
        } else {
            self.b.ins().ushr(x, y)
        };
        let z = self.ic(ty, 0);
        self.b.ins().select(in_range, r, z)
    }

    /// Integer division/remainder that never traps: `x / 0 = -1`,
    /// `x % 0 = x`, `MIN / -1 = MIN` (wrapping), `MIN % -1 = 0`.
    fn int_divrem(&mut self, div: bool, signed: bool, x: Value, y: Value, ty: Type) -> Value {
        let z = self.ic(ty, 0);
        let zero = self.b.ins().icmp(IntCC::Equal, y, z);
        let one = self.ic(ty, 1);
        if signed {
            let minus1 = self.ic(ty, -1);
            let m1 = self.b.ins().icmp(IntCC::Equal, y, minus1);
            let special = self.b.ins().bor(zero, m1);
            let safe = self.b.ins().select(special, one, y);
            if div {
                let q = self.b.ins().sdiv(x, safe);
                let nx = self.b.ins().ineg(x);
                let q = self.b.ins().select(m1, nx, q);
                self.b.ins().select(zero, minus1, q)
            } else {
                let r = self.b.ins().srem(x, safe);
                let r = self.b.ins().select(m1, z, r);
                self.b.ins().select(zero, x, r)
            }
        } else {
            let safe = self.b.ins().select(zero, one, y);
            if div {
                let q = self.b.ins().udiv(x, safe);
                let all = self.ic(ty, -1);
                self.b.ins().select(zero, all, q)
            } else {
                let r = self.b.ins().urem(x, safe);
                self.b.ins().select(zero, x, r)
            }
        }
    }

    /// [`Self::int_divrem`] on four i32 lanes: x86 has no vector integer
    /// division, so each half of the lanes is divided in f64 (`cvtdq2pd`
    /// from `fcvt_from_sint(swiden_low)`, `divpd`, `cvttpd2dq` from
    /// `snarrow(fcvt_to_sint_sat, 0)`: the patterns Cranelift lowers wasm's
    /// conversions with) and the halves joined. Exact: both operands
    /// are integers below 2^31 in magnitude, so a quotient that is not an
    /// integer lies at least 1/|x| ≥ 2^-31 (relatively) from the nearest
    /// integer, far more than f64's rounding (2^-53), and truncating the
    /// rounded quotient gives the integer one. The divisors 0 and -1 take
    /// the scalar code's selects (the remainder is `x - q·y`).
    fn int_divrem_i32x4(&mut self, div: bool, x: Value, y: Value) -> Value {
        let ty = types::I32X4;
        if let Some(d) = self.splat_constant(y)
            && d != 0
            && d != -1
            && d != i64::from(i32::MIN)
        {
            return self.int_divrem_i32x4_by(div, x, d);
        }
        let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        let z = self.splat_i(ty, 0);
        let zero = self.b.ins().icmp(IntCC::Equal, y, z);
        let minus1 = self.splat_i(ty, -1);
        let m1 = self.b.ins().icmp(IntCC::Equal, y, minus1);
        let special = self.b.ins().bor(zero, m1);
        let one = self.splat_i(ty, 1);
        let safe = self.sel(special, one, y, ty);
        let high_first: [u8; 16] = std::array::from_fn(|i| 8 + (i % 8) as u8);
        let high_first = self.b.func.dfg.immediates.push(high_first.to_vec().into());
        let mut halves = [x, safe].map(|v| {
            let w = self.b.ins().swiden_low(v);
            let lo = self.b.ins().fcvt_from_sint(types::F64X2, w);
            let bytes = self.b.ins().bitcast(types::I8X16, flags, v);
            let swapped = self.b.ins().shuffle(bytes, bytes, high_first);
            let swapped = self.b.ins().bitcast(ty, flags, swapped);
            let w = self.b.ins().swiden_low(swapped);
            (lo, self.b.ins().fcvt_from_sint(types::F64X2, w))
        });
        let [(xl, xh), (yl, yh)] = &mut halves;
        let zero64 = self.b.func.dfg.constants.insert(vec![0u8; 16].into());
        let trunc = |s: &mut Self, a: Value, b: Value| {
            let q = s.b.ins().fdiv(a, b);
            let q = s.b.ins().fcvt_to_sint_sat(types::I64X2, q);
            let zeros = s.b.ins().vconst(types::I64X2, zero64);
            let q = s.b.ins().snarrow(q, zeros);
            s.b.ins().bitcast(types::I8X16, flags, q)
        };
        let ql = trunc(self, *xl, *yl);
        let qh = trunc(self, *xh, *yh);
        let join: [u8; 16] = std::array::from_fn(|i| if i < 8 { i as u8 } else { 8 + i as u8 });
        let join = self.b.func.dfg.immediates.push(join.to_vec().into());
        let q = self.b.ins().shuffle(ql, qh, join);
        let q = self.b.ins().bitcast(ty, flags, q);
        if div {
            let nx = self.b.ins().ineg(x);
            let q = self.sel(m1, nx, q, ty);
            self.sel(zero, minus1, q, ty)
        } else {
            let qy = self.b.ins().imul(q, safe);
            let r = self.b.ins().isub(x, qy);
            let r = self.sel(m1, z, r, ty);
            self.sel(zero, x, r, ty)
        }
    }

    /// The integer a vector is a splat of, when it is one of a constant.
    fn splat_constant(&self, v: Value) -> Option<i64> {
        use cranelift_codegen::ir::{InstructionData, Opcode, ValueDef};
        let dfg = &self.b.func.dfg;
        let ValueDef::Result(inst, 0) = dfg.value_def(v) else {
            return None;
        };
        let InstructionData::Unary {
            opcode: Opcode::Splat,
            arg,
        } = dfg.insts[inst]
        else {
            return None;
        };
        let ValueDef::Result(c, 0) = dfg.value_def(arg) else {
            return None;
        };
        let InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            imm,
        } = dfg.insts[c]
        else {
            return None;
        };
        // The lane's bits, sign-extended from 32.
        Some(i64::from(imm.bits() as i32))
    }

    /// [`Self::int_divrem_i32x4`] by a constant `d` (not 0, -1 or i32::MIN):
    /// a multiply by the f64 reciprocal instead of a divide. `x·fl(1/d)` is
    /// within 2^-52 (relatively) of `x/d`, so its truncation is the exact
    /// quotient whenever that is not an integer (at least 2^-31 away from
    /// one, as above); when it is an integer `n` the product may fall just
    /// short and truncate one toward zero, leaving a remainder of exactly
    /// `±d`, which the correction turns into `n` and 0.
    fn int_divrem_i32x4_by(&mut self, div: bool, x: Value, d: i64) -> Value {
        let ty = types::I32X4;
        let flags = MemFlagsData::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        let high_first: [u8; 16] = std::array::from_fn(|i| 8 + (i % 8) as u8);
        let high_first = self.b.func.dfg.immediates.push(high_first.to_vec().into());
        let zero64 = self.b.func.dfg.constants.insert(vec![0u8; 16].into());
        let r = self.fconst(types::F64, 1.0 / d as f64);
        let r = self.b.ins().splat(types::F64X2, r);
        let bytes = self.b.ins().bitcast(types::I8X16, flags, x);
        let swapped = self.b.ins().shuffle(bytes, bytes, high_first);
        let high = self.b.ins().bitcast(ty, flags, swapped);
        let halves = [x, high].map(|v| {
            let w = self.b.ins().swiden_low(v);
            let f = self.b.ins().fcvt_from_sint(types::F64X2, w);
            let q = self.b.ins().fmul(f, r);
            let q = self.b.ins().fcvt_to_sint_sat(types::I64X2, q);
            let zeros = self.b.ins().vconst(types::I64X2, zero64);
            let q = self.b.ins().snarrow(q, zeros);
            self.b.ins().bitcast(types::I8X16, flags, q)
        });
        let join: [u8; 16] = std::array::from_fn(|i| if i < 8 { i as u8 } else { 8 + i as u8 });
        let join = self.b.func.dfg.immediates.push(join.to_vec().into());
        let q = self.b.ins().shuffle(halves[0], halves[1], join);
        let q = self.b.ins().bitcast(ty, flags, q);
        let dv = self.splat_i(ty, d);
        let qd = self.b.ins().imul(q, dv);
        let rem = self.b.ins().isub(x, qd);
        let neg_d = self.splat_i(ty, -d);
        // Masks: all ones where the remainder came out as d (the quotient
        // is one short) or -d (one over).
        let short = self.b.ins().icmp(IntCC::Equal, rem, dv);
        let over = self.b.ins().icmp(IntCC::Equal, rem, neg_d);
        if div {
            let q = self.b.ins().isub(q, short);
            self.b.ins().iadd(q, over)
        } else {
            let off = self.b.ins().bor(short, over);
            let z = self.splat_i(ty, 0);
            self.sel(off, z, rem, ty)
        }
    }

    fn complex_binary(
        &mut self,
        op: BinaryOp,
        a: Value,
        b: Value,
        c: Value,
        e: Value,
        d: DType,
    ) -> Result<V> {
        Ok(match op {
            BinaryOp::Add => V::C(self.b.ins().fadd(a, c), self.b.ins().fadd(b, e)),
            BinaryOp::Sub => V::C(self.b.ins().fsub(a, c), self.b.ins().fsub(b, e)),
            BinaryOp::Mul => self.cmul(a, b, c, e),
            BinaryOp::Div => {
                // num-complex: ((a c + b e) / |y|², (b c - a e) / |y|²)
                let cc = self.b.ins().fmul(c, c);
                let ee = self.b.ins().fmul(e, e);
                let n = self.b.ins().fadd(cc, ee);
                let ac = self.b.ins().fmul(a, c);
                let be = self.b.ins().fmul(b, e);
                let re = self.b.ins().fadd(ac, be);
                let bc = self.b.ins().fmul(b, c);
                let ae = self.b.ins().fmul(a, e);
                let im = self.b.ins().fsub(bc, ae);
                V::C(self.b.ins().fdiv(re, n), self.b.ins().fdiv(im, n))
            }
            BinaryOp::Rem
            | BinaryOp::Pow
            | BinaryOp::Max
            | BinaryOp::Min
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::ShiftLeft
            | BinaryOp::ShiftRightLogical
            | BinaryOp::ShiftRightArithmetic => {
                let t = comp_ty(d);
                let bin = if t == types::F32 {
                    RtFn::C64Bin
                } else {
                    RtFn::C128Bin
                };
                self.call_complex(bin, op as i64, t, &[a, b, c, e])?
            }
        })
    }

    /// `x c y` of `d` operands: a bool, or on vectors a lane mask; no
    /// vector form for integer lanes without the compare.
    fn compare(&mut self, c: CmpOp, x: V, y: V, d: DType) -> Lowered<V> {
        if let (V::C(a, b), V::C(p, q)) = (x, y) {
            let r = fcmp(self.b, FloatCC::Equal, a, p);
            let i = fcmp(self.b, FloatCC::Equal, b, q);
            let eq = self.b.ins().band(r, i);
            return Ok(V::S(if c == CmpOp::Eq {
                eq
            } else {
                self.b.ins().bxor_imm_u(eq, 1)
            }));
        }
        let (x, y) = (x.s(), y.s());
        Ok(if d.is_float() {
            let cc = match c {
                CmpOp::Eq => FloatCC::Equal,
                CmpOp::Ne => FloatCC::NotEqual,
                CmpOp::Lt => FloatCC::LessThan,
                CmpOp::Le => FloatCC::LessThanOrEqual,
                CmpOp::Gt => FloatCC::GreaterThan,
                CmpOp::Ge => FloatCC::GreaterThanOrEqual,
            };
            V::S(fcmp(self.b, cc, x, y))
        } else {
            needs(has_icmp(self.b.func.dfg.value_type(x)))?;
            let s = d.is_signed_int();
            let cc = match c {
                CmpOp::Eq => IntCC::Equal,
                CmpOp::Ne => IntCC::NotEqual,
                CmpOp::Lt if s => IntCC::SignedLessThan,
                CmpOp::Le if s => IntCC::SignedLessThanOrEqual,
                CmpOp::Gt if s => IntCC::SignedGreaterThan,
                CmpOp::Ge if s => IntCC::SignedGreaterThanOrEqual,
                CmpOp::Lt => IntCC::UnsignedLessThan,
                CmpOp::Le => IntCC::UnsignedLessThanOrEqual,
                CmpOp::Gt => IntCC::UnsignedGreaterThan,
                CmpOp::Ge => IntCC::UnsignedGreaterThanOrEqual,
            };
            V::S(self.b.ins().icmp(cc, x, y))
        })
    }

    /// Reads `x`'s bits as `to` (same size; halves never reach here, see
    /// `fusion::fusible`). Integers of one width share a Cranelift type, so
    /// between them (and from a complex type to itself) nothing is emitted.
    /// No vector form: the operand's lanes are of another type (the lane
    /// count would differ for no gain).
    fn bitcast(&mut self, x: V, from: DType, to: DType, mode: Mode) -> Lowered<V> {
        if let Mode::Vector(_) = mode {
            return Err(LowerError::NoVectorForm);
        }
        let tt = comp_ty(to);
        match x {
            _ if from == to => Ok(x),
            V::S(v) if !from.is_half() && !to.is_half() => {
                if self.b.func.dfg.value_type(v) == tt {
                    Ok(x)
                } else {
                    Ok(V::S(self.b.ins().bitcast(tt, MemFlagsData::new(), v)))
                }
            }
            V::S(_) | V::C(..) => Err(Error::internal(format!(
                "a bitcast_convert from {from} to {to} reached code generation"
            ))
            .into()),
        }
    }

    /// Casts with the interpreter's rules (see `docs/ir.md`). On vectors:
    /// between f32 and 32-bit integers (`cvtdq2ps`, `cvttps2dq` with
    /// Cranelift's saturation: NaN → 0, out of range → the nearest bound,
    /// as the scalar code's saturating conversion and clamp), between i32
    /// and u32 (the same bits), and between f32 and f64 (converted by the
    /// load, `vector_load`); no vector form for the others.
    pub(super) fn convert(&mut self, x: V, from: DType, to: DType) -> Lowered<V> {
        if from == to {
            return Ok(x);
        }
        // Complex sources: drop the imaginary part unless the target is
        // complex or bool.
        if let V::C(re, im) = x {
            if to.is_complex() {
                let t = comp_ty(to);
                let cv = |g: &mut Self, v: Value| {
                    if t == types::F64 {
                        g.b.ins().fpromote(t, v)
                    } else {
                        g.b.ins().fdemote(t, v)
                    }
                };
                return Ok(V::C(cv(self, re), cv(self, im)));
            }
            if to == DType::Bool {
                let z = self.splat_f(comp_ty(from), 0.0);
                let a = fcmp(self.b, FloatCC::NotEqual, re, z);
                let b = fcmp(self.b, FloatCC::NotEqual, im, z);
                return Ok(V::S(self.b.ins().bor(a, b)));
            }
            return self.convert(V::S(re), from.real_part(), to);
        }
        let x = x.s();
        if to.is_complex() {
            let part = to.real_part();
            let re = self.convert(V::S(x), from, part)?.s();
            let z = self.splat_f(comp_ty(part), 0.0);
            return Ok(V::C(re, z));
        }
        let xt = self.b.func.dfg.value_type(x);
        if xt.is_vector() {
            // A comparison's lane mask (all ones or all zeros, as wide as
            // the row's lanes) to 1 or 0: the mask ANDed with 1's bits.
            if from == DType::Bool {
                let one = match (to, xt) {
                    (DType::F32, types::I32X4) => i64::from(1f32.to_bits()),
                    (DType::F64, types::I64X2) => 1f64.to_bits() as i64,
                    (DType::I32 | DType::U32, types::I32X4)
                    | (DType::I64 | DType::U64, types::I64X2) => 1,
                    _ => return Err(LowerError::NoVectorForm),
                };
                let one = self.splat_i(xt, one);
                let bits = self.b.ins().band(x, one);
                return Ok(V::S(match vec_ty(to) {
                    Some(vt) if vt != xt => {
                        let flags = MemFlagsData::new()
                            .with_endianness(cranelift_codegen::ir::Endianness::Little);
                        self.b.ins().bitcast(vt, flags, bits)
                    }
                    Some(_) | None => bits,
                }));
            }
            return Ok(V::S(match (from, to) {
                (DType::I32, DType::F32) => self.b.ins().fcvt_from_sint(types::F32X4, x),
                (DType::U32, DType::F32) => self.b.ins().fcvt_from_uint(types::F32X4, x),
                (DType::F32, DType::I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, x),
                (DType::F32, DType::U32) => self.b.ins().fcvt_to_uint_sat(types::I32X4, x),
                (DType::I32 | DType::U32, DType::I32 | DType::U32) => x,
                // Converted by the load (`vector_load`).
                (DType::F32, DType::F64) | (DType::F64, DType::F32) => x,
                _ => return Err(LowerError::NoVectorForm),
            }));
        }
        let tt = comp_ty(to);
        let from_int = from == DType::Bool || from.is_int();
        let from_signed = from.is_signed_int();
        Ok(V::S(if to == DType::Bool {
            if from_int {
                let z = self.ic(xt, 0);
                self.b.ins().icmp(IntCC::NotEqual, x, z)
            } else {
                let z = self.splat_f(xt, 0.0);
                fcmp(self.b, FloatCC::NotEqual, x, z)
            }
        } else if to.is_int() {
            if from_int {
                if xt.bits() < tt.bits() {
                    if from_signed {
                        self.b.ins().sextend(tt, x)
                    } else {
                        self.b.ins().uextend(tt, x)
                    }
                } else if xt.bits() > tt.bits() {
                    self.b.ins().ireduce(tt, x)
                } else {
                    x
                }
            } else if to == DType::U64 {
                self.b.ins().fcvt_to_uint_sat(types::I64, x)
            } else {
                let w = self.b.ins().fcvt_to_sint_sat(types::I64, x);
                if to == DType::I64 {
                    w
                } else {
                    let bits = to.size() as u32 * 8;
                    let (lo, hi) = if to.is_signed_int() {
                        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
                    } else {
                        (0, ((1u64 << bits) - 1) as i64)
                    };
                    let lo = self.b.ins().iconst(types::I64, lo);
                    let hi = self.b.ins().iconst(types::I64, hi);
                    let w = self.b.ins().smax(w, lo);
                    let w = self.b.ins().smin(w, hi);
                    self.b.ins().ireduce(tt, w)
                }
            }
        } else {
            // Float targets (halves computed in f32).
            let v = if from_int {
                let wide = if xt.bits() < 64 {
                    if from_signed {
                        self.b.ins().sextend(types::I64, x)
                    } else {
                        self.b.ins().uextend(types::I64, x)
                    }
                } else {
                    x
                };
                if from_signed {
                    self.b.ins().fcvt_from_sint(tt, wide)
                } else {
                    self.b.ins().fcvt_from_uint(tt, wide)
                }
            } else if to.is_half() {
                let round = match (xt == types::F64, to == DType::F16) {
                    (true, true) => RtFn::F64ToF16,
                    (true, false) => RtFn::F64ToBf16,
                    (false, true) => RtFn::F32ToF16,
                    (false, false) => RtFn::F32ToBf16,
                };
                let bits = self.call(round, &[x])?[0];
                return Ok(V::S(if to == DType::F16 {
                    self.call(RtFn::F16ToF32, &[bits])?[0]
                } else {
                    let h = self.b.ins().ireduce(types::I16, bits);
                    self.bf16_to_f32(h)
                }));
            } else if xt == tt {
                x
            } else if tt == types::F64 {
                self.b.ins().fpromote(tt, x)
            } else {
                self.b.ins().fdemote(tt, x)
            };
            if to.is_half() {
                self.round_half(to, v)?
            } else {
                v
            }
        }))
    }
}

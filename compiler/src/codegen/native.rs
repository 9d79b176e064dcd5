//! Elementwise f32, f64 and i32 kernels as AVX-512 or AVX2 machine code,
//! emitted directly (iced-x86's assembler) instead of through Cranelift,
//! whose x64 backend has 128-bit vectors only (and whose compile of a
//! kernel costs more; docs/benchmarks.md, "Arithmetic alone as machine
//! code").
//!
//! A kernel qualifies when it is a plain loop (no reduction, no stash)
//! over a contiguous f32 or f64 output, every load is contiguous at the
//! output's index, a scalar, or (over rows and columns) a row broadcast or
//! a value per row, and every node is an operation of the output's type
//! listed in [`record`] (or a comparison of that type read by selects);
//! f64 kernels take no approximation (those need 64-bit integer lanes
//! and conversions AVX2 lacks), so f64 `exp`, `tanh`... stay with
//! Cranelift and the wide routines; i32 kernels take the integer
//! operations of [`binary_int`] and [`unary_int`] (a division through
//! f64 halves: [`Rec::div_rem`]). Its nodes are
//! recorded as a straight line of vector instructions (the approximations
//! through the same [`approx::Ops`] the inline code and the wide routines
//! use, so the three give the same bits), given registers by a linear
//! scan over that line (AVX-512: 32 zmm, lane masks in k2–k7; AVX2: 15
//! ymm, masks among them; a kernel that would need more stays with
//! Cranelift), and emitted as one loop of whole vectors plus one masked
//! tail vector. The line is recorded twice, in the kernel's order and
//! lean ([`record`], [`schedule`]), and the one that runs more vectors a
//! step is kept. Constants live in a pool 64 bytes into the function,
//! which starts with a jump over it (AVX-512: one element each, read as
//! `{1to16}` or `{1to8}` operands; AVX2: a whole vector each), so they
//! hold no register.
//!
//! The function has the kernel ABI (`mod.rs`) and is position
//! independent: the driver defines its bytes as the kernel's function in
//! the JIT module, so `main`, the thread pool and row groups call it as
//! any other kernel.

use std::collections::HashMap;

use iced_x86::code_asm::{
    AsmRegister64, AsmRegisterK, AsmRegisterYmm, AsmRegisterZmm, CodeAssembler, dword_bcst,
    dword_ptr, k0, k1, k2, k3, k4, k5, k6, k7, ptr, qword_bcst, qword_ptr, r8, r9, r10, r11, r12,
    r13, r14, r15, rax, rbx, rcx, rdi, rdx, rsi, zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7,
    zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14, zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21,
    zmm22, zmm23, zmm24, zmm25, zmm26, zmm27, zmm28, zmm29, zmm30, zmm31, zmmword_ptr,
};
use iced_x86::code_asm::{
    rbp, rsp, xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12,
    xmm13, xmm14, xmm15, ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11,
    ymm12, ymm13, ymm14, ymm15, ymm16, ymm17, ymm18, ymm19, ymm20, ymm21, ymm22, ymm23, ymm24,
    ymm25, ymm26, ymm27, ymm28, ymm29, ymm30, ymm31, ymmword_ptr,
};
use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
use tensorlift_ir::{BinaryOp, CmpOp, DType, Error, ReduceOp, Result, UnaryOp};

use crate::approx;
use crate::fusion::{ENode, Kernel, KernelKind, Plan, SlotId};

use super::JitOptions;

/// `a.$ps(args)` on 32-bit lanes (f32, and the moves, broadcasts, masks
/// and blends of i32 ones, which move bits), `a.$pd(args)` on f64 lanes.
macro_rules! by_elem {
    ($a:ident, $e:expr, $ps:ident | $pd:ident ($($arg:expr),*)) => {
        match $e {
            Elem::F32 | Elem::I32 => $a.$ps($($arg),*),
            Elem::F64 => $a.$pd($($arg),*),
        }
    };
}

/// The vector extension a kernel is emitted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    /// 16 f32 or 8 f64 lanes in zmm registers, lane masks in k
    /// registers.
    Avx512,
    /// 8 f32 or 4 f64 lanes in ymm registers (VEX), lane masks in ymm
    /// registers.
    Avx2,
}

impl Isa {
    /// Bytes per vector register.
    fn vector_bytes(self) -> i32 {
        match self {
            Isa::Avx512 => 64,
            Isa::Avx2 => 32,
        }
    }

    fn lanes(self, e: Elem) -> i32 {
        self.vector_bytes() / e.bytes()
    }

    /// Vector registers the allocation may use (AVX2: ymm15 holds the
    /// tail's lane mask).
    fn vector_regs(self) -> u8 {
        match self {
            Isa::Avx512 => 32,
            Isa::Avx2 => 15,
        }
    }

    /// Bytes per pool entry: AVX-512 broadcasts one element (i32 lanes:
    /// 8-byte entries, which also hold the f64 reciprocals of constant
    /// divisors), AVX2 reads a whole vector.
    fn entry(self, e: Elem) -> i32 {
        match (self, e) {
            (Isa::Avx512, Elem::F32) => 4,
            (Isa::Avx512, Elem::F64 | Elem::I32) => 8,
            (Isa::Avx2, _) => 32,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "AVX-512",
            Isa::Avx2 => "AVX2",
        }
    }

    /// The register of accumulator `acc`: the last ones below the tail's
    /// mask, which `allocate` keeps out of its scan.
    fn acc_reg(self, acc: u8) -> u8 {
        self.vector_regs() - 1 - acc
    }
}

/// The element type of a kernel's lanes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Elem {
    #[default]
    F32,
    F64,
    /// Wrapping int32 arithmetic ([`binary_int`], [`unary_int`]), a
    /// division through f64.
    I32,
}

impl Elem {
    fn of(d: DType) -> Option<Elem> {
        if d == DType::F32 {
            Some(Elem::F32)
        } else if d == DType::F64 {
            Some(Elem::F64)
        } else if d == DType::I32 {
            Some(Elem::I32)
        } else {
            None
        }
    }

    fn dtype(self) -> DType {
        match self {
            Elem::F32 => DType::F32,
            Elem::F64 => DType::F64,
            Elem::I32 => DType::I32,
        }
    }

    fn bytes(self) -> i32 {
        match self {
            Elem::F32 | Elem::I32 => 4,
            Elem::F64 => 8,
        }
    }

    /// The bits of `v` rounded to this type, as an operand's constant.
    fn bits(self, v: f64) -> u64 {
        match self {
            Elem::F32 => u64::from((v as f32).to_bits()),
            Elem::F64 => v.to_bits(),
            Elem::I32 => u64::from(v as i32 as u32),
        }
    }

    /// The sign bit.
    fn sign(self) -> u64 {
        match self {
            Elem::F32 | Elem::I32 => 0x8000_0000,
            Elem::F64 => 1 << 63,
        }
    }
}

/// A kernel as machine code.
pub(super) struct Native {
    /// The extension it uses, as the dumps name it.
    pub isa: &'static str,
    /// The file that emitted it, for the dumps.
    pub source: &'static str,
    pub bytes: Vec<u8>,
    /// Where the instructions start (after the entry's jump and the pool).
    pub code_at: usize,
}

impl Native {
    /// The instructions as Intel-syntax assembly, one a line, for the
    /// dumps (formatted only when a dump is printed: see
    /// `driver::Clif`).
    pub(super) fn listing(bytes: &[u8], code_at: usize) -> String {
        let code = bytes.get(code_at..).unwrap_or_default();
        let mut decoder = Decoder::with_ip(64, code, code_at as u64, DecoderOptions::NONE);
        let mut formatter = IntelFormatter::new();
        let mut out = format!("  0000  jmp {code_at:04x}h (over the pool at {POOL_AT:04x}h)\n");
        let mut text = String::new();
        for inst in &mut decoder {
            text.clear();
            formatter.format(&inst, &mut text);
            out.push_str(&format!("  {:04x}  {text}\n", inst.ip()));
        }
        out
    }
}

/// `k` as AVX-512 or AVX2 machine code, or `None` where it does not
/// qualify (see the module docs) or the host or options rule it out.
pub(super) fn compile(plan: &Plan, k: &Kernel, opts: &JitOptions) -> Result<Option<Native>> {
    let Some(isa) = host_isa(opts) else {
        return Ok(None);
    };
    let fits = |r: &Rec| r.slots.len() <= SLOT_GPRS.len();
    let Some(plain) = record(plan, k, false).filter(fits) else {
        return Ok(None);
    };
    if let Some(out) = plain.sums_into {
        return row_sums(plain, out, k, isa);
    }
    // The line in the kernel's order, or the lean one where it runs more
    // vectors a step (with as many, its extra loads cost a few percent).
    let mut best = Lines::of(plain, isa);
    if best.as_ref().is_none_or(|b| b.copies() < MAX_COPIES)
        && let Some(lean) = record(plan, k, true)
            .filter(fits)
            .and_then(|r| Lines::of(r, isa))
        && best.as_ref().is_none_or(|b| lean.copies() > b.copies())
    {
        best = Some(lean);
    }
    let Some(Lines {
        rec,
        pool,
        phys,
        several,
    }) = best
    else {
        return Ok(None);
    };
    let inner: i64 = k.dims.iter().skip(1).map(|&d| d as i64).product();
    // Row by row: the columns are an immediate operand.
    let cols = match rec.rows {
        true => match i32::try_from(inner) {
            Ok(c) if c < i32::MAX / 2 => Some(c),
            _ => return Ok(None),
        },
        false => None,
    };
    let frame = Frame::Kernel {
        inner,
        cols,
        sums: None,
    };
    emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).map(Some)
}

/// Most values a lane of a row sum adds in sequence: longer rows keep
/// the Cranelift code, whose partial sums bound the error of a long row
/// (`FLUSH_STEPS`).
const ROW_SUM_LANE_MAX: i64 = 256;

/// A row sum (`record`ed into `out`): as many vectors a step as the
/// registers allow, each added into its accumulator, the accumulators
/// summed at the end of each row and stored as the row's sum.
fn row_sums(rec: Rec, out: usize, k: &Kernel, isa: Isa) -> Result<Option<Native>> {
    let cols = k.dims[1] as i64;
    let Ok(c32) = i32::try_from(cols) else {
        return Ok(None);
    };
    let mut pool = Pool::default();
    // A max or min: AVX-512's `vrangeps` (its zeros signed as `fmax`
    // and `fmin` sign them), NaN lanes kept aside in one more register.
    let extreme = match &k.kind {
        KernelKind::Reduce {
            op: ReduceOp::Max, ..
        } => Some((true, f32::NEG_INFINITY)),
        KernelKind::Reduce {
            op: ReduceOp::Min, ..
        } => Some((false, f32::INFINITY)),
        KernelKind::Reduce {
            op: ReduceOp::Sum | ReduceOp::Prod | ReduceOp::And | ReduceOp::Or,
            ..
        }
        | KernelKind::Loop => None,
    };
    let kind = match extreme {
        None => AccKind::Sum,
        Some((max, identity)) => AccKind::Extreme {
            max,
            identity: pool.at(u64::from(identity.to_bits())),
        },
    };
    // (A max or min's NaN lanes in the register after the accumulators';
    // AVX2: then its sign bits and a scratch register.)
    let extra = match (kind, isa) {
        (AccKind::Sum, _) => 0,
        (AccKind::Extreme { .. }, Isa::Avx512) => 1,
        (AccKind::Extreme { .. }, Isa::Avx2) => 3,
    };
    // (Accumulator 0 also adds the row's last vectors, fewer than the
    // copies, and the masked one.)
    let accurate = |copies: u32| {
        let lanes = i64::from(isa.lanes(rec.elem)) * i64::from(copies);
        kind != AccKind::Sum || cols <= (ROW_SUM_LANE_MAX - i64::from(copies)) * lanes
    };
    let Some((accs, phys, several)) = with_accumulators(&rec, isa, &mut pool, extra, accurate)
    else {
        return Ok(None);
    };
    let frame = Frame::Kernel {
        inner: cols,
        cols: Some(c32),
        sums: Some(RowReduce { out, accs, kind }),
    };
    emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).map(Some)
}

/// A fused f32 row (`wide::tl_wide_row_f32`'s contract, its `op` argument
/// ignored) as AVX-512 or AVX2 machine code: `f((x - a)·b)` (`u`: `f`), or
/// `x / b` (`u` None), each value stored where `store`, all summed in
/// accumulators held in registers (one per vector of a step), and the
/// lines of `ahead` prefetched where `prefetch`. `None` where `f` does
/// not qualify (as in a kernel) or the host or options rule it out.
pub(super) fn compile_row(
    u: Option<UnaryOp>,
    store: bool,
    prefetch: bool,
    opts: &JitOptions,
) -> Result<Option<Native>> {
    let Some(isa) = host_isa(opts) else {
        return Ok(None);
    };
    if u.is_some_and(|u| !crate::wide::has_row_routine(u)) {
        return Ok(None);
    }
    let Some(rec) = record_row(u, store) else {
        return Ok(None);
    };
    // As many vectors a step as the registers allow, each with its
    // accumulator (reserved through the whole loop, the one-vector line's
    // included).
    let mut pool = Pool::default();
    let Some((accs, phys, several)) = with_accumulators(&rec, isa, &mut pool, 0, |_| true) else {
        return Ok(None);
    };
    let frame = Frame::Row { prefetch, accs };
    emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).map(Some)
}

/// A line's accumulators, its registers and (several vectors a step)
/// its copies' with their count.
type WithAccs = (u8, Phys, Option<(i32, Phys)>);

/// The registers of a line that adds its value into accumulators: the
/// line alone and as many copies interleaved as the registers allow (at
/// most [`MAX_COPIES`], and where `fits(copies)`), each copy with its
/// accumulator, and `extra` more registers, kept out of the allocation
/// through the whole loop (the one-vector line's included).
fn with_accumulators(
    rec: &Rec,
    isa: Isa,
    pool: &mut Pool,
    extra: u8,
    fits: impl Fn(u32) -> bool,
) -> Option<WithAccs> {
    (1..=MAX_COPIES)
        .rev()
        .filter(|&c| fits(c))
        .find_map(|copies| {
            let accs = copies as u8;
            let reserved = accs + extra;
            let one = allocate(rec, isa, pool, reserved)?;
            let several = match copies {
                1 => None,
                _ => {
                    let line = interleave(rec, isa.vector_bytes(), copies)?;
                    Some((copies as i32, allocate(&line, isa, pool, reserved)?))
                }
            };
            Some((accs, one, several))
        })
}

/// The line of [`compile_row`]'s row: slot 0 the destination, 1 the
/// source, 2 `a` then `b` (their addresses).
fn record_row(u: Option<UnaryOp>, store: bool) -> Option<Rec> {
    let mut rec = Rec::default();
    for s in 0..3 {
        rec.slot(s);
    }
    let load = |rec: &mut Rec, inst: fn(u32) -> Inst| {
        let dst = rec.new_v();
        rec.insts.push(inst(dst));
        O::R(dst)
    };
    let x = load(&mut rec, |dst| Inst::Load {
        dst,
        slot: 1,
        disp: 0,
        col: false,
    });
    let b = load(&mut rec, |dst| Inst::Splat {
        dst,
        slot: 2,
        disp: 4,
        row: false,
    });
    let v = match u {
        None => rec.bin(Bin::Div, x, b, false),
        Some(u) => {
            let a = load(&mut rec, |dst| Inst::Splat {
                dst,
                slot: 2,
                disp: 0,
                row: false,
            });
            let d = rec.bin(Bin::Sub, x, a, false);
            let p = rec.bin(Bin::Mul, d, b, true);
            unary(&mut rec, u, p)?
        }
    };
    if rec.unsupported {
        return None;
    }
    let v = rec.reg(v);
    if store {
        rec.insts.push(Inst::Store { a: v, disp: 0 });
    }
    rec.insts.push(Inst::Acc { a: v, acc: 0 });
    Some(rec)
}

/// The extension this host's machine code is emitted for, within the
/// options (none in exact mode or without wide math).
fn host_isa(opts: &JitOptions) -> Option<Isa> {
    if opts.exact || !opts.vectorize || !opts.wide_math {
        None
    } else if crate::isa::has_avx512() {
        Some(Isa::Avx512)
    } else if crate::isa::has_avx2() {
        Some(Isa::Avx2)
    } else {
        None
    }
}

/// The most vectors a loop step runs.
const MAX_COPIES: u32 = 4;

/// A recorded line with its registers: one vector a step, and several
/// where the registers allow.
struct Lines {
    rec: Rec,
    pool: Pool,
    phys: Phys,
    several: Option<(i32, Phys)>,
}

impl Lines {
    fn of(rec: Rec, isa: Isa) -> Option<Lines> {
        let mut pool = Pool::default();
        let phys = allocate(&rec, isa, &mut pool, 0)?;
        // Several vectors a step, their instructions interleaved (each
        // line is one long dependency chain): four, three or two, as the
        // registers allow.
        let several = (2..=MAX_COPIES).rev().find_map(|copies| {
            let line = interleave(&rec, isa.vector_bytes(), copies)?;
            Some((copies as i32, allocate(&line, isa, &mut pool, 0)?))
        });
        Some(Lines {
            rec,
            pool,
            phys,
            several,
        })
    }

    /// Vectors a step.
    fn copies(&self) -> u32 {
        self.several.as_ref().map_or(1, |s| s.0 as u32)
    }
}

/// The line for `copies` vectors, each `bytes` after the previous one:
/// each instruction followed by its copies on the other vectors'
/// registers. `None` where a displacement would overflow.
fn interleave(rec: &Rec, bytes: i32, copies: u32) -> Option<Rec> {
    let n = rec.mask.len() as u32;
    let mut insts = Vec::with_capacity(rec.insts.len() * copies as usize);
    for inst in &rec.insts {
        for j in 0..copies {
            insts.push(shifted(inst, j, n * j, bytes.checked_mul(j as i32)?)?);
        }
    }
    Some(Rec {
        insts,
        mask: (0..copies).flat_map(|_| rec.mask.iter().copied()).collect(),
        slots: rec.slots.clone(),
        unsupported: rec.unsupported,
        rows: rec.rows,
        elem: rec.elem,
        sums_into: rec.sums_into,
        prefetch: rec.prefetch,
    })
}

/// `inst` of copy `j`: on registers `n` further on, its memory `bytes`
/// further on, into accumulator `j`.
fn shifted(inst: &Inst, j: u32, n: u32, bytes: i32) -> Option<Inst> {
    let o = |o: O| match o {
        O::R(r) => O::R(r + n),
        O::C(_) => o,
    };
    Some(match *inst {
        Inst::Load {
            dst,
            slot,
            disp,
            col,
        } => Inst::Load {
            dst: dst + n,
            slot,
            disp: disp.checked_add(bytes)?,
            col,
        },
        Inst::Splat {
            dst,
            slot,
            disp,
            row,
        } => Inst::Splat {
            dst: dst + n,
            slot,
            disp,
            row,
        },
        Inst::Const { dst, bits } => Inst::Const { dst: dst + n, bits },
        Inst::Bin { op, dst, a, b } => Inst::Bin {
            op,
            dst: dst + n,
            a: a + n,
            b: o(b),
        },
        Inst::Un { op, dst, a } => Inst::Un {
            op,
            dst: dst + n,
            a: a + n,
        },
        Inst::Fma { dst, a, b, c, neg } => Inst::Fma {
            neg,
            dst: dst + n,
            a: a + n,
            b: o(b),
            c: o(c),
        },
        Inst::Cmp { pred, dst, a, b } => Inst::Cmp {
            pred,
            dst: dst + n,
            a: a + n,
            b: o(b),
        },
        Inst::TestNz { dst, a } => Inst::TestNz {
            dst: dst + n,
            a: a + n,
        },
        Inst::Blend { dst, m, a, b } => Inst::Blend {
            dst: dst + n,
            m: m + n,
            a: o(a),
            b: b + n,
        },
        Inst::KBin { op, dst, a, b } => Inst::KBin {
            op,
            dst: dst + n,
            a: a + n,
            b: b + n,
        },
        Inst::KNot { dst, a } => Inst::KNot {
            dst: dst + n,
            a: a + n,
        },
        Inst::ICmp { gt, dst, a, b } => Inst::ICmp {
            gt,
            dst: dst + n,
            a: a + n,
            b: o(b),
        },
        Inst::IDiv { dst, a, b, recip } => Inst::IDiv {
            dst: dst + n,
            a: a + n,
            b: o(b),
            recip,
        },
        Inst::Store { a, disp } => Inst::Store {
            a: a + n,
            disp: disp.checked_add(bytes)?,
        },
        Inst::Acc { a, acc } => Inst::Acc {
            a: a + n,
            acc: acc + u8::try_from(j).ok()?,
        },
    })
}

/// An operand: a vector value, or a constant broadcast from the pool (its
/// bits, in the low 32 for f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum O {
    R(u32),
    C(u64),
}

/// Vector operations of two operands (the second may be a constant).
#[derive(Clone, Copy, Debug)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    /// x86's `maxps`: the second operand where unordered or equal.
    Max,
    /// x86's `minps`, likewise.
    Min,
    IAdd,
    ISub,
    And,
    Or,
    Xor,
    /// i32 lanes: the low 32 bits of the product.
    IMul,
    IMax,
    IMin,
    /// i32 lanes shifted by each lane's amount (x86's: an amount outside
    /// `[0, 32)` shifts every bit out, or fills with the sign).
    Shl,
    Shr,
    Sar,
}

/// Vector operations of one register operand.
#[derive(Clone, Copy, Debug)]
enum Un {
    Sqrt,
    /// `vrndscaleps` with this rounding immediate.
    Round(i32),
    /// i32 lanes to f32.
    ToFloat,
    Shl(u32),
    Shr(u32),
    /// Arithmetic shift right of i32 lanes.
    Sar(u32),
    /// |x| of i32 lanes (`MIN` stays `MIN`).
    IAbs,
}

/// Mask operations.
#[derive(Clone, Copy, Debug)]
enum KOp {
    And,
    Or,
}

/// One instruction of the recorded line. Values are virtual registers
/// (`u32`), vectors and masks numbered together.
#[derive(Clone, Copy, Debug)]
enum Inst {
    /// A vector of contiguous elements of slot `slot` (an index into
    /// `Rec::slots`) at the loop index (`col`: the column index) plus
    /// `disp` bytes.
    Load {
        dst: u32,
        slot: usize,
        disp: i32,
        col: bool,
    },
    /// One element of a slot (`row`: the row index's), broadcast.
    Splat {
        dst: u32,
        slot: usize,
        disp: i32,
        row: bool,
    },
    /// A constant in a register (where no operand may be a constant).
    Const {
        dst: u32,
        bits: u64,
    },
    Bin {
        op: Bin,
        dst: u32,
        a: u32,
        b: O,
    },
    Un {
        op: Un,
        dst: u32,
        a: u32,
    },
    /// `a·b + c` fused (`neg`: `c - a·b`); `a` a register, at most one of
    /// `b`, `c` a constant.
    Fma {
        neg: bool,
        dst: u32,
        a: u32,
        b: O,
        c: O,
    },
    /// A mask of `vcmpps` predicate `pred`.
    Cmp {
        pred: i32,
        dst: u32,
        a: u32,
        b: O,
    },
    /// A mask of the lanes whose bits are not zero.
    TestNz {
        dst: u32,
        a: u32,
    },
    /// `m ? a : b`.
    Blend {
        dst: u32,
        m: u32,
        a: O,
        b: u32,
    },
    KBin {
        op: KOp,
        dst: u32,
        a: u32,
        b: u32,
    },
    KNot {
        dst: u32,
        a: u32,
    },
    /// A mask of the i32 lanes where `a > b` (`gt`), or `a == b`.
    ICmp {
        gt: bool,
        dst: u32,
        a: u32,
        b: O,
    },
    /// The i32 lanes of `a` divided by `b`'s, through f64 halves,
    /// truncated: `b` a register, or (`recip`) a constant, the f64 bits
    /// of a reciprocal to multiply by. x86's truncation gives `MIN` where
    /// the quotient is not an i32 (`MIN / -1`, a division by zero).
    IDiv {
        dst: u32,
        a: u32,
        b: O,
        recip: bool,
    },
    /// The output at the loop index.
    Store {
        a: u32,
        disp: i32,
    },
    /// `a` added into the row's accumulator `acc` (a register reserved for
    /// it through the whole loop; in the tail, only the tail's lanes).
    Acc {
        a: u32,
        acc: u8,
    },
}

impl Inst {
    /// The registers read.
    fn srcs(&self) -> Vec<u32> {
        let o = |o: O| match o {
            O::R(r) => Some(r),
            O::C(_) => None,
        };
        match *self {
            Inst::Load { .. } | Inst::Splat { .. } | Inst::Const { .. } => vec![],
            Inst::Bin { a, b, .. }
            | Inst::Cmp { a, b, .. }
            | Inst::ICmp { a, b, .. }
            | Inst::IDiv { a, b, .. } => [Some(a), o(b)].into_iter().flatten().collect(),
            Inst::Un { a, .. }
            | Inst::TestNz { a, .. }
            | Inst::KNot { a, .. }
            | Inst::Store { a, .. }
            | Inst::Acc { a, .. } => vec![a],
            Inst::Fma { a, b, c, .. } => [Some(a), o(b), o(c)].into_iter().flatten().collect(),
            Inst::Blend { m, a, b, .. } => [Some(m), o(a), Some(b)].into_iter().flatten().collect(),
            Inst::KBin { a, b, .. } => vec![a, b],
        }
    }

    /// The register written.
    fn dst(&self) -> Option<u32> {
        match *self {
            Inst::Load { dst, .. }
            | Inst::Splat { dst, .. }
            | Inst::Const { dst, .. }
            | Inst::Bin { dst, .. }
            | Inst::Un { dst, .. }
            | Inst::Fma { dst, .. }
            | Inst::Cmp { dst, .. }
            | Inst::TestNz { dst, .. }
            | Inst::Blend { dst, .. }
            | Inst::KBin { dst, .. }
            | Inst::KNot { dst, .. }
            | Inst::ICmp { dst, .. }
            | Inst::IDiv { dst, .. } => Some(dst),
            Inst::Store { .. } | Inst::Acc { .. } => None,
        }
    }
}

/// The recorded line of a kernel.
#[derive(Default)]
struct Rec {
    insts: Vec<Inst>,
    /// Per virtual register: a mask (else a vector).
    mask: Vec<bool>,
    /// The slots read or written, in order of first use; the output first.
    slots: Vec<SlotId>,
    /// An operation the recorder cannot express was asked for.
    unsupported: bool,
    /// Some load is indexed by the column (a row broadcast along the rows)
    /// or by the row (one value per row): the loop runs row by row.
    rows: bool,
    /// The lanes' type.
    elem: Elem,
    /// A row sum: the slot (index into `slots`) its sums are stored in,
    /// one per row, the line's value added into the accumulators.
    sums_into: Option<usize>,
    /// A row reduction in a row group: the slot (index into `slots`) whose
    /// row of the next block it prefetches as it reads its own, and the
    /// bytes to it (`wide_rows::prefetch_distance`).
    prefetch: Option<(usize, i32)>,
}

impl Rec {
    fn new_v(&mut self) -> u32 {
        self.mask.push(false);
        (self.mask.len() - 1) as u32
    }

    fn new_m(&mut self) -> u32 {
        self.mask.push(true);
        (self.mask.len() - 1) as u32
    }

    fn slot(&mut self, s: SlotId) -> usize {
        match self.slots.iter().position(|&t| t == s) {
            Some(i) => i,
            None => {
                self.slots.push(s);
                self.slots.len() - 1
            }
        }
    }

    /// `o` in a register.
    fn reg(&mut self, o: O) -> u32 {
        match o {
            O::R(r) => r,
            O::C(bits) => {
                let dst = self.new_v();
                self.insts.push(Inst::Const { dst, bits });
                dst
            }
        }
    }

    fn bin(&mut self, op: Bin, a: O, b: O, commutes: bool) -> O {
        let (a, b) = if commutes && matches!(a, O::C(_)) {
            (b, a)
        } else {
            (a, b)
        };
        let a = self.reg(a);
        let dst = self.new_v();
        self.insts.push(Inst::Bin { op, dst, a, b });
        O::R(dst)
    }

    fn un(&mut self, op: Un, a: O) -> O {
        let a = self.reg(a);
        let dst = self.new_v();
        self.insts.push(Inst::Un { op, dst, a });
        O::R(dst)
    }

    /// IEEE `maximum`/`minimum` as the inline code computes them (Cranelift's
    /// `fmax`/`fmin`, then the canonical NaN where either operand is NaN):
    /// x86's `max(x, y)` and `max(y, x)` differ only at ±0 (and NaN), where
    /// the AND of their bits is +0 (the OR, for `min`, -0).
    fn max_min(&mut self, max: bool, x: O, y: O) -> O {
        let op = if max { Bin::Max } else { Bin::Min };
        let xy = self.bin(op, x, y, false);
        let yx = self.bin(op, y, x, false);
        let r = self.bin(if max { Bin::And } else { Bin::Or }, xy, yx, true);
        let nan = self.cmp(UNORD_Q, x, y);
        let canonical = O::C(self.elem.bits(f64::NAN));
        self.select_bits(nan, canonical, r)
    }

    /// `a·b + c` fused (`neg`: `c - a·b`).
    fn fused(&mut self, neg: bool, a: O, b: O, c: O) -> O {
        // The product commutes exactly: a constant goes to `b`.
        let (a, b) = if matches!(a, O::C(_)) { (b, a) } else { (a, b) };
        let a = self.reg(a);
        let c = if matches!((b, c), (O::C(_), O::C(_))) {
            O::R(self.reg(c))
        } else {
            c
        };
        let dst = self.new_v();
        self.insts.push(Inst::Fma { neg, dst, a, b, c });
        O::R(dst)
    }

    /// `m ? a : b`.
    fn select_bits(&mut self, m: u32, a: O, b: O) -> O {
        let b = self.reg(b);
        let dst = self.new_v();
        self.insts.push(Inst::Blend { dst, m, a, b });
        O::R(dst)
    }

    fn cmp(&mut self, pred: i32, a: O, b: O) -> u32 {
        let a = self.reg(a);
        let dst = self.new_m();
        self.insts.push(Inst::Cmp { pred, dst, a, b });
        dst
    }

    /// A mask of the i32 lanes where `c` holds: x86 compares for `>` and
    /// `==`, the rest by swapping the operands or negating the mask.
    fn compare_int(&mut self, c: CmpOp, x: O, y: O) -> u32 {
        match c {
            CmpOp::Eq => self.icmp(false, x, y),
            CmpOp::Gt => self.icmp(true, x, y),
            CmpOp::Lt => self.icmp(true, y, x),
            CmpOp::Ne => {
                let m = self.icmp(false, x, y);
                approx::Ops::not(self, m)
            }
            CmpOp::Le => {
                let m = self.icmp(true, x, y);
                approx::Ops::not(self, m)
            }
            CmpOp::Ge => {
                let m = self.icmp(true, y, x);
                approx::Ops::not(self, m)
            }
        }
    }

    fn icmp(&mut self, gt: bool, a: O, b: O) -> u32 {
        let a = self.reg(a);
        let dst = self.new_m();
        self.insts.push(Inst::ICmp { gt, dst, a, b });
        dst
    }

    /// The truncated quotient (`div`) or the remainder of i32 lanes, as
    /// the interpreter defines them: `x / 0 = -1`, `x % 0 = x`, `MIN / -1
    /// = MIN`, `MIN % -1 = 0`. Through f64, where both operands are exact
    /// and the truncated quotient is the integer one (a quotient that is
    /// not an integer lies at least 2^-31 from one, relatively, far more
    /// than f64's rounding); the remainder is `x - q·y`. By a vector, x86's
    /// truncation already gives `MIN` for `MIN / -1` and a remainder of
    /// `x` by zero (`MIN · 0`); the quotient's zero divisors become -1. By
    /// a constant `d` (not 0, -1 or `MIN`), a product by the f64 `1/d`
    /// (within 2^-52 of `x/d`): its truncation is the quotient unless that
    /// is an integer the product fell just short of, which leaves a
    /// remainder of `±d` that is corrected (as `lower.rs`'s
    /// `int_divrem_i32x4_by`).
    fn div_rem(&mut self, div: bool, x: O, y: O) -> O {
        if let O::C(bits) = y {
            let d = bits as u32 as i32;
            match d {
                0 if div => return O::C(u64::from(u32::MAX)),
                0 => return x,
                -1 if div => return self.bin(Bin::ISub, O::C(0), x, false),
                -1 => return O::C(0),
                i32::MIN => {}
                _ => {
                    let recip = O::C((1.0 / f64::from(d)).to_bits());
                    let q = self.idiv(x, recip, true);
                    let qd = self.bin(Bin::IMul, q, y, true);
                    let r = self.bin(Bin::ISub, x, qd, false);
                    let short = self.icmp(false, r, y);
                    let over = self.icmp(false, r, O::C(u64::from(d.wrapping_neg() as u32)));
                    return match div {
                        true => {
                            let up = self.bin(Bin::IAdd, q, O::C(1), true);
                            let q = self.select_bits(short, up, q);
                            let down = self.bin(Bin::ISub, q, O::C(1), false);
                            self.select_bits(over, down, q)
                        }
                        false => {
                            let off = approx::Ops::or(self, short, over);
                            self.select_bits(off, O::C(0), r)
                        }
                    };
                }
            }
        }
        let y = O::R(self.reg(y));
        let q = self.idiv(x, y, false);
        match div {
            true => {
                let zero = self.icmp(false, y, O::C(0));
                self.select_bits(zero, O::C(u64::from(u32::MAX)), q)
            }
            false => {
                let qy = self.bin(Bin::IMul, q, y, true);
                self.bin(Bin::ISub, x, qy, false)
            }
        }
    }

    fn idiv(&mut self, a: O, b: O, recip: bool) -> O {
        let a = self.reg(a);
        let dst = self.new_v();
        self.insts.push(Inst::IDiv { dst, a, b, recip });
        O::R(dst)
    }

    /// Integer lanes are the approximations' (f32 only: the f64 ones
    /// need 64-bit conversions AVX2 lacks): with f64 lanes, the kernel
    /// does not qualify.
    fn ints(&mut self) {
        if self.elem == Elem::F64 {
            self.unsupported = true;
        }
    }
}

/// `vcmpps` predicates.
const LT_OS: i32 = 1;
const LE_OS: i32 = 2;
const EQ_OQ: i32 = 0;
const UNORD_Q: i32 = 3;
const NEQ_UQ: i32 = 4;
const GT_OS: i32 = 14;
const NGE_US: i32 = 9;
const GE_OS: i32 = 13;

impl approx::Ops for Rec {
    type V = O;
    type M = u32;
    type I = O;

    fn f64(&self) -> bool {
        self.elem == Elem::F64
    }
    fn c(&mut self, v: f64) -> O {
        O::C(self.elem.bits(v))
    }
    fn add(&mut self, a: O, b: O) -> O {
        self.bin(Bin::Add, a, b, true)
    }
    fn sub(&mut self, a: O, b: O) -> O {
        self.bin(Bin::Sub, a, b, false)
    }
    fn mul(&mut self, a: O, b: O) -> O {
        self.bin(Bin::Mul, a, b, true)
    }
    fn div(&mut self, a: O, b: O) -> O {
        self.bin(Bin::Div, a, b, false)
    }
    fn fma(&mut self, a: O, b: O, c: O) -> O {
        self.fused(false, a, b, c)
    }
    fn fnma(&mut self, a: O, b: O, c: O) -> O {
        self.fused(true, a, b, c)
    }
    fn at_least(&mut self, x: O, lo: O) -> O {
        self.bin(Bin::Max, lo, x, false)
    }
    fn at_most(&mut self, x: O, hi: O) -> O {
        self.bin(Bin::Min, hi, x, false)
    }
    fn abs(&mut self, a: O) -> O {
        let magnitude = self.elem.sign() - 1;
        self.bin(Bin::And, a, O::C(magnitude), false)
    }
    fn neg(&mut self, a: O) -> O {
        let sign = self.elem.sign();
        self.bin(Bin::Xor, a, O::C(sign), false)
    }
    fn lt(&mut self, a: O, b: O) -> u32 {
        self.cmp(LT_OS, a, b)
    }
    fn le(&mut self, a: O, b: O) -> u32 {
        self.cmp(LE_OS, a, b)
    }
    fn ge(&mut self, a: O, b: O) -> u32 {
        self.cmp(GE_OS, a, b)
    }
    fn eq(&mut self, a: O, b: O) -> u32 {
        self.cmp(EQ_OQ, a, b)
    }
    fn ult(&mut self, a: O, b: O) -> u32 {
        self.cmp(NGE_US, a, b)
    }
    fn select(&mut self, m: u32, a: O, b: O) -> O {
        self.select_bits(m, a, b)
    }
    fn bits(&mut self, a: O) -> O {
        a
    }
    fn of_bits(&mut self, i: O) -> O {
        i
    }
    fn ic(&mut self, v: i64) -> O {
        self.ints();
        O::C(u64::from(v as u32))
    }
    fn iadd(&mut self, a: O, b: O) -> O {
        self.ints();
        self.bin(Bin::IAdd, a, b, true)
    }
    fn isub(&mut self, a: O, b: O) -> O {
        self.ints();
        self.bin(Bin::ISub, a, b, false)
    }
    fn iand(&mut self, a: O, b: O) -> O {
        self.ints();
        self.bin(Bin::And, a, b, true)
    }
    fn ior(&mut self, a: O, b: O) -> O {
        self.ints();
        self.bin(Bin::Or, a, b, true)
    }
    fn ishl(&mut self, a: O, k: u32) -> O {
        self.ints();
        self.un(Un::Shl(k), a)
    }
    fn ixor(&mut self, a: O, b: O) -> O {
        self.ints();
        self.bin(Bin::Xor, a, b, true)
    }
    fn inz(&mut self, a: O) -> u32 {
        self.ints();
        let a = self.reg(a);
        let dst = self.new_m();
        self.insts.push(Inst::TestNz { dst, a });
        dst
    }
    fn iushr(&mut self, a: O, k: u32) -> O {
        self.ints();
        self.un(Un::Shr(k), a)
    }
    fn to_float(&mut self, a: O) -> O {
        self.ints();
        self.un(Un::ToFloat, a)
    }
    fn nearest(&mut self, a: O) -> O {
        self.un(Un::Round(0), a)
    }
    fn and(&mut self, a: u32, b: u32) -> u32 {
        let dst = self.new_m();
        self.insts.push(Inst::KBin {
            op: KOp::And,
            dst,
            a,
            b,
        });
        dst
    }
    fn or(&mut self, a: u32, b: u32) -> u32 {
        let dst = self.new_m();
        self.insts.push(Inst::KBin {
            op: KOp::Or,
            dst,
            a,
            b,
        });
        dst
    }
    fn not(&mut self, a: u32) -> u32 {
        let dst = self.new_m();
        self.insts.push(Inst::KNot { dst, a });
        dst
    }
    fn in_f64<F: approx::InF64>(&mut self, xs: &[O], _f: &F) -> O {
        // No f64 halves here (f32 `erf` and `pow` do not qualify).
        self.unsupported = true;
        xs.first().copied().unwrap_or(O::C(0))
    }
}

/// Whether the strides are those of a contiguous row-major array of `dims`.
fn contiguous(dims: &[usize], strides: &[i64]) -> bool {
    let mut want = 1i64;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 && s != want {
            return false;
        }
        want = want.saturating_mul(d as i64);
    }
    dims.len() == strides.len()
}

/// Byte displacement of element `offset`, if it fits an instruction.
fn disp(offset: i64, e: Elem) -> Option<i32> {
    i32::try_from(offset.checked_mul(i64::from(e.bytes()))?).ok()
}

/// Instructions after which a [`record`]ed `lean` line loads an element
/// again rather than keep it in a register.
const RELOAD_AFTER: usize = 8;

/// The kernel's nodes as a line of instructions, or `None` where it does
/// not qualify. `lean`: in [`schedule`]'s order, and a load read again
/// more than [`RELOAD_AFTER`] instructions after it is issued again (a
/// load costs no register), so that fewer values are live at once.
fn record(plan: &Plan, k: &Kernel, lean: bool) -> Option<Rec> {
    let elem = Elem::of(plan.slots[k.out].dtype)?;
    let mut rec = Rec {
        elem,
        ..Rec::default()
    };
    // The strides of a load at the element's own index: the output's, or
    // (a row sum) the rows' and columns'.
    let own: Vec<i64> = match &k.kind {
        KernelKind::Loop => {
            if k.stash.is_some() || k.dims.is_empty() || !contiguous(&k.dims, &k.out_strides) {
                return None;
            }
            rec.slot(k.out);
            k.out_strides.clone()
        }
        KernelKind::Reduce { op, reduced } => {
            let supported = match op {
                ReduceOp::Sum | ReduceOp::Max | ReduceOp::Min => true,
                ReduceOp::Prod | ReduceOp::And | ReduceOp::Or => false,
            };
            let cols = *k.dims.get(1)?;
            let own = vec![cols as i64, 1];
            if !supported
                || elem != Elem::F32
                || reduced[..] != [false, true]
                || k.out_strides[..] != [1, 0]
                || cols == 0
                || k.stash.as_ref().is_some_and(|s| {
                    s.node != k.root || s.strides != own || plan.slots[s.slot].dtype != DType::F32
                })
            {
                return None;
            }
            // The stash (stored as the value goes) first: stores go to
            // slot 0.
            if let Some(s) = &k.stash {
                rec.slot(s.slot);
            }
            rec.sums_into = Some(rec.slot(k.out));
            rec.rows = true;
            own
        }
    };
    let order: Vec<usize> = match lean {
        true => schedule(k),
        false => (0..k.nodes.len()).collect(),
    };
    let mut vals: Vec<O> = vec![O::C(0); k.nodes.len()];
    // Per load node: its last load instruction and the line's length then.
    let mut loaded: Vec<Option<(Inst, usize)>> = vec![None; k.nodes.len()];
    for &i in &order {
        let n = &k.nodes[i];
        if lean {
            for j in crate::fusion::enode_operands(n) {
                if let Some((
                    Inst::Load {
                        slot, disp, col, ..
                    },
                    at,
                )) = loaded[j]
                    && rec.insts.len() - at > RELOAD_AFTER
                {
                    let dst = rec.new_v();
                    let load = Inst::Load {
                        dst,
                        slot,
                        disp,
                        col,
                    };
                    rec.insts.push(load);
                    vals[j] = O::R(dst);
                    loaded[j] = Some((load, rec.insts.len()));
                }
            }
        }
        // Bool values are lane masks of comparisons of the lanes' type,
        // read only by selects.
        let float = elem.dtype();
        if n.dtype() != float && !matches!(n, ENode::Compare(.., d) if *d == float) {
            return None;
        }
        let v = match n {
            ENode::Load {
                slot,
                offset,
                strides,
                ..
            } => {
                let disp = disp(*offset, elem)?;
                let s = rec.slot(*slot);
                let dst = rec.new_v();
                let two_d = k.dims.len() == 2;
                let inst = if strides.iter().all(|&s| s == 0) {
                    Inst::Splat {
                        dst,
                        slot: s,
                        disp,
                        row: false,
                    }
                } else if *strides == own {
                    if rec.sums_into.is_some()
                        && rec.prefetch.is_none()
                        && let Some(d) =
                            super::wide_rows::prefetch_distance(plan, k, *slot, strides)
                    {
                        // (The displacement and the lines after it.)
                        let ahead = d.checked_add(i64::from(disp))?;
                        i32::try_from(ahead.checked_add(256)?).ok()?;
                        rec.prefetch = Some((s, i32::try_from(ahead).ok()?));
                    }
                    Inst::Load {
                        dst,
                        slot: s,
                        disp,
                        col: false,
                    }
                } else if two_d && strides[..] == [0, 1] {
                    rec.rows = true;
                    Inst::Load {
                        dst,
                        slot: s,
                        disp,
                        col: true,
                    }
                } else if two_d && strides[..] == [1, 0] {
                    rec.rows = true;
                    Inst::Splat {
                        dst,
                        slot: s,
                        disp,
                        row: true,
                    }
                } else {
                    return None;
                };
                rec.insts.push(inst);
                O::R(dst)
            }
            ENode::Const(l) => match elem {
                Elem::F32 | Elem::I32 => {
                    let b: [u8; 4] = l.bytes().get(..4)?.try_into().ok()?;
                    O::C(u64::from(u32::from_le_bytes(b)))
                }
                Elem::F64 => {
                    let b: [u8; 8] = l.bytes().get(..8)?.try_into().ok()?;
                    O::C(u64::from_le_bytes(b))
                }
            },
            ENode::Unary(u, x, _) if elem == Elem::I32 => unary_int(&mut rec, *u, vals[*x])?,
            ENode::Unary(u, x, _) => unary(&mut rec, *u, vals[*x])?,
            ENode::Binary(op, x, y, _) if elem == Elem::I32 => {
                binary_int(&mut rec, *op, vals[*x], vals[*y])?
            }
            ENode::Binary(op, x, y, _) => {
                let (x, y) = (vals[*x], vals[*y]);
                match op {
                    BinaryOp::Add => rec.bin(Bin::Add, x, y, true),
                    BinaryOp::Sub => rec.bin(Bin::Sub, x, y, false),
                    BinaryOp::Mul => rec.bin(Bin::Mul, x, y, true),
                    BinaryOp::Div => rec.bin(Bin::Div, x, y, false),
                    BinaryOp::Max => rec.max_min(true, x, y),
                    BinaryOp::Min => rec.max_min(false, x, y),
                    BinaryOp::Rem
                    | BinaryOp::Pow
                    | BinaryOp::And
                    | BinaryOp::Or
                    | BinaryOp::Xor
                    | BinaryOp::ShiftLeft
                    | BinaryOp::ShiftRightLogical
                    | BinaryOp::ShiftRightArithmetic => return None,
                }
            }
            ENode::Compare(c, x, y, _) if elem == Elem::I32 => {
                O::R(rec.compare_int(*c, vals[*x], vals[*y]))
            }
            ENode::Compare(c, x, y, _) => {
                // Cranelift's float conditions: ordered, but `ne` (true
                // where unordered).
                let pred = match c {
                    CmpOp::Eq => EQ_OQ,
                    CmpOp::Ne => NEQ_UQ,
                    CmpOp::Lt => LT_OS,
                    CmpOp::Le => LE_OS,
                    CmpOp::Gt => GT_OS,
                    CmpOp::Ge => GE_OS,
                };
                O::R(rec.cmp(pred, vals[*x], vals[*y]))
            }
            ENode::Select(p, x, y, _) => match vals[*p] {
                O::R(m) if rec.mask[m as usize] => rec.select_bits(m, vals[*x], vals[*y]),
                O::R(_) | O::C(_) => return None,
            },
            ENode::Clamp(x, lo, hi, _) if elem == Elem::I32 => {
                let m = rec.bin(Bin::IMax, vals[*x], vals[*lo], true);
                rec.bin(Bin::IMin, m, vals[*hi], true)
            }
            // max then min, each with the canonical NaN: the inline code's
            // `fmax`, `fmin` and one canonical NaN give the same bits.
            ENode::Clamp(x, lo, hi, _) => {
                let m = rec.max_min(true, vals[*x], vals[*lo]);
                rec.max_min(false, m, vals[*hi])
            }
            // A comparison counted as a number (a max's ties, a ReLU's
            // derivative): its mask selects 1 or 0, the bits the inline
            // code's mask ANDed with 1's give.
            ENode::Convert(x, DType::Bool, to) if *to == elem.dtype() => match vals[*x] {
                O::R(m) if rec.mask[m as usize] => {
                    rec.select_bits(m, O::C(elem.bits(1.0)), O::C(0))
                }
                O::R(_) | O::C(_) => return None,
            },
            // A gather's address is data: the inline code's.
            ENode::Gather { .. } | ENode::Iota { .. } | ENode::Convert(..) | ENode::Bitcast(..) => {
                return None;
            }
        };
        if let (ENode::Load { .. }, Some(inst @ Inst::Load { .. })) = (n, rec.insts.last()) {
            loaded[i] = Some((*inst, rec.insts.len()));
        }
        vals[i] = v;
    }
    if rec.unsupported {
        return None;
    }
    if let O::R(r) = vals[k.root]
        && rec.mask[r as usize]
    {
        return None;
    }
    let root = rec.reg(vals[k.root]);
    if rec.sums_into.is_none() || k.stash.is_some() {
        rec.insts.push(Inst::Store { a: root, disp: 0 });
    }
    if rec.sums_into.is_some() {
        rec.insts.push(Inst::Acc { a: root, acc: 0 });
    }
    Some(rec)
}

/// `op` of i32 lanes on the line (the interpreter's integer semantics,
/// `runtime::kernels::scalar::IntScalar`), or `None` where the line
/// cannot express it.
fn binary_int(rec: &mut Rec, op: BinaryOp, x: O, y: O) -> Option<O> {
    Some(match op {
        BinaryOp::Add => rec.bin(Bin::IAdd, x, y, true),
        BinaryOp::Sub => rec.bin(Bin::ISub, x, y, false),
        BinaryOp::Mul => rec.bin(Bin::IMul, x, y, true),
        BinaryOp::Max => rec.bin(Bin::IMax, x, y, true),
        BinaryOp::Min => rec.bin(Bin::IMin, x, y, true),
        BinaryOp::And => rec.bin(Bin::And, x, y, true),
        BinaryOp::Or => rec.bin(Bin::Or, x, y, true),
        BinaryOp::Xor => rec.bin(Bin::Xor, x, y, true),
        BinaryOp::ShiftLeft => rec.bin(Bin::Shl, x, y, false),
        BinaryOp::ShiftRightLogical => rec.bin(Bin::Shr, x, y, false),
        BinaryOp::ShiftRightArithmetic => rec.bin(Bin::Sar, x, y, false),
        BinaryOp::Div => rec.div_rem(true, x, y),
        BinaryOp::Rem => rec.div_rem(false, x, y),
        BinaryOp::Pow => return None,
    })
}

/// `u` of i32 lanes on the line, or `None` where it has no integer
/// meaning.
fn unary_int(rec: &mut Rec, u: UnaryOp, x: O) -> Option<O> {
    Some(match u {
        UnaryOp::Neg => rec.bin(Bin::ISub, O::C(0), x, false),
        UnaryOp::Abs => rec.un(Un::IAbs, x),
        UnaryOp::Square => rec.bin(Bin::IMul, x, x, true),
        UnaryOp::Not => rec.bin(Bin::Xor, x, O::C(u64::from(u32::MAX)), true),
        // -1 from the sign bit, or 1 from the sign bit of -x (`MIN`: -1).
        UnaryOp::Sign => {
            let negative = rec.un(Un::Sar(31), x);
            let minus = rec.bin(Bin::ISub, O::C(0), x, false);
            let positive = rec.un(Un::Shr(31), minus);
            rec.bin(Bin::Or, negative, positive, true)
        }
        UnaryOp::Floor
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
        | UnaryOp::IsFinite
        | UnaryOp::Reciprocal => return None,
    })
}

/// `u` of `x` on the line, or `None` where the line cannot express it.
fn unary(rec: &mut Rec, u: UnaryOp, x: O) -> Option<O> {
    let one = O::C(rec.elem.bits(1.0));
    Some(match u {
        UnaryOp::Neg => approx::Ops::neg(rec, x),
        UnaryOp::Abs => approx::Ops::abs(rec, x),
        UnaryOp::Square => approx::Ops::mul(rec, x, x),
        UnaryOp::Floor => rec.un(Un::Round(1), x),
        UnaryOp::Ceil => rec.un(Un::Round(2), x),
        UnaryOp::Round => rec.un(Un::Round(0), x),
        UnaryOp::Sqrt => rec.un(Un::Sqrt, x),
        UnaryOp::Rsqrt => {
            let s = rec.un(Un::Sqrt, x);
            rec.bin(Bin::Div, one, s, false)
        }
        UnaryOp::Reciprocal => rec.bin(Bin::Div, one, x, false),
        UnaryOp::Exp => approx::exp(rec, x),
        UnaryOp::Expm1 => approx::expm1(rec, x),
        UnaryOp::Log => approx::ln(rec, x),
        UnaryOp::Log1p => approx::log1p(rec, x),
        UnaryOp::Tanh => approx::tanh(rec, x),
        UnaryOp::Logistic => approx::logistic(rec, x),
        // A libm path for large arguments (sin, cos), f64
        // halves (erf), no f32 result (not, is_finite), or
        // selects the inline code makes another way (sign).
        UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Erf
        | UnaryOp::Sign
        | UnaryOp::Not
        | UnaryOp::IsFinite => return None,
    })
}

/// The kernel's nodes reachable from its root, each after its operands,
/// the operand with the larger tree first (Sethi–Ullman, each node
/// weighing its `fusion::node_cost`), so that a value is computed
/// close to its use instead of waiting in a register (GELU's `0.5·x`
/// through the whole `tanh`).
fn schedule(k: &Kernel) -> Vec<usize> {
    let n = k.nodes.len();
    let mut weight = vec![0u64; n];
    for (i, node) in k.nodes.iter().enumerate() {
        let own = crate::fusion::node_cost(node) as u64;
        weight[i] = crate::fusion::enode_operands(node)
            .iter()
            .fold(own, |w, &j| w.saturating_add(weight[j]));
    }
    // Depth first without recursion (a kernel may be a chain of thousands
    // of nodes): `true` once a node's operands are on the stack.
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    let mut stack = vec![(k.root, false)];
    while let Some((i, expanded)) = stack.pop() {
        if done[i] {
            continue;
        }
        if expanded {
            done[i] = true;
            out.push(i);
            continue;
        }
        stack.push((i, true));
        let mut ops = crate::fusion::enode_operands(&k.nodes[i]);
        // The heaviest is popped, so visited, first.
        ops.sort_by_key(|&j| weight[j]);
        stack.extend(ops.into_iter().filter(|&j| !done[j]).map(|j| (j, false)));
    }
    out
}

/// Vector registers.
const ZMM: [AsmRegisterZmm; 32] = [
    zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14,
    zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27,
    zmm28, zmm29, zmm30, zmm31,
];

/// Mask registers (k1 holds the tail's lanes; k0 cannot mask).
const KREG: [AsmRegisterK; 8] = [k0, k1, k2, k3, k4, k5, k6, k7];
const BODY_MASKS: std::ops::Range<u8> = 2..8;

/// Registers holding slot addresses, in order of use (the callee-saved
/// ones are pushed).
const SLOT_GPRS: [AsmRegister64; 8] = [r8, r9, r10, rbx, r12, r13, r14, r15];
const SAVED: usize = 3;

/// `z` with its writes masked by `k`.
fn masked(z: AsmRegisterZmm, k: u8) -> AsmRegisterZmm {
    match k {
        1 => z.k1(),
        2 => z.k2(),
        3 => z.k3(),
        4 => z.k4(),
        5 => z.k5(),
        6 => z.k6(),
        _ => z.k7(),
    }
}

/// How an instruction's fused multiply-add is encoded.
#[derive(Clone, Copy, Debug)]
enum FmaForm {
    /// `d = s·d + t` (`vfmadd213ps d, s, t`).
    F213,
    /// `d = d·t + s` (`vfmadd132ps d, s, t`).
    F132,
    /// `d = s·t + d` (`vfmadd231ps d, s, t`).
    F231,
}

/// A physical operand: a register, or a constant's index in the pool.
#[derive(Clone, Copy, Debug)]
enum P {
    R(u8),
    C(i32),
}

/// One instruction with physical registers.
#[derive(Clone, Copy, Debug)]
enum PInst {
    Load {
        d: u8,
        slot: usize,
        disp: i32,
        col: bool,
    },
    Splat {
        d: u8,
        slot: usize,
        disp: i32,
        row: bool,
    },
    Const {
        d: u8,
        at: i32,
    },
    Move {
        d: u8,
        s: u8,
    },
    Bin {
        op: Bin,
        d: u8,
        a: u8,
        b: P,
    },
    Un {
        op: Un,
        d: u8,
        a: u8,
    },
    Fma {
        form: FmaForm,
        /// The product negated (`vfnmadd`).
        neg: bool,
        d: u8,
        s: u8,
        t: P,
    },
    Cmp {
        pred: i32,
        d: u8,
        a: u8,
        b: P,
    },
    TestNz {
        d: u8,
        a: u8,
    },
    Blend {
        d: u8,
        m: u8,
        a: P,
        b: u8,
    },
    KBin {
        op: KOp,
        d: u8,
        a: u8,
        b: u8,
    },
    KNot {
        d: u8,
        a: u8,
    },
    ICmp {
        gt: bool,
        d: u8,
        a: u8,
        b: P,
    },
    /// `s`: two scratch registers (the same one twice with `recip`); `d`
    /// and they differ from the sources.
    IDiv {
        d: u8,
        a: u8,
        b: P,
        recip: bool,
        s: [u8; 2],
    },
    Store {
        a: u8,
        disp: i32,
    },
    /// Into the register reserved for accumulator `acc`.
    Acc {
        a: u8,
        acc: u8,
    },
}

/// The line with physical registers.
struct Phys {
    insts: Vec<PInst>,
}

/// The constants, each once, by byte offset.
#[derive(Default)]
struct Pool {
    bits: Vec<u64>,
    at: HashMap<u64, i32>,
}

impl Pool {
    /// The constant's index in the pool.
    fn at(&mut self, bits: u64) -> i32 {
        *self.at.entry(bits).or_insert_with(|| {
            self.bits.push(bits);
            (self.bits.len() - 1) as i32
        })
    }

    /// `o` with its register, or its constant's offset.
    fn operand(&mut self, o: O, reg: &[Option<u8>]) -> Option<P> {
        Some(match o {
            O::R(v) => P::R(reg[v as usize]?),
            O::C(bits) => P::C(self.at(bits)),
        })
    }
}

/// Register allocation by a linear scan over the line: a value's register
/// is free after its last read; the last `reserved` registers are the
/// accumulators'. `None` when the line needs more registers than there
/// are.
fn allocate(rec: &Rec, isa: Isa, pool: &mut Pool, reserved: u8) -> Option<Phys> {
    // Whether a value lives in a k register.
    let in_k = |v: u32| rec.mask[v as usize] && isa == Isa::Avx512;
    let n = rec.mask.len();
    let mut last = vec![usize::MAX; n];
    for (i, inst) in rec.insts.iter().enumerate() {
        for s in inst.srcs() {
            last[s as usize] = i;
        }
    }
    let mut free_z: Vec<u8> = (0..isa.vector_regs().checked_sub(reserved)?)
        .rev()
        .collect();
    let mut free_k: Vec<u8> = BODY_MASKS.rev().collect();
    let mut reg: Vec<Option<u8>> = vec![None; n];
    let mut out = Vec::with_capacity(rec.insts.len());
    for (i, inst) in rec.insts.iter().enumerate() {
        let r = |v: u32| reg[v as usize];
        let dying: Vec<u32> = {
            let mut d: Vec<u32> = inst
                .srcs()
                .into_iter()
                .filter(|&s| last[s as usize] == i)
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        };
        let release = |v: u32, free_z: &mut Vec<u8>, free_k: &mut Vec<u8>, reg: &[Option<u8>]| {
            if let Some(p) = reg[v as usize] {
                if in_k(v) {
                    free_k.push(p);
                } else {
                    free_z.push(p);
                }
            }
        };
        if let Inst::Fma { dst, a, b, c, neg } = *inst {
            // Destructive: the destination takes over a dying operand's
            // register, or a fresh one holding a copy.
            let dies = |v: u32| dying.contains(&v);
            let ra = r(a)?;
            let (d, form, s, t, taken) = match (b, c) {
                (_, O::C(_)) => {
                    if dies(a) {
                        (ra, FmaForm::F213, b, c, Some(a))
                    } else if let O::R(vb) = b
                        && dies(vb)
                    {
                        (r(vb)?, FmaForm::F213, O::R(a), c, Some(vb))
                    } else {
                        let d = free_z.pop()?;
                        out.push(PInst::Move { d, s: ra });
                        (d, FmaForm::F213, b, c, None)
                    }
                }
                (O::C(_), O::R(vc)) => {
                    if dies(a) {
                        (ra, FmaForm::F132, c, b, Some(a))
                    } else if dies(vc) {
                        (r(vc)?, FmaForm::F231, O::R(a), b, Some(vc))
                    } else {
                        let d = free_z.pop()?;
                        out.push(PInst::Move { d, s: ra });
                        (d, FmaForm::F132, c, b, None)
                    }
                }
                (O::R(vb), O::R(vc)) => {
                    if dies(a) {
                        (ra, FmaForm::F213, b, c, Some(a))
                    } else if dies(vb) {
                        (r(vb)?, FmaForm::F213, O::R(a), c, Some(vb))
                    } else if dies(vc) {
                        (r(vc)?, FmaForm::F231, O::R(a), b, Some(vc))
                    } else {
                        let d = free_z.pop()?;
                        out.push(PInst::Move { d, s: ra });
                        (d, FmaForm::F213, b, c, None)
                    }
                }
            };
            let O::R(vs) = s else {
                return None;
            };
            let s = r(vs)?;
            let t = pool.operand(t, &reg)?;
            out.push(PInst::Fma { form, neg, d, s, t });
            for v in dying {
                if Some(v) != taken {
                    release(v, &mut free_z, &mut free_k, &reg);
                }
            }
            reg[dst as usize] = Some(d);
            if last[dst as usize] == usize::MAX {
                free_z.push(d);
            }
            continue;
        }
        if let Inst::IDiv { dst, a, b, recip } = *inst {
            // The halves are written before the sources' last reads: the
            // destination and the scratch registers are taken before the
            // dying sources are released.
            let d = free_z.pop()?;
            let s0 = free_z.pop()?;
            let s1 = match recip {
                true => s0,
                false => free_z.pop()?,
            };
            out.push(PInst::IDiv {
                d,
                a: r(a)?,
                b: pool.operand(b, &reg)?,
                recip,
                s: [s0, s1],
            });
            free_z.push(s0);
            if s1 != s0 {
                free_z.push(s1);
            }
            for &v in &dying {
                release(v, &mut free_z, &mut free_k, &reg);
            }
            reg[dst as usize] = Some(d);
            if last[dst as usize] == usize::MAX {
                free_z.push(d);
            }
            continue;
        }
        // Non-destructive forms read their sources before writing: the
        // destination may reuse a dying source's register (`release` only
        // frees it; `reg` still names it for the sources below).
        for &v in &dying {
            release(v, &mut free_z, &mut free_k, &reg);
        }
        let d = match inst.dst() {
            None => 0,
            Some(dst) => {
                let m = in_k(dst);
                let d = if m { free_k.pop()? } else { free_z.pop()? };
                if last[dst as usize] == usize::MAX {
                    if m {
                        free_k.push(d);
                    } else {
                        free_z.push(d);
                    }
                }
                d
            }
        };
        let pi = match *inst {
            Inst::Load {
                slot, disp, col, ..
            } => PInst::Load { d, slot, disp, col },
            Inst::Splat {
                slot, disp, row, ..
            } => PInst::Splat { d, slot, disp, row },
            Inst::Const { bits, .. } => PInst::Const {
                d,
                at: pool.at(bits),
            },
            Inst::Bin { op, a, b, .. } => PInst::Bin {
                op,
                d,
                a: r(a)?,
                b: pool.operand(b, &reg)?,
            },
            Inst::Un { op, a, .. } => PInst::Un { op, d, a: r(a)? },
            Inst::Cmp { pred, a, b, .. } => PInst::Cmp {
                pred,
                d,
                a: r(a)?,
                b: pool.operand(b, &reg)?,
            },
            Inst::TestNz { a, .. } => PInst::TestNz { d, a: r(a)? },
            Inst::Blend { m, a, b, .. } => PInst::Blend {
                d,
                m: r(m)?,
                a: pool.operand(a, &reg)?,
                b: r(b)?,
            },
            Inst::KBin { op, a, b, .. } => PInst::KBin {
                op,
                d,
                a: r(a)?,
                b: r(b)?,
            },
            Inst::KNot { a, .. } => PInst::KNot { d, a: r(a)? },
            Inst::ICmp { gt, a, b, .. } => PInst::ICmp {
                gt,
                d,
                a: r(a)?,
                b: pool.operand(b, &reg)?,
            },
            Inst::Store { a, disp } => PInst::Store { a: r(a)?, disp },
            Inst::Acc { a, acc } if acc < reserved => PInst::Acc { a: r(a)?, acc },
            Inst::Acc { .. } | Inst::Fma { .. } | Inst::IDiv { .. } => return None,
        };
        if let Some(dst) = inst.dst() {
            reg[dst as usize] = Some(d);
        }
        out.push(pi);
    }
    Some(Phys { insts: out })
}

fn asm_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("AVX-512 kernel emission failed: {e}"))
}

/// The function: a jump over the pool, the pool, then the code —
/// prologue, the loop of whole vectors, the masked tail. The pool starts
/// 64 bytes in, on a 64-byte boundary (the function is defined 64-byte
/// aligned): AVX2 reads each constant as a 32-byte operand, and one that
/// straddles two cache lines is a split load on every use (AVX-512 reads
/// one element, which then never straddles either). With the pool first,
/// its place does not depend on the code's length, so the code is
/// assembled once.
fn emit(
    rec: &Rec,
    phys: &Phys,
    several: Option<&(i32, Phys)>,
    pool_bits: &[u64],
    frame: Frame,
    isa: Isa,
) -> Result<Native> {
    if rec.slots.len() > SLOT_GPRS.len() {
        return Err(asm_err("more slots than address registers"));
    }
    assemble(rec, phys, several, pool_bits, frame, isa)
}

/// [`emit`]'s assembly.
fn assemble(
    rec: &Rec,
    phys: &Phys,
    several: Option<&(i32, Phys)>,
    pool_bits: &[u64],
    frame: Frame,
    isa: Isa,
) -> Result<Native> {
    let e = rec.elem;
    let lanes = isa.lanes(e);
    // AVX2: after the constants, 32 bytes of ones then 32 of zeros; the
    // tail's mask is read at the right offset into them.
    let ones = pool_bits.len() as i32 * isa.entry(e);
    let pool_len = match isa {
        Isa::Avx512 => ones as usize,
        Isa::Avx2 => ones as usize + 64,
    };
    let code_at = POOL_AT + pool_len;
    let mut a = CodeAssembler::new(64).map_err(asm_err)?;
    let gprs = &SLOT_GPRS[..rec.slots.len()];
    let saved = &gprs[gprs.len().min(SAVED)..];
    let mut pool = a.create_label();
    let mut top2 = a.create_label();
    let mut top = a.create_label();
    let mut tail = a.create_label();
    let mut done = a.create_label();
    let (inner, cols, sums) = match frame {
        Frame::Kernel { inner, cols, sums } => (inner, cols, sums),
        Frame::Row { .. } => (1, None, None),
    };
    (|| -> std::result::Result<(), BodyError> {
        // The entry jumps over the pool, which starts 64 bytes in (the
        // function is defined 64-byte aligned).
        let mut jump = [0xcc_u8; POOL_AT];
        jump[0] = 0xe9;
        jump[1..5].copy_from_slice(&(code_at as i32 - 5).to_le_bytes());
        a.db(&jump)?;
        a.set_label(&mut pool)?;
        match isa {
            Isa::Avx512 => match e {
                Elem::F32 => {
                    let low: Vec<u32> = pool_bits.iter().map(|&b| b as u32).collect();
                    a.dd(&low)?
                }
                Elem::F64 | Elem::I32 => a.dq(pool_bits)?,
            },
            Isa::Avx2 => {
                for &bits in pool_bits {
                    match e {
                        Elem::F32 => a.dd(&[bits as u32; 8])?,
                        Elem::F64 => a.dq(&[bits; 4])?,
                        // An i32 lane's bits fit 32 (`div_rem`'s f64
                        // reciprocals are no integers: their exponent bits
                        // are set above).
                        Elem::I32 => match u32::try_from(bits) {
                            Ok(lane) => a.dd(&[lane; 8])?,
                            Err(_) => a.dq(&[bits; 4])?,
                        },
                    }
                }
                a.dd(&[u32::MAX; 8])?;
                a.dd(&[0; 8])?;
            }
        }
        for &g in saved {
            a.push(g)?;
        }
        match frame {
            // rdi: slot table, rdx: the loop index, rsi: its end.
            Frame::Kernel { .. } => {
                a.mov(rsi, rcx)?;
                for (&g, &s) in gprs.iter().zip(&rec.slots) {
                    a.mov(g, qword_ptr(rdi + (s * 8) as i32))?;
                }
            }
            // (op: edi, src: rsi, n: rdx, a: xmm0, b: xmm1, dst: rcx,
            // ahead: r8) → dst r8, src r9, a and b on the stack at r10,
            // ahead rcx (src where null: prefetching it is harmless), the
            // index rdx from 0 to rsi (0 where n is negative, as the Rust
            // routine reads it), steps to the next flush edi.
            Frame::Row { accs, .. } => {
                a.push(rbp)?;
                a.mov(rbp, rsp)?;
                a.sub(rsp, ROW_STACK)?;
                a.mov(r9, rsi)?;
                a.mov(rsi, rdx)?;
                a.xor(iced_x86::code_asm::edx, iced_x86::code_asm::edx)?;
                a.test(rsi, rsi)?;
                a.cmovl(rsi, rdx)?;
                a.mov(rax, r8)?;
                a.mov(r8, rcx)?;
                a.mov(rcx, rax)?;
                a.test(rcx, rcx)?;
                a.cmovz(rcx, r9)?;
                a.vmovss(dword_ptr(rsp), xmm0)?;
                a.vmovss(dword_ptr(rsp + 4), xmm1)?;
                a.mov(r10, rsp)?;
                for j in 0..accs {
                    acc_op(&mut a, isa, e, j, AccOp::Zero)?;
                    acc_op(&mut a, isa, e, j, AccOp::Spill)?;
                }
                a.mov(iced_x86::code_asm::edi, FLUSH_STEPS)?;
            }
        }
        a.lea(r11, ptr(pool))?;
        let acc = Accumulate {
            kind: sums.map_or(AccKind::Sum, |s| s.kind),
            nan: sums.map_or(0, |s| isa.acc_reg(s.accs)),
        };
        let body = |a: &mut CodeAssembler, line: &Phys, tail: bool| match isa {
            Isa::Avx512 => body512(a, line, gprs, tail, e, acc),
            Isa::Avx2 => body256(a, line, gprs, tail, ones, e, acc),
        };
        if let Some(cols) = cols {
            // Row by row (rdi: the row, rdx: the element, rcx: the column),
            // each row's last cols % lanes elements masked (the mask is the
            // same for every row).
            let rest = cols % lanes;
            if rest != 0 {
                tail_mask(&mut a, isa, e, ones, Some(rest))?;
            }
            a.mov(rdi, rdx)?;
            a.imul_3(rdx, rdx, cols)?;
            let mut row = a.create_label();
            let mut one = a.create_label();
            let mut row_end = a.create_label();
            a.set_label(&mut row)?;
            a.cmp(rdi, rsi)?;
            a.jae(done)?;
            a.xor(iced_x86::code_asm::ecx, iced_x86::code_asm::ecx)?;
            match sums {
                Some(RowReduce {
                    accs,
                    kind: AccKind::Sum,
                    ..
                }) => {
                    for j in 0..accs {
                        acc_op(&mut a, isa, e, j, AccOp::Zero)?;
                    }
                }
                Some(RowReduce {
                    accs,
                    kind: AccKind::Extreme { identity, max },
                    ..
                }) => match isa {
                    Isa::Avx512 => {
                        for j in 0..accs {
                            let r = ZMM[isa.acc_reg(j) as usize];
                            a.vbroadcastss(r, dword_ptr(r11 + identity * 4))?;
                        }
                        let n = ZMM[isa.acc_reg(accs) as usize];
                        a.vpxord(n, n, n)?;
                    }
                    Isa::Avx2 => {
                        for j in 0..accs {
                            let r = YMM[isa.acc_reg(j) as usize];
                            a.vmovups(r, ymmword_ptr(r11 + identity * 32))?;
                        }
                        let n = YMM[isa.acc_reg(accs) as usize];
                        a.vxorps(n, n, n)?;
                        // The sign bits: and-ed from all ones (max), or-ed
                        // from zeros (min).
                        let b = YMM[isa.acc_reg(accs + 1) as usize];
                        if max {
                            a.vpcmpeqd(b, b, b)?;
                        } else {
                            a.vxorps(b, b, b)?;
                        }
                    }
                },
                None => {}
            }
            if let Some((copies, line)) = several {
                a.set_label(&mut top2)?;
                a.lea(rax, ptr(rcx + copies * lanes))?;
                a.cmp(rax, cols)?;
                a.jg(one)?;
                if let Some((slot, ahead)) = rec.prefetch {
                    for line in 0..copies * isa.vector_bytes() / 64 {
                        let at = gprs[slot] + rdx * (e.bytes() as u32) + ahead + line * 64;
                        a.prefetcht1(iced_x86::code_asm::byte_ptr(at))?;
                    }
                }
                body(&mut a, line, false)?;
                a.add(rcx, copies * lanes)?;
                a.add(rdx, copies * lanes)?;
                a.jmp(top2)?;
            }
            a.set_label(&mut one)?;
            a.lea(rax, ptr(rcx + lanes))?;
            a.cmp(rax, cols)?;
            a.jg(row_end)?;
            body(&mut a, phys, false)?;
            a.add(rcx, lanes)?;
            a.add(rdx, lanes)?;
            a.jmp(one)?;
            a.set_label(&mut row_end)?;
            if rest != 0 {
                body(&mut a, phys, true)?;
                a.add(rdx, rest)?;
            }
            if let Some(RowReduce { out, accs, kind }) = sums {
                match kind {
                    AccKind::Sum => row_sum(&mut a, isa, e, accs)?,
                    AccKind::Extreme { max, .. } => row_extreme(&mut a, isa, accs, max)?,
                }
                a.vmovss(dword_ptr(gprs[out] + rdi * 4), xmm0)?;
            }
            a.add(rdi, 1)?;
            a.jmp(row)?;
        } else {
            // The flat range [begin * inner, end * inner).
            if inner != 1 {
                a.mov(rax, inner)?;
                a.imul_2(rdx, rax)?;
                a.imul_2(rsi, rax)?;
            }
            if let Some((copies, line)) = several {
                // Several vectors a step while as many are left, then one
                // at a time.
                a.set_label(&mut top2)?;
                a.lea(rax, ptr(rdx + copies * lanes))?;
                a.cmp(rax, rsi)?;
                a.ja(top)?;
                if let Frame::Row { prefetch: true, .. } = frame {
                    for line in 0..copies * isa.vector_bytes() / 64 {
                        let at = rcx + rdx * (e.bytes() as u32) + line * 64;
                        a.prefetcht1(iced_x86::code_asm::byte_ptr(at))?;
                    }
                }
                body(&mut a, line, false)?;
                a.add(rdx, copies * lanes)?;
                if let Frame::Row { accs, .. } = frame {
                    a.dec(iced_x86::code_asm::edi)?;
                    a.jnz(top2)?;
                    for j in 0..accs {
                        acc_op(&mut a, isa, e, j, AccOp::Flush)?;
                    }
                    a.mov(iced_x86::code_asm::edi, FLUSH_STEPS)?;
                }
                a.jmp(top2)?;
            }
            a.set_label(&mut top)?;
            a.lea(rax, ptr(rdx + lanes))?;
            a.cmp(rax, rsi)?;
            a.ja(tail)?;
            body(&mut a, phys, false)?;
            a.add(rdx, lanes)?;
            a.jmp(top)?;
            a.set_label(&mut tail)?;
            a.cmp(rdx, rsi)?;
            a.jae(done)?;
            tail_mask(&mut a, isa, e, ones, None)?;
            body(&mut a, phys, true)?;
        }
        a.set_label(&mut done)?;
        match frame {
            Frame::Kernel { .. } => a.xor(eax_(), eax_())?,
            Frame::Row { accs, .. } => {
                for j in 0..accs {
                    acc_op(&mut a, isa, e, j, AccOp::Gather)?;
                }
                row_sum(&mut a, isa, e, accs)?;
                a.mov(rsp, rbp)?;
                a.pop(rbp)?;
            }
        }
        a.vzeroupper()?;
        for &g in saved.iter().rev() {
            a.pop(g)?;
        }
        a.ret()?;
        Ok(())
    })()
    .map_err(asm_err)?;
    let (bytes, first_label) = encode(&a)?;
    if first_label != Some(POOL_AT) || bytes.len() < code_at {
        return Err(asm_err(format!(
            "the pool at {first_label:?}, the code at {code_at} of {} bytes",
            bytes.len()
        )));
    }
    Ok(Native {
        isa: isa.name(),
        source: "codegen/native.rs",
        bytes,
        code_at,
    })
}

/// The instructions of `a` as machine code at address 0, and where its
/// first labeled instruction starts (each function's first label is its
/// pool's). Every branch takes its near form (a 32-bit displacement) and
/// the displacements of branches and RIP-relative operands are patched
/// once every label's place is known: one pass of iced's `Encoder` over
/// the instructions, where its `BlockEncoder` boxes each instruction to
/// choose between short and near branches (a third of the cost of
/// emitting a small kernel; docs/benchmarks.md, "Compile: one encoder
/// pass").
pub(super) fn encode(a: &CodeAssembler) -> Result<(Vec<u8>, Option<usize>)> {
    let instructions = a.instructions();
    let mut enc =
        iced_x86::Encoder::try_with_capacity(64, instructions.len() * 6).map_err(asm_err)?;
    // Where each label is (CodeAssembler's labels are small ids, set as
    // the labeled instruction's `ip`), and the 32-bit displacements to
    // patch: (the field's offset, the label, the end of its instruction).
    let mut labels: Vec<(u64, usize)> = Vec::new();
    let mut patches: Vec<(usize, u64, usize)> = Vec::new();
    let mut at = 0usize;
    for ins in instructions {
        if ins.ip() != 0 {
            labels.push((ins.ip(), at));
        }
        let mut ins = *ins;
        // (The displacement field: the last 4 bytes of a near branch;
        // where the constant offsets say for a RIP-relative operand.)
        let target = if ins.op_count() == 1 && ins.op0_kind() == iced_x86::OpKind::NearBranch64 {
            let label = ins.near_branch64();
            let near = ins.code().as_near_branch();
            if near == ins.code().as_short_branch() {
                return Err(asm_err("a branch without a 32-bit form"));
            }
            ins.set_code(near);
            ins.set_near_branch64(at as u64);
            Some((label, None))
        } else if ins.is_ip_rel_memory_operand() {
            let label = ins.memory_displacement64();
            ins.set_memory_displacement64(at as u64);
            Some((label, Some(())))
        } else {
            None
        };
        let len = enc.encode(&ins, at as u64).map_err(asm_err)?;
        let end = at + len;
        match target {
            None => {}
            Some((label, None)) => patches.push((end - 4, label, end)),
            Some((label, Some(()))) => {
                let offsets = enc.get_constant_offsets();
                if offsets.displacement_size() != 4 {
                    return Err(asm_err(
                        "a RIP-relative operand without a 32-bit displacement",
                    ));
                }
                patches.push((at + offsets.displacement_offset(), label, end));
            }
        }
        at = end;
    }
    let mut bytes = enc.take_buffer();
    for (field, label, end) in patches {
        let Some(&(_, to)) = labels.iter().find(|(l, _)| *l == label) else {
            return Err(asm_err(format!("a reference to label {label}, never set")));
        };
        let rel = i32::try_from(to as i64 - end as i64).map_err(asm_err)?;
        bytes[field..field + 4].copy_from_slice(&rel.to_le_bytes());
    }
    Ok((bytes, labels.first().map(|l| l.1)))
}

/// Where the pool starts in a machine-code function.
pub(super) const POOL_AT: usize = 64;

/// What a machine-code function is.
#[derive(Clone, Copy)]
enum Frame {
    /// A kernel (the kernel ABI): `inner` elements per index of its range,
    /// row by row with `cols` columns where its loads need it; a row sum
    /// (`sums`: the slot its sums go to, and its accumulators) adds its
    /// values up row by row.
    Kernel {
        inner: i64,
        cols: Option<i32>,
        sums: Option<RowReduce>,
    },
    /// A fused row (`tl_wide_row_f32`'s signature): `accs` accumulators,
    /// `prefetch`: the lines of `ahead` prefetched as the row is read.
    Row { prefetch: bool, accs: u8 },
}

/// A row reduction's result: the slot (index into the line's) its value
/// per row goes to, its accumulators and how they combine.
#[derive(Clone, Copy)]
struct RowReduce {
    out: usize,
    accs: u8,
    kind: AccKind,
}

/// How `Acc` adds a value into its accumulator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AccKind {
    /// Added.
    Sum,
    /// Its max (min): AVX-512 by `vrangeps`; AVX2 by `maxps` (`minps`),
    /// the values' sign bits and-ed (or-ed) into the register after the
    /// NaN lanes' (`Isa::acc_reg(accs + 1)`, with a scratch register after
    /// it) to sign a zero result. Each NaN lane of the value is kept in the
    /// register after the accumulators' (`Isa::acc_reg(accs)`), which
    /// makes the row's result the canonical NaN. `identity`: the pool
    /// entry of -inf (+inf).
    Extreme { max: bool, identity: i32 },
}

/// What a body's `Acc` does: how it combines, and (a max or min) the
/// register of the NaN lanes (AVX2: the sign bits' and a scratch register
/// below it).
#[derive(Clone, Copy)]
struct Accumulate {
    kind: AccKind,
    nan: u8,
}

impl AccKind {
    /// `vrangeps`'s immediate: max or min, the sign from the comparison.
    fn range_imm(max: bool) -> i32 {
        if max { 0b0101 } else { 0b0100 }
    }
}

/// Bytes of a fused row's stack frame: `a` and `b`, then (from byte 64)
/// the accumulators' partial sums, 64 bytes each.
const ROW_STACK: i32 = 64 + 64 * MAX_COPIES as i32;

/// Steps of a fused row's loop between flushes of its accumulators into
/// their partial sums: each lane adds at most this many values before
/// its sum joins the partial's (the error of a long row's sum grows with
/// the values a lane adds in sequence).
const FLUSH_STEPS: i32 = 16;

/// What [`acc_op`] does with an accumulator.
#[derive(Clone, Copy)]
enum AccOp {
    /// Set it to zero.
    Zero,
    /// Store it as its partial sum.
    Spill,
    /// Add it into its partial sum and zero it.
    Flush,
    /// Add its partial sum into it.
    Gather,
}

/// `op` on accumulator `j` and its partial sum at `rsp + 64 + 64·j`.
fn acc_op(
    a: &mut CodeAssembler,
    isa: Isa,
    e: Elem,
    j: u8,
    op: AccOp,
) -> std::result::Result<(), BodyError> {
    let r = isa.acc_reg(j) as usize;
    let at = rsp + 64 + 64 * i32::from(j);
    match (isa, op) {
        (Isa::Avx512, AccOp::Zero) => a.vpxord(ZMM[r], ZMM[r], ZMM[r])?,
        (Isa::Avx2, AccOp::Zero) => a.vpxor(YMM[r], YMM[r], YMM[r])?,
        (Isa::Avx512, AccOp::Spill) => a.vmovups(zmmword_ptr(at), ZMM[r])?,
        (Isa::Avx2, AccOp::Spill) => a.vmovups(ymmword_ptr(at), YMM[r])?,
        (Isa::Avx512, AccOp::Gather) => {
            by_elem!(a, e, vaddps | vaddpd(ZMM[r], ZMM[r], zmmword_ptr(at)))?
        }
        (Isa::Avx2, AccOp::Gather) => {
            by_elem!(a, e, vaddps | vaddpd(YMM[r], YMM[r], ymmword_ptr(at)))?
        }
        (_, AccOp::Flush) => {
            acc_op(a, isa, e, j, AccOp::Gather)?;
            acc_op(a, isa, e, j, AccOp::Spill)?;
            acc_op(a, isa, e, j, AccOp::Zero)?;
        }
    }
    Ok(())
}

/// The sum of the `accs` accumulators' lanes into xmm0, the return
/// value: the accumulators added into the first, then its halves
/// pairwise.
fn row_sum(
    a: &mut CodeAssembler,
    isa: Isa,
    e: Elem,
    accs: u8,
) -> std::result::Result<(), BodyError> {
    if e != Elem::F32 {
        return Err(BodyError::NoForm("f64 row sum"));
    }
    let first = isa.acc_reg(0) as usize;
    for j in 1..accs {
        let r = isa.acc_reg(j) as usize;
        match isa {
            Isa::Avx512 => a.vaddps(ZMM[first], ZMM[first], ZMM[r])?,
            Isa::Avx2 => a.vaddps(YMM[first], YMM[first], YMM[r])?,
        }
    }
    match isa {
        Isa::Avx512 => {
            // (zmm16–31 have no VEX forms: the sum moves to zmm0 first.)
            a.vmovaps(zmm0, ZMM[first])?;
            a.vextractf64x4(ymm1, zmm0, 1)?;
            a.vaddps(ymm0, ymm0, ymm1)?;
        }
        Isa::Avx2 => a.vmovaps(ymm0, YMM[first])?,
    }
    fold_ymm0(a, |a, d, x, y| a.vaddps(d, x, y))?;
    Ok(())
}

type Xmm = iced_x86::code_asm::AsmRegisterXmm;

/// xmm0's first lane = `op` over ymm0's eight f32 lanes, its halves
/// pairwise (xmm1 scratch).
fn fold_ymm0(
    a: &mut CodeAssembler,
    op: impl Fn(&mut CodeAssembler, Xmm, Xmm, Xmm) -> std::result::Result<(), iced_x86::IcedError>,
) -> std::result::Result<(), iced_x86::IcedError> {
    a.vextractf128(xmm1, ymm0, 1)?;
    op(a, xmm0, xmm0, xmm1)?;
    a.vmovhlps(xmm1, xmm0, xmm0)?;
    op(a, xmm0, xmm0, xmm1)?;
    a.vmovshdup(xmm1, xmm0)?;
    op(a, xmm0, xmm0, xmm1)
}

/// xmm0 = the canonical NaN unless the flags say zero (no NaN lane seen).
fn canonical_nan_unless_zero(
    a: &mut CodeAssembler,
) -> std::result::Result<(), iced_x86::IcedError> {
    let mut no_nan = a.create_label();
    a.jz(no_nan)?;
    a.mov(eax_(), 0x7fc0_0000)?;
    a.vmovd(xmm0, eax_())?;
    a.set_label(&mut no_nan)
}

/// The max (min) of the `accs` accumulators' lanes into xmm0, or the
/// canonical NaN where the register after theirs holds a NaN lane
/// (AVX-512 only: `vrangeps`).
fn row_extreme(
    a: &mut CodeAssembler,
    isa: Isa,
    accs: u8,
    max: bool,
) -> std::result::Result<(), BodyError> {
    if isa == Isa::Avx2 {
        return row_extreme256(a, accs, max);
    }
    let imm = AccKind::range_imm(max);
    let first = ZMM[isa.acc_reg(0) as usize];
    for j in 1..accs {
        let r = ZMM[isa.acc_reg(j) as usize];
        a.vrangeps(first, first, r, imm)?;
    }
    a.vmovaps(zmm0, first)?;
    a.vextractf64x4(ymm1, zmm0, 1)?;
    a.vrangeps(ymm0, ymm0, ymm1, imm)?;
    fold_ymm0(a, |a, d, x, y| a.vrangeps(d, x, y, imm))?;
    let n = ZMM[isa.acc_reg(accs) as usize];
    a.vcmpps(k2, n, n, UNORD_Q)?;
    a.kortestw(k2, k2)?;
    canonical_nan_unless_zero(a)?;
    Ok(())
}

/// [`row_extreme`] at AVX2: the accumulators' max (min) by `maxps`
/// (`minps`), then a zero result signed from the and (or) of the values'
/// sign bits (a max that is zero had no positive value: +0 where some
/// value's sign bit was clear; a min's -0 where some was set), and the
/// canonical NaN where a NaN lane was seen.
fn row_extreme256(
    a: &mut CodeAssembler,
    accs: u8,
    max: bool,
) -> std::result::Result<(), BodyError> {
    use iced_x86::code_asm::{xmm2, xmm3, xmm4};
    let isa = Isa::Avx2;
    let first = YMM[isa.acc_reg(0) as usize];
    let (n, bits) = (
        YMM[isa.acc_reg(accs) as usize],
        YMM[isa.acc_reg(accs + 1) as usize],
    );
    for j in 1..accs {
        let r = YMM[isa.acc_reg(j) as usize];
        if max {
            a.vmaxps(first, first, r)?;
        } else {
            a.vminps(first, first, r)?;
        }
    }
    // The sign bits' and (or) into xmm2.
    a.vmovaps(ymm0, bits)?;
    if max {
        fold_ymm0(a, |a, d, x, y| a.vandps(d, x, y))?;
    } else {
        fold_ymm0(a, |a, d, x, y| a.vorps(d, x, y))?;
    }
    a.vmovaps(xmm2, xmm0)?;
    a.vmovaps(ymm0, first)?;
    if max {
        fold_ymm0(a, |a, d, x, y| a.vmaxps(d, x, y))?;
    } else {
        fold_ymm0(a, |a, d, x, y| a.vminps(d, x, y))?;
    }
    // A zero result takes the sign bit: xmm4 = the sign bit alone, xmm3
    // = (result == 0).
    a.vpcmpeqd(xmm4, xmm4, xmm4)?;
    a.vpslld(xmm4, xmm4, 31)?;
    a.vandps(xmm2, xmm2, xmm4)?;
    a.vxorps(xmm3, xmm3, xmm3)?;
    a.vcmpss(xmm3, xmm0, xmm3, EQ_OQ)?;
    a.vblendvps(xmm0, xmm0, xmm2, xmm3)?;
    a.vmovmskps(eax_(), n)?;
    a.test(eax_(), eax_())?;
    canonical_nan_unless_zero(a)?;
    Ok(())
}

/// The tail's lane mask (AVX-512: k1; AVX2: ymm15): the first `rest`
/// lanes, or (`None`) the first `rsi - rdx` (fewer than a vector).
fn tail_mask(
    a: &mut CodeAssembler,
    isa: Isa,
    e: Elem,
    ones: i32,
    rest: Option<i32>,
) -> std::result::Result<(), iced_x86::IcedError> {
    let (lanes, size) = (isa.lanes(e), e.bytes());
    match (isa, rest) {
        (Isa::Avx512, Some(rest)) => {
            a.mov(eax_(), (1i32 << rest) - 1)?;
            a.kmovw(k1, eax_())
        }
        (Isa::Avx512, None) => {
            a.mov(rcx, rsi)?;
            a.sub(rcx, rdx)?;
            a.mov(eax_(), 1)?;
            a.shl(eax_(), iced_x86::code_asm::cl)?;
            a.sub(eax_(), 1)?;
            a.kmovw(k1, eax_())
        }
        // The ones and zeros read at (lanes - lanes wanted) lanes.
        (Isa::Avx2, Some(rest)) => {
            a.vmovups(ymm15, ymmword_ptr(r11 + ones + (lanes - rest) * size))
        }
        (Isa::Avx2, None) => {
            a.mov(rax, rdx)?;
            a.sub(rax, rsi)?;
            a.add(rax, lanes)?;
            a.vmovups(ymm15, ymmword_ptr(r11 + rax * (size as u32) + ones))
        }
    }
}

/// The element a splat reads: at `base + disp`, or (`row`) at the row
/// index's element of `base + disp`.
fn splat_ptr(
    base: AsmRegister64,
    disp: i32,
    row: bool,
    e: Elem,
) -> iced_x86::code_asm::AsmMemoryOperand {
    let at = match row {
        true => base + rdi * (e.bytes() as u32) + disp,
        false => base + disp,
    };
    match e {
        Elem::F32 | Elem::I32 => dword_ptr(at),
        Elem::F64 => qword_ptr(at),
    }
}

fn eax_() -> iced_x86::code_asm::AsmRegister32 {
    iced_x86::code_asm::eax
}

/// Why a loop body could not be emitted.
enum BodyError {
    Iced(iced_x86::IcedError),
    /// The instruction has no form for these lanes.
    NoForm(&'static str),
}

impl From<iced_x86::IcedError> for BodyError {
    fn from(e: iced_x86::IcedError) -> Self {
        BodyError::Iced(e)
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Iced(e) => write!(f, "{e}"),
            BodyError::NoForm(what) => write!(f, "no {what} instruction for these lanes"),
        }
    }
}

/// The AVX-512 loop body: 16 (f32) or 8 (f64) lanes at index rdx;
/// `tail`: only the lanes of k1.
fn body512(
    a: &mut CodeAssembler,
    phys: &Phys,
    gprs: &[AsmRegister64],
    tail: bool,
    e: Elem,
    acc: Accumulate,
) -> std::result::Result<(), BodyError> {
    let (acc_kind, nan) = (acc.kind, acc.nan);
    let z = |r: u8| ZMM[r as usize];
    let kk = |r: u8| KREG[r as usize];
    let size = e.bytes();
    let entry = Isa::Avx512.entry(e);
    let c = |at: i32| match e {
        Elem::F32 | Elem::I32 => dword_bcst(r11 + at * entry),
        Elem::F64 => qword_bcst(r11 + at * entry),
    };
    for pi in &phys.insts {
        match *pi {
            PInst::Load { d, slot, disp, col } => {
                let index = if col { rcx } else { rdx };
                let m = zmmword_ptr(gprs[slot] + index * (size as u32) + disp);
                if tail {
                    by_elem!(a, e, vmovups | vmovupd(z(d).k1().z(), m))?;
                } else {
                    by_elem!(a, e, vmovups | vmovupd(z(d), m))?;
                }
            }
            PInst::Splat { d, slot, disp, row } => {
                let m = splat_ptr(gprs[slot], disp, row, e);
                by_elem!(a, e, vbroadcastss | vbroadcastsd(z(d), m))?
            }
            PInst::Const { d, at } => {
                let m = splat_ptr(r11, at * entry, false, e);
                by_elem!(a, e, vbroadcastss | vbroadcastsd(z(d), m))?
            }
            PInst::Move { d, s } => a.vmovaps(z(d), z(s))?,
            PInst::Bin { op, d, a: x, b } => {
                let (d, x) = (z(d), z(x));
                match (op, b) {
                    (Bin::Add, P::R(y)) => by_elem!(a, e, vaddps | vaddpd(d, x, z(y)))?,
                    (Bin::Add, P::C(at)) => by_elem!(a, e, vaddps | vaddpd(d, x, c(at)))?,
                    (Bin::Sub, P::R(y)) => by_elem!(a, e, vsubps | vsubpd(d, x, z(y)))?,
                    (Bin::Sub, P::C(at)) => by_elem!(a, e, vsubps | vsubpd(d, x, c(at)))?,
                    (Bin::Mul, P::R(y)) => by_elem!(a, e, vmulps | vmulpd(d, x, z(y)))?,
                    (Bin::Mul, P::C(at)) => by_elem!(a, e, vmulps | vmulpd(d, x, c(at)))?,
                    (Bin::Div, P::R(y)) => by_elem!(a, e, vdivps | vdivpd(d, x, z(y)))?,
                    (Bin::Div, P::C(at)) => by_elem!(a, e, vdivps | vdivpd(d, x, c(at)))?,
                    (Bin::IAdd, P::R(y)) => by_elem!(a, e, vpaddd | vpaddq(d, x, z(y)))?,
                    (Bin::IAdd, P::C(at)) => by_elem!(a, e, vpaddd | vpaddq(d, x, c(at)))?,
                    (Bin::ISub, P::R(y)) => by_elem!(a, e, vpsubd | vpsubq(d, x, z(y)))?,
                    (Bin::ISub, P::C(at)) => by_elem!(a, e, vpsubd | vpsubq(d, x, c(at)))?,
                    (Bin::And, P::R(y)) => by_elem!(a, e, vpandd | vpandq(d, x, z(y)))?,
                    (Bin::And, P::C(at)) => by_elem!(a, e, vpandd | vpandq(d, x, c(at)))?,
                    (Bin::Or, P::R(y)) => by_elem!(a, e, vpord | vporq(d, x, z(y)))?,
                    (Bin::Or, P::C(at)) => by_elem!(a, e, vpord | vporq(d, x, c(at)))?,
                    (Bin::Xor, P::R(y)) => by_elem!(a, e, vpxord | vpxorq(d, x, z(y)))?,
                    (Bin::Xor, P::C(at)) => by_elem!(a, e, vpxord | vpxorq(d, x, c(at)))?,
                    (Bin::Max, P::R(y)) => by_elem!(a, e, vmaxps | vmaxpd(d, x, z(y)))?,
                    (Bin::Max, P::C(at)) => by_elem!(a, e, vmaxps | vmaxpd(d, x, c(at)))?,
                    (Bin::Min, P::R(y)) => by_elem!(a, e, vminps | vminpd(d, x, z(y)))?,
                    (Bin::Min, P::C(at)) => by_elem!(a, e, vminps | vminpd(d, x, c(at)))?,
                    (Bin::IMul | Bin::IMax | Bin::IMin | Bin::Shl | Bin::Shr | Bin::Sar, _)
                        if e != Elem::I32 =>
                    {
                        return Err(BodyError::NoForm("i32"));
                    }
                    (Bin::IMul, P::R(y)) => a.vpmulld(d, x, z(y))?,
                    (Bin::IMul, P::C(at)) => a.vpmulld(d, x, c(at))?,
                    (Bin::IMax, P::R(y)) => a.vpmaxsd(d, x, z(y))?,
                    (Bin::IMax, P::C(at)) => a.vpmaxsd(d, x, c(at))?,
                    (Bin::IMin, P::R(y)) => a.vpminsd(d, x, z(y))?,
                    (Bin::IMin, P::C(at)) => a.vpminsd(d, x, c(at))?,
                    (Bin::Shl, P::R(y)) => a.vpsllvd(d, x, z(y))?,
                    (Bin::Shl, P::C(at)) => a.vpsllvd(d, x, c(at))?,
                    (Bin::Shr, P::R(y)) => a.vpsrlvd(d, x, z(y))?,
                    (Bin::Shr, P::C(at)) => a.vpsrlvd(d, x, c(at))?,
                    (Bin::Sar, P::R(y)) => a.vpsravd(d, x, z(y))?,
                    (Bin::Sar, P::C(at)) => a.vpsravd(d, x, c(at))?,
                }
            }
            PInst::Un { op, d, a: x } => {
                let (d, x) = (z(d), z(x));
                match (op, e) {
                    (Un::Sqrt, _) => by_elem!(a, e, vsqrtps | vsqrtpd(d, x))?,
                    (Un::Round(imm), _) => by_elem!(a, e, vrndscaleps | vrndscalepd(d, x, imm))?,
                    (Un::ToFloat, Elem::F32) => a.vcvtdq2ps(d, x)?,
                    (Un::ToFloat, Elem::F64 | Elem::I32) => {
                        return Err(BodyError::NoForm("i32 to f32 in these lanes"));
                    }
                    (Un::Shl(k), _) => by_elem!(a, e, vpslld | vpsllq(d, x, k as i32))?,
                    (Un::Shr(k), _) => by_elem!(a, e, vpsrld | vpsrlq(d, x, k as i32))?,
                    (Un::Sar(k), Elem::I32) => a.vpsrad(d, x, k as i32)?,
                    (Un::IAbs, Elem::I32) => a.vpabsd(d, x)?,
                    (Un::Sar(_) | Un::IAbs, Elem::F32 | Elem::F64) => {
                        return Err(BodyError::NoForm("i32"));
                    }
                }
            }
            PInst::Fma { form, neg, d, s, t } => {
                let (d, s) = (z(d), z(s));
                match (form, neg, t) {
                    (FmaForm::F213, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd213ps | vfmadd213pd(d, s, z(t)))?
                    }
                    (FmaForm::F213, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd213ps | vfmadd213pd(d, s, c(at)))?
                    }
                    (FmaForm::F132, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd132ps | vfmadd132pd(d, s, z(t)))?
                    }
                    (FmaForm::F132, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd132ps | vfmadd132pd(d, s, c(at)))?
                    }
                    (FmaForm::F231, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd231ps | vfmadd231pd(d, s, z(t)))?
                    }
                    (FmaForm::F231, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd231ps | vfmadd231pd(d, s, c(at)))?
                    }
                    (FmaForm::F213, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd213ps | vfnmadd213pd(d, s, z(t)))?
                    }
                    (FmaForm::F213, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd213ps | vfnmadd213pd(d, s, c(at)))?
                    }
                    (FmaForm::F132, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd132ps | vfnmadd132pd(d, s, z(t)))?
                    }
                    (FmaForm::F132, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd132ps | vfnmadd132pd(d, s, c(at)))?
                    }
                    (FmaForm::F231, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd231ps | vfnmadd231pd(d, s, z(t)))?
                    }
                    (FmaForm::F231, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd231ps | vfnmadd231pd(d, s, c(at)))?
                    }
                }
            }
            PInst::Cmp { pred, d, a: x, b } => match b {
                P::R(y) => by_elem!(a, e, vcmpps | vcmppd(kk(d), z(x), z(y), pred))?,
                P::C(at) => by_elem!(a, e, vcmpps | vcmppd(kk(d), z(x), c(at), pred))?,
            },
            PInst::TestNz { d, a: x } => by_elem!(a, e, vptestmd | vptestmq(kk(d), z(x), z(x)))?,
            PInst::Blend { d, m, a: x, b } => match x {
                P::R(x) => by_elem!(a, e, vblendmps | vblendmpd(masked(z(d), m), z(b), z(x)))?,
                P::C(at) => by_elem!(a, e, vblendmps | vblendmpd(masked(z(d), m), z(b), c(at)))?,
            },
            PInst::KBin { op, d, a: x, b } => match op {
                KOp::And => a.kandw(kk(d), kk(x), kk(b))?,
                KOp::Or => a.korw(kk(d), kk(x), kk(b))?,
            },
            PInst::KNot { d, a: x } => a.knotw(kk(d), kk(x))?,
            PInst::ICmp { gt, d, a: x, b } => match (gt, b) {
                (true, P::R(y)) => a.vpcmpgtd(kk(d), z(x), z(y))?,
                (true, P::C(at)) => a.vpcmpgtd(kk(d), z(x), c(at))?,
                (false, P::R(y)) => a.vpcmpeqd(kk(d), z(x), z(y))?,
                (false, P::C(at)) => a.vpcmpeqd(kk(d), z(x), c(at))?,
            },
            // Each half of the lanes to f64 (the upper one extracted into
            // the destination first), divided (or multiplied by the
            // reciprocal), truncated back; the halves joined.
            PInst::IDiv {
                d,
                a: x,
                b,
                recip,
                s: [s0, s1],
            } => {
                let y = |r: u8| YMM32[r as usize];
                let f64s = |at: i32| qword_bcst(r11 + at * 8);
                a.vextracti64x4(y(d), z(x), 1)?;
                a.vcvtdq2pd(z(d), y(d))?;
                match (recip, b) {
                    (true, P::C(at)) => {
                        a.vmulpd(z(d), z(d), f64s(at))?;
                        a.vcvttpd2dq(y(d), z(d))?;
                        a.vcvtdq2pd(z(s0), y(x))?;
                        a.vmulpd(z(s0), z(s0), f64s(at))?;
                    }
                    (false, P::R(v)) => {
                        a.vextracti64x4(y(s0), z(v), 1)?;
                        a.vcvtdq2pd(z(s0), y(s0))?;
                        a.vdivpd(z(d), z(d), z(s0))?;
                        a.vcvttpd2dq(y(d), z(d))?;
                        a.vcvtdq2pd(z(s0), y(x))?;
                        a.vcvtdq2pd(z(s1), y(v))?;
                        a.vdivpd(z(s0), z(s0), z(s1))?;
                    }
                    (true, P::R(_)) | (false, P::C(_)) => {
                        return Err(BodyError::NoForm("i32 division operand"));
                    }
                }
                a.vcvttpd2dq(y(s0), z(s0))?;
                a.vinserti64x4(z(d), z(s0), y(d), 1)?;
            }
            PInst::Store { a: x, disp } => {
                let m = zmmword_ptr(gprs[0] + rdx * (size as u32) + disp);
                if tail {
                    by_elem!(a, e, vmovups | vmovupd(m.k1(), z(x)))?;
                } else {
                    by_elem!(a, e, vmovups | vmovupd(m, z(x)))?;
                }
            }
            PInst::Acc { a: x, acc } => {
                let s = z(Isa::Avx512.acc_reg(acc));
                match (acc_kind, tail) {
                    (AccKind::Sum, true) => by_elem!(a, e, vaddps | vaddpd(s.k1(), s, z(x)))?,
                    (AccKind::Sum, false) => by_elem!(a, e, vaddps | vaddpd(s, s, z(x)))?,
                    // (k2 is free: no mask outlives the line's values,
                    // and the accumulations come last.)
                    (AccKind::Extreme { max, .. }, _) => {
                        let imm = AccKind::range_imm(max);
                        if tail {
                            a.vcmpps(k2.k1(), z(x), z(x), UNORD_Q)?;
                        } else {
                            a.vcmpps(k2, z(x), z(x), UNORD_Q)?;
                        }
                        a.vmovaps(z(nan).k2(), z(x))?;
                        if tail {
                            a.vrangeps(s.k1(), s, z(x), imm)?;
                        } else {
                            a.vrangeps(s, s, z(x), imm)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// The low halves of the zmm registers (EVEX encodes ymm16–31).
const YMM32: [AsmRegisterYmm; 32] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15, ymm16, ymm17, ymm18, ymm19, ymm20, ymm21, ymm22, ymm23, ymm24, ymm25, ymm26, ymm27,
    ymm28, ymm29, ymm30, ymm31,
];

/// The low halves of the ymm registers.
const XMM: [Xmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];

/// Vector registers of AVX2 (ymm15: the tail's mask).
const YMM: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];

/// The AVX2 loop body: 8 (f32) or 4 (f64) lanes at index rdx; `tail`:
/// only the lanes of ymm15. `ones`: the pool's offset of 32 bytes of ones
/// then 32 of zeros.
fn body256(
    a: &mut CodeAssembler,
    phys: &Phys,
    gprs: &[AsmRegister64],
    tail: bool,
    ones: i32,
    e: Elem,
    acc: Accumulate,
) -> std::result::Result<(), BodyError> {
    let (acc_kind, nan) = (acc.kind, acc.nan);
    let y = |r: u8| YMM[r as usize];
    let c = |at: i32| ymmword_ptr(r11 + at * 32);
    let size = e.bytes() as u32;
    for pi in &phys.insts {
        match *pi {
            PInst::Load { d, slot, disp, col } => {
                let index = if col { rcx } else { rdx };
                let m = ymmword_ptr(gprs[slot] + index * size + disp);
                if tail {
                    by_elem!(a, e, vmaskmovps | vmaskmovpd(y(d), ymm15, m))?;
                } else {
                    by_elem!(a, e, vmovups | vmovupd(y(d), m))?;
                }
            }
            PInst::Splat { d, slot, disp, row } => {
                let m = splat_ptr(gprs[slot], disp, row, e);
                by_elem!(a, e, vbroadcastss | vbroadcastsd(y(d), m))?
            }
            PInst::Const { d, at } => a.vmovups(y(d), c(at))?,
            PInst::Move { d, s } => a.vmovaps(y(d), y(s))?,
            PInst::Bin { op, d, a: x, b } => {
                let (d, x) = (y(d), y(x));
                match (op, b) {
                    (Bin::Add, P::R(r)) => by_elem!(a, e, vaddps | vaddpd(d, x, y(r)))?,
                    (Bin::Add, P::C(at)) => by_elem!(a, e, vaddps | vaddpd(d, x, c(at)))?,
                    (Bin::Sub, P::R(r)) => by_elem!(a, e, vsubps | vsubpd(d, x, y(r)))?,
                    (Bin::Sub, P::C(at)) => by_elem!(a, e, vsubps | vsubpd(d, x, c(at)))?,
                    (Bin::Mul, P::R(r)) => by_elem!(a, e, vmulps | vmulpd(d, x, y(r)))?,
                    (Bin::Mul, P::C(at)) => by_elem!(a, e, vmulps | vmulpd(d, x, c(at)))?,
                    (Bin::Div, P::R(r)) => by_elem!(a, e, vdivps | vdivpd(d, x, y(r)))?,
                    (Bin::Div, P::C(at)) => by_elem!(a, e, vdivps | vdivpd(d, x, c(at)))?,
                    (Bin::IAdd, P::R(r)) => by_elem!(a, e, vpaddd | vpaddq(d, x, y(r)))?,
                    (Bin::IAdd, P::C(at)) => by_elem!(a, e, vpaddd | vpaddq(d, x, c(at)))?,
                    (Bin::ISub, P::R(r)) => by_elem!(a, e, vpsubd | vpsubq(d, x, y(r)))?,
                    (Bin::ISub, P::C(at)) => by_elem!(a, e, vpsubd | vpsubq(d, x, c(at)))?,
                    (Bin::And, P::R(r)) => a.vpand(d, x, y(r))?,
                    (Bin::And, P::C(at)) => a.vpand(d, x, c(at))?,
                    (Bin::Or, P::R(r)) => a.vpor(d, x, y(r))?,
                    (Bin::Or, P::C(at)) => a.vpor(d, x, c(at))?,
                    (Bin::Xor, P::R(r)) => a.vpxor(d, x, y(r))?,
                    (Bin::Xor, P::C(at)) => a.vpxor(d, x, c(at))?,
                    (Bin::Max, P::R(r)) => by_elem!(a, e, vmaxps | vmaxpd(d, x, y(r)))?,
                    (Bin::Max, P::C(at)) => by_elem!(a, e, vmaxps | vmaxpd(d, x, c(at)))?,
                    (Bin::Min, P::R(r)) => by_elem!(a, e, vminps | vminpd(d, x, y(r)))?,
                    (Bin::Min, P::C(at)) => by_elem!(a, e, vminps | vminpd(d, x, c(at)))?,
                    (Bin::IMul | Bin::IMax | Bin::IMin | Bin::Shl | Bin::Shr | Bin::Sar, _)
                        if e != Elem::I32 =>
                    {
                        return Err(BodyError::NoForm("i32"));
                    }
                    (Bin::IMul, P::R(r)) => a.vpmulld(d, x, y(r))?,
                    (Bin::IMul, P::C(at)) => a.vpmulld(d, x, c(at))?,
                    (Bin::IMax, P::R(r)) => a.vpmaxsd(d, x, y(r))?,
                    (Bin::IMax, P::C(at)) => a.vpmaxsd(d, x, c(at))?,
                    (Bin::IMin, P::R(r)) => a.vpminsd(d, x, y(r))?,
                    (Bin::IMin, P::C(at)) => a.vpminsd(d, x, c(at))?,
                    (Bin::Shl, P::R(r)) => a.vpsllvd(d, x, y(r))?,
                    (Bin::Shl, P::C(at)) => a.vpsllvd(d, x, c(at))?,
                    (Bin::Shr, P::R(r)) => a.vpsrlvd(d, x, y(r))?,
                    (Bin::Shr, P::C(at)) => a.vpsrlvd(d, x, c(at))?,
                    (Bin::Sar, P::R(r)) => a.vpsravd(d, x, y(r))?,
                    (Bin::Sar, P::C(at)) => a.vpsravd(d, x, c(at))?,
                }
            }
            PInst::Un { op, d, a: x } => {
                let (d, x) = (y(d), y(x));
                match (op, e) {
                    (Un::Sqrt, _) => by_elem!(a, e, vsqrtps | vsqrtpd(d, x))?,
                    (Un::Round(imm), _) => by_elem!(a, e, vroundps | vroundpd(d, x, imm))?,
                    (Un::ToFloat, Elem::F32) => a.vcvtdq2ps(d, x)?,
                    (Un::ToFloat, Elem::F64 | Elem::I32) => {
                        return Err(BodyError::NoForm("i32 to f32 in these lanes"));
                    }
                    (Un::Shl(k), _) => by_elem!(a, e, vpslld | vpsllq(d, x, k as i32))?,
                    (Un::Shr(k), _) => by_elem!(a, e, vpsrld | vpsrlq(d, x, k as i32))?,
                    (Un::Sar(k), Elem::I32) => a.vpsrad(d, x, k as i32)?,
                    (Un::IAbs, Elem::I32) => a.vpabsd(d, x)?,
                    (Un::Sar(_) | Un::IAbs, Elem::F32 | Elem::F64) => {
                        return Err(BodyError::NoForm("i32"));
                    }
                }
            }
            PInst::Fma { form, neg, d, s, t } => {
                let (d, s) = (y(d), y(s));
                match (form, neg, t) {
                    (FmaForm::F213, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd213ps | vfmadd213pd(d, s, y(t)))?
                    }
                    (FmaForm::F213, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd213ps | vfmadd213pd(d, s, c(at)))?
                    }
                    (FmaForm::F132, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd132ps | vfmadd132pd(d, s, y(t)))?
                    }
                    (FmaForm::F132, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd132ps | vfmadd132pd(d, s, c(at)))?
                    }
                    (FmaForm::F231, false, P::R(t)) => {
                        by_elem!(a, e, vfmadd231ps | vfmadd231pd(d, s, y(t)))?
                    }
                    (FmaForm::F231, false, P::C(at)) => {
                        by_elem!(a, e, vfmadd231ps | vfmadd231pd(d, s, c(at)))?
                    }
                    (FmaForm::F213, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd213ps | vfnmadd213pd(d, s, y(t)))?
                    }
                    (FmaForm::F213, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd213ps | vfnmadd213pd(d, s, c(at)))?
                    }
                    (FmaForm::F132, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd132ps | vfnmadd132pd(d, s, y(t)))?
                    }
                    (FmaForm::F132, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd132ps | vfnmadd132pd(d, s, c(at)))?
                    }
                    (FmaForm::F231, true, P::R(t)) => {
                        by_elem!(a, e, vfnmadd231ps | vfnmadd231pd(d, s, y(t)))?
                    }
                    (FmaForm::F231, true, P::C(at)) => {
                        by_elem!(a, e, vfnmadd231ps | vfnmadd231pd(d, s, c(at)))?
                    }
                }
            }
            PInst::Cmp { pred, d, a: x, b } => match b {
                P::R(r) => by_elem!(a, e, vcmpps | vcmppd(y(d), y(x), y(r), pred))?,
                P::C(at) => by_elem!(a, e, vcmpps | vcmppd(y(d), y(x), c(at), pred))?,
            },
            PInst::TestNz { d, a: x } => {
                // Not (x == 0).
                let zeros = ymmword_ptr(r11 + ones + 32);
                by_elem!(a, e, vpcmpeqd | vpcmpeqq(y(d), y(x), zeros))?;
                a.vpxor(y(d), y(d), ymmword_ptr(r11 + ones))?;
            }
            PInst::Blend { d, m, a: x, b } => match x {
                P::R(x) => by_elem!(a, e, vblendvps | vblendvpd(y(d), y(b), y(x), y(m)))?,
                P::C(at) => by_elem!(a, e, vblendvps | vblendvpd(y(d), y(b), c(at), y(m)))?,
            },
            PInst::KBin { op, d, a: x, b } => match op {
                KOp::And => a.vpand(y(d), y(x), y(b))?,
                KOp::Or => a.vpor(y(d), y(x), y(b))?,
            },
            PInst::KNot { d, a: x } => a.vpxor(y(d), y(x), ymmword_ptr(r11 + ones))?,
            PInst::ICmp { gt, d, a: x, b } => match (gt, b) {
                (true, P::R(r)) => a.vpcmpgtd(y(d), y(x), y(r))?,
                (true, P::C(at)) => a.vpcmpgtd(y(d), y(x), c(at))?,
                (false, P::R(r)) => a.vpcmpeqd(y(d), y(x), y(r))?,
                (false, P::C(at)) => a.vpcmpeqd(y(d), y(x), c(at))?,
            },
            // As at AVX-512, on halves of four lanes.
            PInst::IDiv {
                d,
                a: x,
                b,
                recip,
                s: [s0, s1],
            } => {
                let h = |r: u8| XMM[r as usize];
                a.vextracti128(h(d), y(x), 1)?;
                a.vcvtdq2pd(y(d), h(d))?;
                match (recip, b) {
                    (true, P::C(at)) => {
                        a.vmulpd(y(d), y(d), c(at))?;
                        a.vcvttpd2dq(h(d), y(d))?;
                        a.vcvtdq2pd(y(s0), h(x))?;
                        a.vmulpd(y(s0), y(s0), c(at))?;
                    }
                    (false, P::R(v)) => {
                        a.vextracti128(h(s0), y(v), 1)?;
                        a.vcvtdq2pd(y(s0), h(s0))?;
                        a.vdivpd(y(d), y(d), y(s0))?;
                        a.vcvttpd2dq(h(d), y(d))?;
                        a.vcvtdq2pd(y(s0), h(x))?;
                        a.vcvtdq2pd(y(s1), h(v))?;
                        a.vdivpd(y(s0), y(s0), y(s1))?;
                    }
                    (true, P::R(_)) | (false, P::C(_)) => {
                        return Err(BodyError::NoForm("i32 division operand"));
                    }
                }
                a.vcvttpd2dq(h(s0), y(s0))?;
                a.vinserti128(y(d), y(s0), h(d), 1)?;
            }
            PInst::Store { a: x, disp } => {
                let m = ymmword_ptr(gprs[0] + rdx * size + disp);
                if tail {
                    by_elem!(a, e, vmaskmovps | vmaskmovpd(m, ymm15, y(x)))?;
                } else {
                    by_elem!(a, e, vmovups | vmovupd(m, y(x)))?;
                }
            }
            PInst::Acc { a: x, acc } => {
                let s = y(Isa::Avx2.acc_reg(acc));
                match acc_kind {
                    AccKind::Sum => {
                        if tail {
                            // The value's last read: its lanes past the
                            // tail zeroed in place.
                            a.vandps(y(x), y(x), ymm15)?;
                        }
                        by_elem!(a, e, vaddps | vaddpd(s, s, y(x)))?;
                    }
                    // `maxps` (`minps`) keeps the accumulator where the
                    // value is NaN and takes either zero of a tie; the
                    // value's NaN lanes are or-ed into the register after
                    // the accumulators and its bits and-ed (or-ed) into
                    // the next, which `row_extreme` applies at the row's
                    // end. (The third is scratch: the lanes past the tail
                    // become the identity, and the comparison's mask.)
                    AccKind::Extreme { max, identity } => {
                        let (n, bits, scratch) = (y(nan), y(nan - 1), y(nan - 2));
                        if tail {
                            a.vandnps(scratch, ymm15, c(identity))?;
                            a.vandps(y(x), y(x), ymm15)?;
                            a.vorps(y(x), y(x), scratch)?;
                        }
                        a.vcmpps(scratch, y(x), y(x), UNORD_Q)?;
                        a.vorps(n, n, scratch)?;
                        if max {
                            a.vandps(bits, bits, y(x))?;
                            a.vmaxps(s, y(x), s)?;
                        } else {
                            a.vorps(bits, bits, y(x))?;
                            a.vminps(s, y(x), s)?;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test")]
mod tests {
    use super::*;

    /// `f` of one contiguous load, stored, as a recorded line.
    fn line(f: fn(&mut Rec, O) -> O) -> Rec {
        line_of(Elem::F32, f)
    }

    /// [`line`] on lanes of `elem`.
    fn line_of(elem: Elem, f: fn(&mut Rec, O) -> O) -> Rec {
        let mut rec = Rec {
            elem,
            ..Rec::default()
        };
        rec.slot(0);
        let slot = rec.slot(1);
        let dst = rec.new_v();
        rec.insts.push(Inst::Load {
            dst,
            slot,
            disp: 0,
            col: false,
        });
        let y = f(&mut rec, O::R(dst));
        let a = rec.reg(y);
        rec.insts.push(Inst::Store { a, disp: 0 });
        rec
    }

    /// Both emitters assemble `exp` and `tanh` whatever the host (the
    /// AVX-512 one is otherwise exercised only on AVX-512 hosts), their
    /// bounds as `vmaxps`/`vminps` (`tanh`'s ceiling on |x| a `vminps`)
    /// and `tanh`'s negated product as `vfnmadd` in the listing, and no
    /// compare left.
    #[test]
    fn bounds_and_negated_products_assemble_at_both_levels() {
        let exp: fn(&mut Rec, O) -> O = |r, x| approx::exp(r, x);
        let tanh: fn(&mut Rec, O) -> O = |r, x| approx::tanh(r, x);
        for isa in [Isa::Avx512, Isa::Avx2] {
            for (name, f, want) in [
                ("exp", exp, &["vmaxps", "vminps"][..]),
                ("tanh", tanh, &["vminps", "vfnmadd"][..]),
            ] {
                let rec = line(f);
                let mut pool = Pool::default();
                let phys = allocate(&rec, isa, &mut pool, 0).unwrap();
                let several = interleave(&rec, isa.vector_bytes(), 2)
                    .and_then(|l| Some((2, allocate(&l, isa, &mut pool, 0)?)));
                let frame = Frame::Kernel {
                    inner: 1,
                    cols: None,
                    sums: None,
                };
                let native = emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).unwrap();
                let text = &Native::listing(&native.bytes, native.code_at);
                for w in want {
                    assert!(text.contains(w), "{name} at {}: no {w}\n{text}", isa.name());
                }
                assert!(!text.contains("vcmp"), "{name} at {}\n{text}", isa.name());
            }
        }
    }

    /// Row sums and maxima assemble at both levels whatever the host:
    /// accumulators zeroed (set to -inf) at each row, summed (maxed) at
    /// its end and stored, the masked last vector added (maxed) under its
    /// mask; a max's NaN lanes set aside (AVX2: its sign bits too).
    #[test]
    fn row_reductions_assemble() {
        // (slot 0 unused, 1 the operand, 2 the sums)
        let mut sum = line(|_, x| x);
        if let Some(Inst::Store { a, .. }) = sum.insts.pop() {
            sum.insts.push(Inst::Acc { a, acc: 0 });
        }
        sum.slots.push(7);
        sum.rows = true;
        sum.sums_into = Some(2);
        let cases: [(Isa, bool, &[&str]); 4] = [
            (
                Isa::Avx512,
                false,
                &["vaddps zmm31{k1}", "vextractf64x4", "vmovss"],
            ),
            (Isa::Avx2, false, &["vandps", "vextractf128", "vmovss"]),
            (
                Isa::Avx512,
                true,
                &[
                    "vrangeps zmm31{k1}",
                    "vcmpunordps k2{k1}",
                    "kortestw",
                    "vrangeps xmm0",
                    "vmovss",
                ],
            ),
            (
                Isa::Avx2,
                true,
                &[
                    "vandnps",
                    "vcmpunordps",
                    "vmaxps ymm14",
                    "vpcmpeqd",
                    "vblendvps",
                    "vmovmskps",
                ],
            ),
        ];
        for (isa, max, want) in cases {
            let mut pool = Pool::default();
            let kind = match max {
                true => AccKind::Extreme {
                    max: true,
                    identity: pool.at(u64::from(f32::NEG_INFINITY.to_bits())),
                },
                false => AccKind::Sum,
            };
            let phys = allocate(&sum, isa, &mut pool, 4).unwrap();
            let frame = Frame::Kernel {
                inner: 100,
                cols: Some(100),
                sums: Some(RowReduce {
                    out: 2,
                    accs: 1,
                    kind,
                }),
            };
            let native = emit(&sum, &phys, None, &pool.bits, frame, isa).unwrap();
            let text = &Native::listing(&native.bytes, native.code_at);
            for w in want {
                assert!(
                    text.contains(w),
                    "max {max} at {}: no {w}\n{text}",
                    isa.name()
                );
            }
        }
    }

    /// f64 lines assemble at both levels whatever the host: `pd` forms,
    /// 8-byte elements, 64-bit constants (AVX-512: `{1to8}`) and masks;
    /// the f64 approximations (64-bit integer lanes) do not qualify.
    #[test]
    fn f64_lines_assemble_at_both_levels() {
        use approx::Ops;
        let arith: fn(&mut Rec, O) -> O = |r, x| {
            let c = r.c(1.5);
            let y = r.mul(x, c);
            let m = r.max_min(true, y, x);
            let s = r.abs(m);
            let n = r.neg(s);
            r.div(n, x)
        };
        for isa in [Isa::Avx512, Isa::Avx2] {
            let rec = line_of(Elem::F64, arith);
            assert!(!rec.unsupported);
            let mut pool = Pool::default();
            let phys = allocate(&rec, isa, &mut pool, 0).unwrap();
            assert!(pool.bits.contains(&1.5f64.to_bits()), "{:x?}", pool.bits);
            assert!(pool.bits.contains(&(1u64 << 63)), "{:x?}", pool.bits);
            let several = interleave(&rec, isa.vector_bytes(), 2)
                .and_then(|l| Some((2, allocate(&l, isa, &mut pool, 0)?)));
            let frame = Frame::Kernel {
                inner: 1,
                cols: None,
                sums: None,
            };
            let native = emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).unwrap();
            let text = &Native::listing(&native.bytes, native.code_at);
            for w in [
                "vmulpd",
                "vmaxpd",
                "vcmpunordpd",
                "vdivpd",
                "vmovupd",
                "*8]",
            ] {
                assert!(text.contains(w), "{}: no {w}\n{text}", isa.name());
            }
            for w in [
                "vmulps",
                "vmaxps",
                "vcmpunordps",
                "vdivps",
                "blendvps",
                "dword",
            ] {
                assert!(!text.contains(w), "{}: {w}\n{text}", isa.name());
            }
            if isa == Isa::Avx512 {
                assert!(text.contains("1to8"), "{text}");
            }
        }
        let exp = line_of(Elem::F64, approx::exp);
        assert!(exp.unsupported);
    }

    /// `encode` lays the instructions out in order, branches in their
    /// near forms, and points each branch and RIP-relative operand at its
    /// label, backwards and forwards past what a short branch reaches; a
    /// branch to a label never set is an error.
    #[test]
    fn encode_resolves_labels() {
        let mut a = CodeAssembler::new(64).unwrap();
        let (mut pool, mut top, mut end) = (a.create_label(), a.create_label(), a.create_label());
        a.db(&[0xcc; POOL_AT]).unwrap();
        a.set_label(&mut pool).unwrap();
        a.dd(&[1, 2, 3, 4]).unwrap();
        a.set_label(&mut top).unwrap();
        a.lea(r11, ptr(pool)).unwrap();
        a.jz(end).unwrap();
        for _ in 0..40 {
            a.vaddps(zmm0, zmm0, zmm1).unwrap();
        }
        a.jmp(top).unwrap();
        a.set_label(&mut end).unwrap();
        a.ret().unwrap();
        let (bytes, first) = encode(&a).unwrap();
        assert_eq!(first, Some(POOL_AT));
        let top_at = (POOL_AT + 16) as u64;
        let decoded: Vec<iced_x86::Instruction> =
            Decoder::with_ip(64, &bytes[POOL_AT + 16..], top_at, DecoderOptions::NONE)
                .into_iter()
                .collect();
        let ret_at = decoded.last().unwrap().ip();
        assert_eq!(decoded[0].ip_rel_memory_address(), POOL_AT as u64);
        assert_eq!(decoded[1].near_branch_target(), ret_at);
        assert_eq!(decoded[1].len(), 6, "jz rel32");
        let jmp = &decoded[decoded.len() - 2];
        assert_eq!(jmp.near_branch_target(), top_at);
        assert!(ret_at - top_at > 200, "past a short branch's reach");

        let mut b = CodeAssembler::new(64).unwrap();
        let nowhere = b.create_label();
        b.jmp(nowhere).unwrap();
        b.ret().unwrap();
        assert!(encode(&b).is_err());
    }

    /// i32 lines assemble at both levels whatever the host: integer forms
    /// only, a division by a vector through f64 halves (`vdivpd`), one by a
    /// constant as a product by its f64 reciprocal (AVX-512: `{1to8}` from
    /// the pool's 8-byte entries), integer compares, shifts by lanes.
    #[test]
    fn i32_lines_assemble_at_both_levels() {
        let ints: fn(&mut Rec, O) -> O = |r, x| {
            let q = r.div_rem(true, x, O::C(7));
            let m = r.div_rem(false, q, x);
            let s = r.bin(Bin::Sar, m, x, false);
            let a = r.un(Un::IAbs, s);
            let lt = r.compare_int(CmpOp::Lt, a, x);
            r.select_bits(lt, x, a)
        };
        for isa in [Isa::Avx512, Isa::Avx2] {
            let rec = line_of(Elem::I32, ints);
            assert!(!rec.unsupported);
            let mut pool = Pool::default();
            let phys = allocate(&rec, isa, &mut pool, 0).unwrap();
            assert!(
                pool.bits.contains(&(1.0f64 / 7.0).to_bits()),
                "{:x?}",
                pool.bits
            );
            let several = interleave(&rec, isa.vector_bytes(), 2)
                .and_then(|l| Some((2, allocate(&l, isa, &mut pool, 0)?)));
            assert!(several.is_some(), "{}", isa.name());
            let frame = Frame::Kernel {
                inner: 1,
                cols: None,
                sums: None,
            };
            let native = emit(&rec, &phys, several.as_ref(), &pool.bits, frame, isa).unwrap();
            let text = &Native::listing(&native.bytes, native.code_at);
            let (extract, insert) = match isa {
                Isa::Avx512 => ("vextracti64x4", "vinserti64x4"),
                Isa::Avx2 => ("vextracti128", "vinserti128"),
            };
            for w in [
                "vcvtdq2pd",
                "vdivpd",
                "vmulpd",
                "vcvttpd2dq",
                extract,
                insert,
                "vpmulld",
                "vpcmpgtd",
                "vpcmpeqd",
                "vpsravd",
                "vpabsd",
            ] {
                assert!(text.contains(w), "{}: no {w}\n{text}", isa.name());
            }
            for w in ["vaddps", "vmulps", "vdivps", "vcmp"] {
                assert!(!text.contains(w), "{}: {w}\n{text}", isa.name());
            }
            if isa == Isa::Avx512 {
                assert!(text.contains("1to8"), "{text}");
            }
        }
    }

    /// A fused row assembles at both levels whatever the host: `exp` of
    /// `(x - a)·b` stored and summed, each vector of a step into its own
    /// accumulator (AVX-512: the tail's through k1; AVX2: its lanes past
    /// the end zeroed first), the accumulators flushed into their partial
    /// sums, the next block prefetched, the sum returned in xmm0; `erf`
    /// (f64 halves) does not qualify.
    #[test]
    fn fused_rows_assemble_at_both_levels() {
        for isa in [Isa::Avx512, Isa::Avx2] {
            let rec = record_row(Some(UnaryOp::Exp), true).unwrap();
            let mut pool = Pool::default();
            let phys = allocate(&rec, isa, &mut pool, 2).unwrap();
            let line = interleave(&rec, isa.vector_bytes(), 2).unwrap();
            let several = (2, allocate(&line, isa, &mut pool, 2).unwrap());
            let frame = Frame::Row {
                prefetch: true,
                accs: 2,
            };
            let native = emit(&rec, &phys, Some(&several), &pool.bits, frame, isa).unwrap();
            let text = &Native::listing(&native.bytes, native.code_at);
            let (acc0, acc1, tail) = match isa {
                Isa::Avx512 => ("vaddps zmm31,zmm31,", "vaddps zmm30,zmm30,", "zmm31{k1}"),
                Isa::Avx2 => ("vaddps ymm14,ymm14,", "vaddps ymm13,ymm13,", "ymm15"),
            };
            for w in [
                acc0,
                acc1,
                tail,
                "prefetcht1",
                "vmovups [r8+rdx*4",
                "vmovshdup xmm1,xmm0",
                "vaddps xmm0,xmm0,xmm1",
            ] {
                assert!(text.contains(w), "{}: no {w}\n{text}", isa.name());
            }
        }
        assert!(record_row(Some(UnaryOp::Erf), false).is_none());
    }
}

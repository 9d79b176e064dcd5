//! Transposes of 4- and 8-byte elements as AVX-512 machine code
//! (iced-x86's assembler), for plain copies whose two innermost loop dims
//! are a 16×16 tile, the operand contiguous along the first and the output
//! along the second: the kernels `tile` made of a transposed copy, and any
//! other copy of that shape (a `[n, 16, 16]` transpose, a row group's
//! member, a GEMM's epilogue), each as correct as a copy.
//!
//! A tile of 4-byte elements is sixteen 64-byte loads, one cache line of
//! each of sixteen operand rows, a 16×16 transpose in registers (four
//! rounds of sixteen shuffles) and sixteen 64-byte stores, one line of
//! each of sixteen output rows; a tile of 8-byte elements is four such
//! blocks of 8×8 (three rounds of eight shuffles). Every line is touched
//! once. Cranelift's code (128-bit vectors, `codegen::loops`) moves the
//! tile as 4×4 (2×2) blocks and comes back to each line four times,
//! and when the rows are a power of two apart (4 KiB) all sixteen
//! fall in one set of the L1 cache, which does not hold them until the
//! last visit. An output of the program (or a value handed to a callback)
//! of [`STREAM_MIN_BYTES`] or more that no step of the program reads is
//! written with non-temporal stores: a streamed line is not read from
//! memory before it is overwritten (the stores need 64-byte aligned lines;
//! a kernel whose output is not aligned when it runs takes the plain
//! stores). docs/benchmarks.md, "Transposes as machine code".
//!
//! The function has the kernel ABI (`mod.rs`) and the layout of
//! `native`'s functions (a jump over an empty pool), so dumps list it the
//! same way.

use iced_x86::code_asm::{
    AsmRegister64, AsmRegisterZmm, CodeAssembler, qword_ptr, r8, r9, r10, r11, rax, rcx, rdi, rdx,
    rsi, zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13,
    zmm14, zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26,
    zmm27, zmm28, zmm29, zmm30, zmm31, zmmword_ptr,
};
use tensorlift_ir::{Error, Result};

use super::JitOptions;
use super::native::{Native, POOL_AT};
use crate::fusion::{ENode, Kernel, KernelKind, Plan, SlotKind};

/// Side of a tile (16 lanes of 4 bytes: a cache line per row).
const SIDE: usize = 16;

/// Outputs of this many bytes or more are streamed (non-temporal stores):
/// a quarter of a 32 MiB last-level cache, past which a reader would
/// mostly not find the lines in cache anyway.
const STREAM_MIN_BYTES: usize = 8 << 20;

/// Loop dims outside the tile the emitter takes (one counter register
/// each).
const MAX_OUTER: usize = 4;

/// Counters of the outer loops, outermost first (rsi and rdi are free
/// once the slot addresses are loaded).
const COUNTERS: [AsmRegister64; MAX_OUTER] = [r10, r11, rsi, rdi];

const ZMM: [AsmRegisterZmm; 32] = [
    zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14,
    zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27,
    zmm28, zmm29, zmm30, zmm31,
];

/// A qualifying kernel's layout, in bytes.
#[derive(Debug)]
struct Layout {
    /// Bytes an element.
    esize: usize,
    /// Operand and output slots.
    src: usize,
    dst: usize,
    /// The operand's first element.
    offset: i64,
    /// The loops outside the tile: (count, operand step, output step).
    outer: Vec<(usize, i64, i64)>,
    /// Operand bytes between the tile's rows (its second dim), and output
    /// bytes between its rows (its first).
    src_row: i64,
    dst_row: i64,
    /// Whether the output is streamed.
    stream: bool,
}

/// `k` as AVX-512 machine code, or `None` where it is not a transposed
/// copy of 4- or 8-byte elements in 16×16 tiles or the host or options
/// rule it out.
pub(super) fn compile(plan: &Plan, k: &Kernel, opts: &JitOptions) -> Result<Option<Native>> {
    if !opts.vectorize || !crate::isa::has_avx512() {
        return Ok(None);
    }
    let Some(layout) = layout(plan, k) else {
        return Ok(None);
    };
    let Some(order) = network_order(layout.esize) else {
        return Ok(None);
    };
    assemble(&layout, &order).map(Some)
}

/// The layout of `k` when it qualifies.
fn layout(plan: &Plan, k: &Kernel) -> Option<Layout> {
    let [
        ENode::Load {
            slot,
            dtype,
            offset,
            strides,
        },
    ] = k.nodes.as_slice()
    else {
        return None;
    };
    let r = k.dims.len();
    let out = plan.slots.get(k.out)?;
    if !matches!(k.kind, KernelKind::Loop)
        || k.stash.is_some()
        || !matches!(dtype.size(), 4 | 8)
        || out.dtype.size() != dtype.size()
        || !(3..=MAX_OUTER + 2).contains(&r)
        || k.dims.contains(&0)
        || k.dims[r - 2] != SIDE
        || k.dims[r - 1] != SIDE
        || strides[r - 2] != 1
        || k.out_strides[r - 1] != 1
    {
        return None;
    }
    let esize = dtype.size();
    let bytes = |e: i64| e.checked_mul(esize as i64);
    let (src_row, dst_row) = (bytes(strides[r - 1])?, bytes(k.out_strides[r - 2])?);
    // Every load and store of a tile addresses its base plus an
    // instruction's displacement: up to fifteen rows away, plus a line
    // for the second block of an 8-byte tile.
    let reach = |step: i64| {
        let far = step.checked_mul(SIDE as i64 - 1)?;
        i32::try_from(far).ok()?;
        i32::try_from(far.checked_add(64)?).ok()
    };
    reach(src_row)?;
    reach(dst_row)?;
    let outer = (0..r - 2)
        .map(|d| Some((k.dims[d], bytes(strides[d])?, bytes(k.out_strides[d])?)))
        .collect::<Option<Vec<_>>>()?;
    // Streamed: a value leaving the program that no step of it reads (it
    // would read the streamed lines back from memory), written in whole
    // lines when the output's base is (every output step a multiple of a
    // line).
    let leaves = matches!(out.kind, SlotKind::Output | SlotKind::HandOff { .. })
        && !plan
            .steps
            .iter()
            .any(|s| crate::fusion::step_slots(s).0.contains(&k.out));
    let lines = dst_row % 64 == 0 && outer.iter().all(|o| o.2 % 64 == 0);
    Some(Layout {
        src: *slot,
        dst: k.out,
        esize,
        offset: bytes(*offset)?,
        outer,
        src_row,
        dst_row,
        stream: leaves && lines && out.bytes() >= STREAM_MIN_BYTES,
    })
}

/// One instruction of the in-register transpose, on registers by number.
#[derive(Clone, Copy)]
enum Shuf {
    /// `vunpcklps`/`vunpckhps` (high when true).
    Ps(bool),
    /// `vunpcklpd`/`vunpckhpd`.
    Pd(bool),
    /// `vshuff32x4` with this immediate (128-bit lanes: it moves 8-byte
    /// elements as `vshuff64x2` would).
    F32x4(u8),
}

/// The transpose's instructions for elements of `esize` bytes: (op,
/// destination, first, second source). 4 bytes: sixteen rows in
/// zmm0–15 → zmm16–31 → zmm0–15 → zmm16–31 → zmm0–15; 8 bytes: eight rows
/// in zmm0–7 → zmm16–23 → zmm0–7 → zmm16–23.
fn network(esize: usize) -> Vec<(Shuf, usize, usize, usize)> {
    let mut n = Vec::with_capacity(64);
    if esize == 8 {
        for i in 0..4 {
            n.push((Shuf::Pd(false), 16 + 2 * i, 2 * i, 2 * i + 1));
            n.push((Shuf::Pd(true), 16 + 2 * i + 1, 2 * i, 2 * i + 1));
        }
        // Lanes 0 and 2, then 1 and 3, of each pair of rows' columns.
        for s in 0..2 {
            for h in 0..2 {
                let (a, b) = (16 + 4 * h + s, 16 + 4 * h + s + 2);
                n.push((Shuf::F32x4(0x88), 4 * s + 2 * h, a, b));
                n.push((Shuf::F32x4(0xdd), 4 * s + 2 * h + 1, a, b));
            }
        }
        for k in 0..4 {
            let (s, w) = (k / 2, k % 2);
            let (a, b) = (4 * s + w, 4 * s + 2 + w);
            n.push((Shuf::F32x4(0x88), 16 + 2 * k, a, b));
            n.push((Shuf::F32x4(0xdd), 16 + 2 * k + 1, a, b));
        }
        return n;
    }
    for i in 0..8 {
        n.push((Shuf::Ps(false), 16 + 2 * i, 2 * i, 2 * i + 1));
        n.push((Shuf::Ps(true), 16 + 2 * i + 1, 2 * i, 2 * i + 1));
    }
    for i in 0..4 {
        for j in 0..2 {
            let (a, b) = (16 + 4 * i + j, 16 + 4 * i + j + 2);
            n.push((Shuf::Pd(false), 4 * i + 2 * j, a, b));
            n.push((Shuf::Pd(true), 4 * i + 2 * j + 1, a, b));
        }
    }
    for i in 0..2 {
        for k in 0..4 {
            let (a, b) = (8 * i + k, 8 * i + 4 + k);
            n.push((Shuf::F32x4(0x88), 16 + 8 * i + 2 * k, a, b));
            n.push((Shuf::F32x4(0xdd), 16 + 8 * i + 2 * k + 1, a, b));
        }
    }
    for k in 0..8 {
        n.push((Shuf::F32x4(0x88), k, 16 + k, 24 + k));
        n.push((Shuf::F32x4(0xdd), k + 8, 16 + k, 24 + k));
    }
    n
}

/// [`network`] run on element numbers (row·n + column for n elements of
/// `esize` bytes a register, row `i` loaded into zmm`i`): for each output
/// row `c`, the register that ends holding column `c` of every row in
/// order. `None` if some column is in no register.
fn network_order(esize: usize) -> Option<Vec<usize>> {
    let n = 64 / esize;
    // Elements per 128-bit lane and per 64-bit half of one.
    let (lane, half) = (16 / esize, 8 / esize);
    let mut regs = vec![vec![u16::MAX; n]; 32];
    for (i, reg) in regs.iter_mut().enumerate().take(n) {
        for (c, e) in reg.iter_mut().enumerate() {
            *e = (i * n + c) as u16;
        }
    }
    for (op, d, a, b) in network(esize) {
        let (x, y) = (regs[a].clone(), regs[b].clone());
        let mut out = Vec::with_capacity(n);
        for l in 0..4 {
            let at = l * lane;
            match op {
                Shuf::Ps(high) => {
                    let k = at + 2 * usize::from(high);
                    out.extend([x[k], y[k], x[k + 1], y[k + 1]]);
                }
                Shuf::Pd(high) => {
                    let k = at + half * usize::from(high);
                    out.extend_from_slice(&x[k..k + half]);
                    out.extend_from_slice(&y[k..k + half]);
                }
                Shuf::F32x4(imm) => {
                    let from = (usize::from(imm >> (2 * l)) & 3) * lane;
                    let src = if l < 2 { &x } else { &y };
                    out.extend_from_slice(&src[from..from + lane]);
                }
            }
        }
        regs[d] = out;
    }
    (0..n)
        .map(|c| {
            regs.iter().position(|r| {
                r.iter()
                    .enumerate()
                    .all(|(i, &e)| usize::from(e) == i * n + c)
            })
        })
        .collect()
}

fn asm_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("AVX-512 transpose emission failed: {e}"))
}

/// Adds `v` to `reg` (through rax when it is not an immediate).
fn add(
    a: &mut CodeAssembler,
    reg: AsmRegister64,
    v: i64,
) -> std::result::Result<(), iced_x86::IcedError> {
    match i32::try_from(v) {
        Ok(0) => Ok(()),
        Ok(v) => a.add(reg, v),
        Err(_) => {
            a.mov(rax, v)?;
            a.add(reg, rax)
        }
    }
}

/// The function: rdi the slot table, rdx..rcx the range of the outermost
/// dim; r8 the operand's tile, r9 the output's.
fn assemble(l: &Layout, order: &[usize]) -> Result<Native> {
    let mut a = CodeAssembler::new(64).map_err(asm_err)?;
    let mut pool = a.create_label();
    let mut done = a.create_label();
    (|| -> std::result::Result<(), iced_x86::IcedError> {
        let mut jump = [0xcc_u8; POOL_AT];
        jump[0] = 0xe9;
        jump[1..5].copy_from_slice(&(POOL_AT as i32 - 5).to_le_bytes());
        a.db(&jump)?;
        a.set_label(&mut pool)?;
        a.mov(r8, qword_ptr(rdi + (l.src * 8) as i32))?;
        a.mov(r9, qword_ptr(rdi + (l.dst * 8) as i32))?;
        add(&mut a, r8, l.offset)?;
        // The range: end - begin steps, both tiles moved begin steps in.
        a.cmp(rcx, rdx)?;
        a.jle(done)?;
        let (_, src0, dst0) = l.outer[0];
        for (reg, step) in [(r8, src0), (r9, dst0)] {
            a.mov(rax, step)?;
            a.imul_2(rax, rdx)?;
            a.add(reg, rax)?;
        }
        if l.stream {
            let mut plain = a.create_label();
            a.test(r9, 63)?;
            a.jnz(plain)?;
            nest(&mut a, l, order, true, 0)?;
            a.jmp(done)?;
            a.set_label(&mut plain)?;
        }
        nest(&mut a, l, order, false, 0)?;
        a.set_label(&mut done)?;
        if l.stream {
            // Streamed stores become visible to the thread that joins
            // this one in order with its other writes.
            a.sfence()?;
        }
        a.xor(iced_x86::code_asm::eax, iced_x86::code_asm::eax)?;
        a.vzeroupper()?;
        a.ret()
    })()
    .map_err(asm_err)?;
    let (bytes, first_label) = super::native::encode(&a)?;
    if first_label != Some(POOL_AT) {
        return Err(asm_err(format!(
            "the code at {first_label:?}, not {POOL_AT}"
        )));
    }
    Ok(Native {
        isa: "AVX-512",
        source: "codegen/transpose.rs",
        bytes,
        code_at: POOL_AT,
    })
}

/// The loop over outer dim `d` (over the range rdx..rcx when `d` is 0),
/// with the inner dims' loops or the tile inside.
fn nest(
    a: &mut CodeAssembler,
    l: &Layout,
    order: &[usize],
    stream: bool,
    d: usize,
) -> std::result::Result<(), iced_x86::IcedError> {
    let (count, src_step, dst_step) = l.outer[d];
    let counter = COUNTERS[d];
    if d == 0 {
        a.mov(counter, rcx)?;
        a.sub(counter, rdx)?;
    } else {
        a.mov(counter, count as i64)?;
    }
    let mut top = a.create_label();
    a.set_label(&mut top)?;
    if d + 1 < l.outer.len() {
        nest(a, l, order, stream, d + 1)?;
    } else {
        tile(a, l, order, stream)?;
    }
    add(a, r8, src_step)?;
    add(a, r9, dst_step)?;
    a.dec(counter)?;
    a.jnz(top)?;
    if d > 0 {
        // Back to where this loop started, for the next step of the
        // enclosing one.
        let n = count as i64;
        add(a, r8, -(n * src_step))?;
        add(a, r9, -(n * dst_step))?;
    }
    Ok(())
}

/// One tile: 4-byte elements as sixteen rows in, the network, sixteen
/// rows out; 8-byte ones as four blocks of eight rows of one line each
/// (operand rows and output rows two lines long: each line touched once).
fn tile(
    a: &mut CodeAssembler,
    l: &Layout,
    order: &[usize],
    stream: bool,
) -> std::result::Result<(), iced_x86::IcedError> {
    let n = order.len();
    let blocks = SIDE / n;
    for bp in 0..blocks {
        for bq in 0..blocks {
            for (i, &z) in ZMM.iter().enumerate().take(n) {
                let at = (bq * n + i) as i64 * l.src_row + bp as i64 * 64;
                a.vmovups(z, zmmword_ptr(r8 + at as i32))?;
            }
            for (op, d, x, y) in network(l.esize) {
                let (d, x, y) = (ZMM[d], ZMM[x], ZMM[y]);
                match op {
                    Shuf::Ps(false) => a.vunpcklps(d, x, y)?,
                    Shuf::Ps(true) => a.vunpckhps(d, x, y)?,
                    Shuf::Pd(false) => a.vunpcklpd(d, x, y)?,
                    Shuf::Pd(true) => a.vunpckhpd(d, x, y)?,
                    Shuf::F32x4(imm) => a.vshuff32x4(d, x, y, u32::from(imm))?,
                }
            }
            for (c, &reg) in order.iter().enumerate() {
                let at = (bp * n + c) as i64 * l.dst_row + bq as i64 * 64;
                let at = zmmword_ptr(r9 + at as i32);
                if stream {
                    a.vmovntps(at, ZMM[reg])?;
                } else {
                    a.vmovups(at, ZMM[reg])?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_networks_transpose_their_rows() {
        for (esize, rows) in [(4, 16), (8, 8)] {
            let order = network_order(esize);
            assert!(
                order.is_some(),
                "{esize}-byte elements: a column is in no register"
            );
            let mut seen = order.unwrap_or_default();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), rows, "{esize}-byte elements: {seen:?}");
        }
    }
}

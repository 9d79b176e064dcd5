//! Transposes of 4-byte elements as AVX-512 machine code (iced-x86's
//! assembler), for plain copies whose two innermost loop dims are a 16×16
//! tile, the operand contiguous along the first and the output along the
//! second: the kernels `tile` made of a transposed copy, and any other
//! copy of that shape (a `[n, 16, 16]` transpose, a row group's member, a
//! GEMM's epilogue), each as correct as a copy.
//!
//! Each tile is sixteen 64-byte loads, one cache line of each of sixteen
//! operand rows, a 16×16 transpose in registers (four rounds of sixteen
//! shuffles) and sixteen 64-byte stores, one line of each of sixteen
//! output rows: every line is touched once. Cranelift's code (128-bit
//! vectors, `codegen::loops`) moves the tile as sixteen 4×4 blocks and
//! comes back to each line four times, and when the rows are a power of
//! two apart (4 KiB) all sixteen fall in one set of the L1 cache, which
//! does not hold them until the fourth visit. An output of the program
//! (or a value handed to a callback) of [`STREAM_MIN_BYTES`] or more that
//! no later step reads is written with non-temporal stores: a streamed line is not read from
//! memory before it is overwritten (the stores need 64-byte aligned
//! lines; a kernel whose output is not aligned when it runs takes the
//! plain stores). docs/benchmarks.md,
//! "Transposes as machine code".
//!
//! The function has the kernel ABI (`mod.rs`) and the layout of
//! `native`'s functions (a jump over an empty pool), so dumps list it the
//! same way.

use iced_x86::BlockEncoderOptions;
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
/// copy of 4-byte elements in 16×16 tiles or the host or options rule
/// it out.
pub(super) fn compile(plan: &Plan, k: &Kernel, opts: &JitOptions) -> Result<Option<Native>> {
    if !opts.vectorize || !crate::isa::has_avx512() {
        return Ok(None);
    }
    let Some(layout) = layout(plan, k) else {
        return Ok(None);
    };
    let Some(order) = network_order() else {
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
        || dtype.size() != 4
        || out.dtype.size() != 4
        || !(3..=MAX_OUTER + 2).contains(&r)
        || k.dims.contains(&0)
        || k.dims[r - 2] != SIDE
        || k.dims[r - 1] != SIDE
        || strides[r - 2] != 1
        || k.out_strides[r - 1] != 1
    {
        return None;
    }
    let bytes = |e: i64| e.checked_mul(4);
    let (src_row, dst_row) = (bytes(strides[r - 1])?, bytes(k.out_strides[r - 2])?);
    // Every load and store of a tile addresses its base plus an
    // instruction's displacement.
    let reach = |step: i64| {
        step.checked_mul(SIDE as i64 - 1)
            .and_then(|v| i32::try_from(v).ok())
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
    /// `vshuff32x4` with this immediate.
    F32x4(u8),
}

/// The transpose's instructions: (op, destination, first, second source).
/// Rows in zmm0–15 → zmm16–31 → zmm0–15 → zmm16–31 → zmm0–15.
fn network() -> Vec<(Shuf, usize, usize, usize)> {
    let mut n = Vec::with_capacity(64);
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

/// The network run on element numbers (row·16 + column, row `i` loaded
/// into zmm`i`): for each output row `c`, the register holding column `c`
/// of every row in order. `None` if some register holds anything else.
fn network_order() -> Option<[usize; SIDE]> {
    let mut regs = [[0u16; SIDE]; 32];
    for (i, reg) in regs.iter_mut().enumerate().take(SIDE) {
        for (c, e) in reg.iter_mut().enumerate() {
            *e = (i * SIDE + c) as u16;
        }
    }
    for (op, d, a, b) in network() {
        let (x, y) = (regs[a], regs[b]);
        let mut out = [0u16; SIDE];
        for lane in 0..4 {
            let at = 4 * lane;
            let block =
                |r: &[u16; SIDE], l: usize| [r[4 * l], r[4 * l + 1], r[4 * l + 2], r[4 * l + 3]];
            let v: [u16; 4] = match op {
                Shuf::Ps(false) => [x[at], y[at], x[at + 1], y[at + 1]],
                Shuf::Ps(true) => [x[at + 2], y[at + 2], x[at + 3], y[at + 3]],
                Shuf::Pd(false) => [x[at], x[at + 1], y[at], y[at + 1]],
                Shuf::Pd(true) => [x[at + 2], x[at + 3], y[at + 2], y[at + 3]],
                Shuf::F32x4(imm) => {
                    let pick = usize::from(imm >> (2 * lane)) & 3;
                    if lane < 2 {
                        block(&x, pick)
                    } else {
                        block(&y, pick)
                    }
                }
            };
            out[at..at + 4].copy_from_slice(&v);
        }
        regs[d] = out;
    }
    let mut order = [usize::MAX; SIDE];
    for (reg, lanes) in regs.iter().enumerate().take(SIDE) {
        let c = usize::from(lanes[0]) % SIDE;
        if !lanes
            .iter()
            .enumerate()
            .all(|(i, &e)| usize::from(e) == i * SIDE + c)
        {
            return None;
        }
        order[c] = reg;
    }
    order.iter().all(|&r| r < SIDE).then_some(order)
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
fn assemble(l: &Layout, order: &[usize; SIDE]) -> Result<Native> {
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
    let res = a
        .assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
        .map_err(asm_err)?;
    let at = res.label_ip(&pool).map_err(asm_err)? as usize;
    if at != POOL_AT {
        return Err(asm_err(format!("the code at {at}, not {POOL_AT}")));
    }
    Ok(Native {
        isa: "AVX-512",
        source: "codegen/transpose.rs",
        bytes: res.inner.code_buffer,
        code_at: POOL_AT,
    })
}

/// The loop over outer dim `d` (over the range rdx..rcx when `d` is 0),
/// with the inner dims' loops or the tile inside.
fn nest(
    a: &mut CodeAssembler,
    l: &Layout,
    order: &[usize; SIDE],
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

/// One tile: sixteen rows in, the network, sixteen rows out.
fn tile(
    a: &mut CodeAssembler,
    l: &Layout,
    order: &[usize; SIDE],
    stream: bool,
) -> std::result::Result<(), iced_x86::IcedError> {
    for (i, &z) in ZMM.iter().enumerate().take(SIDE) {
        a.vmovups(z, zmmword_ptr(r8 + (i as i64 * l.src_row) as i32))?;
    }
    for (op, d, x, y) in network() {
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
        let at = zmmword_ptr(r9 + (c as i64 * l.dst_row) as i32);
        if stream {
            a.vmovntps(at, ZMM[reg])?;
        } else {
            a.vmovups(at, ZMM[reg])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_transposes_sixteen_rows() {
        let order = network_order();
        assert!(order.is_some(), "a register holds more than one column");
        let mut seen = order.unwrap_or_default();
        seen.sort_unstable();
        assert_eq!(seen, std::array::from_fn(|i| i));
    }
}

//! Sums over a middle axis with the innermost kept (a column sum, a sum
//! over axis 1 of three) as AVX-512 or AVX2 machine code (iced-x86's
//! assembler): kernels of dims `[outer, rows, columns]` reducing `rows`
//! (or `[rows, columns]` reducing `rows`: one outer index, one thread),
//! whose one node loads f32 or f64 contiguous along the columns. For each
//! index of the outer range, the rows go by blocks of [`BLOCK_ROWS`], and
//! within a row block the columns by blocks of up to [`ACCS_512`] (AVX2:
//! [`ACCS_256`]) vectors,
//! each block's sums held in registers while the block's rows stream past
//! (one load-and-add per vector per row), then stored, and resumed from
//! the output in the next row block; the last block's last vector is
//! masked where the columns are not a whole number of vectors. Each
//! column is summed in row order, one element after the other, as the
//! interpreter and the Cranelift loop nest do. Compiling it touches no
//! Cranelift code: a program of such kernels compiles without Cranelift
//! (docs/benchmarks.md, "Reductions as machine code").
//!
//! The function has the kernel ABI (`mod.rs`) and the layout of
//! `native`'s functions (a jump over an empty pool), so dumps list it the
//! same way.

use iced_x86::code_asm::{
    AsmRegisterYmm, AsmRegisterZmm, CodeAssembler, eax, edi, esi, k1, ptr, qword_ptr, r8, r9, r10,
    r11, r12, r13, r13d, rax, rbx, rcx, rdi, rdx, ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7,
    ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14, ymm15, ymmword_ptr, zmm0, zmm1, zmm2, zmm3,
    zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14, zmm15, zmm16, zmm17,
    zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27, zmm28, zmm29, zmm30,
    zmm31, zmmword_ptr,
};
use tensorlift_ir::{DType, Error, ReduceOp, Result};

use super::JitOptions;
use super::native::{Native, POOL_AT};
use crate::fusion::{ENode, Kernel, KernelKind, Plan};

/// Vectors of columns a block sums at once: every register (AVX-512:
/// zmm0–31, the masked vector's lanes in k1; AVX2: ymm0–13, ymm14 the
/// masked vector's load and ymm15 its mask). A row block is read once per
/// block of columns, and each pass reads only its part of every row's
/// lines, so the fewer the passes the better (docs/benchmarks.md,
/// "Column sums with every register").
const ACCS_512: usize = 32;
const ACCS_256: usize = 14;

/// Rows of a row block: every column block runs over one row block before
/// the next (the operand's lines of a block's rows are read together, and
/// each row's page once), the sums resumed from the output after the first.
const BLOCK_ROWS: u32 = 64;

const ZMM: [AsmRegisterZmm; ACCS_512] = [
    zmm0, zmm1, zmm2, zmm3, zmm4, zmm5, zmm6, zmm7, zmm8, zmm9, zmm10, zmm11, zmm12, zmm13, zmm14,
    zmm15, zmm16, zmm17, zmm18, zmm19, zmm20, zmm21, zmm22, zmm23, zmm24, zmm25, zmm26, zmm27,
    zmm28, zmm29, zmm30, zmm31,
];
const YMM: [AsmRegisterYmm; ACCS_256] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13,
];

/// A qualifying kernel's layout, in bytes where a step.
#[derive(Debug, PartialEq)]
struct Layout {
    /// 4 (f32) or 8 (f64).
    esize: usize,
    src: usize,
    dst: usize,
    /// The operand's first element, in bytes.
    offset: i32,
    /// Rows summed, and columns.
    rows: u32,
    cols: usize,
    /// Bytes between outer indices of the operand and the output, and
    /// between the operand's rows.
    src_outer: i32,
    dst_outer: i32,
    src_row: i32,
    /// A 2-D sum `[rows, cols]` over its rows: no outer dim, so the kernel
    /// cannot split over threads and the range it is called with is not
    /// an outer range (`fusion::range_capable`): it runs one outer index.
    whole: bool,
}

/// `k` as AVX-512 or AVX2 machine code, or `None` where it is not such a sum or
/// the host or options rule it out (exact mode keeps the Cranelift code,
/// whose order the differential tests compare bit by bit).
pub(super) fn compile(plan: &Plan, k: &Kernel, opts: &JitOptions) -> Result<Option<Native>> {
    let avx512 = crate::isa::has_avx512();
    if opts.exact || !opts.vectorize || !(avx512 || crate::isa::has_avx2()) {
        return Ok(None);
    }
    match layout(plan, k) {
        Some(l) => assemble(&l, avx512).map(Some),
        None => Ok(None),
    }
}

/// The layout of `k` when it qualifies.
fn layout(plan: &Plan, k: &Kernel) -> Option<Layout> {
    let KernelKind::Reduce {
        op: ReduceOp::Sum,
        reduced,
    } = &k.kind
    else {
        return None;
    };
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
    let out = plan.slots.get(k.out)?;
    // `[rows, cols]` over the rows: one outer index of stride 0.
    let whole = reduced[..] == [true, false];
    let (dims, strides, out_strides) = match whole {
        true => {
            let [rows, cols] = <[usize; 2]>::try_from(k.dims.as_slice()).ok()?;
            let [row, col] = <[i64; 2]>::try_from(strides.as_slice()).ok()?;
            let [o_row, o_col] = <[i64; 2]>::try_from(k.out_strides.as_slice()).ok()?;
            ([1, rows, cols], [0, row, col], [0, o_row, o_col])
        }
        false => (
            <[usize; 3]>::try_from(k.dims.as_slice()).ok()?,
            <[i64; 3]>::try_from(strides.as_slice()).ok()?,
            <[i64; 3]>::try_from(k.out_strides.as_slice()).ok()?,
        ),
    };
    if !(whole || reduced[..] == [false, true, false])
        || k.stash.is_some()
        || !matches!(dtype, DType::F32 | DType::F64)
        || out.dtype != *dtype
        || dims.contains(&0)
        || strides[2] != 1
        || out_strides[1..] != [0, 1]
    {
        return None;
    }
    let esize = dtype.size();
    // Every step is an immediate operand.
    let bytes = |e: i64| i32::try_from(e.checked_mul(esize as i64)?).ok();
    Some(Layout {
        esize,
        src: *slot,
        dst: k.out,
        offset: bytes(*offset)?,
        rows: u32::try_from(dims[1]).ok().filter(|&r| r < 1 << 31)?,
        cols: dims[2],
        src_outer: bytes(strides[0])?,
        dst_outer: bytes(out_strides[0])?,
        src_row: bytes(strides[1])?,
        whole,
    })
    .filter(|l| {
        i32::try_from(l.cols * esize).is_ok()
            && i32::try_from(i64::from(l.src_row) * i64::from(BLOCK_ROWS)).is_ok()
    })
}

fn asm_err(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("column sum emission failed: {e}"))
}

/// The function. rdi: the slot table, rdx..rcx: the outer range; r8 and
/// r9 the operand's and output's bases, r10 the current row block's first
/// row and r11 the current outer index's output; per column block, rbx
/// its first row and r12 its output, rax the row pointer, esi the rows
/// left, edi the column blocks left, r13d the row blocks left (rbx, r12
/// and r13 saved). AVX-512: the sums in zmm0–7, the last vector's lanes in
/// k1. AVX2: in ymm0–7, the last vector's lanes in ymm15 (read from the
/// pool: 32 bytes of ones, then 32 of zeros), loaded masked into ymm8.
fn assemble(l: &Layout, avx512: bool) -> Result<Native> {
    let width = if avx512 { 64 } else { 32 };
    let lanes = width / l.esize;
    let vectors = l.cols.div_ceil(lanes);
    let accs = if avx512 { ACCS_512 } else { ACCS_256 };
    let blocks = vectors / accs;
    let last = vectors % accs;
    let rest = l.cols % lanes;
    let f64 = l.esize == 8;
    // Row blocks: the first takes what is left over, so that every later
    // one has BLOCK_ROWS.
    let row_blocks = l.rows.div_ceil(BLOCK_ROWS);
    let first_rows = l.rows - (row_blocks - 1) * BLOCK_ROWS;
    let mut a = CodeAssembler::new(64).map_err(asm_err)?;
    let code_at = if avx512 { POOL_AT } else { POOL_AT + 64 };
    (|| -> std::result::Result<(), iced_x86::IcedError> {
        let mut jump = [0xcc_u8; POOL_AT];
        jump[0] = 0xe9;
        jump[1..5].copy_from_slice(&(code_at as i32 - 5).to_le_bytes());
        a.db(&jump)?;
        let mut pool = a.create_label();
        if !avx512 {
            a.set_label(&mut pool)?;
            a.dd(&[u32::MAX; 8])?;
            a.dd(&[0; 8])?;
        }
        let mut outer = a.create_label();
        let mut done = a.create_label();
        a.push(rbx)?;
        a.push(r12)?;
        a.push(r13)?;
        if l.whole {
            // One outer index, whatever range the caller passes.
            a.xor(iced_x86::code_asm::edx, iced_x86::code_asm::edx)?;
            a.mov(iced_x86::code_asm::ecx, 1)?;
        }
        a.mov(r8, qword_ptr(rdi + (l.src * 8) as i32))?;
        a.mov(r9, qword_ptr(rdi + (l.dst * 8) as i32))?;
        if l.offset != 0 {
            a.add(r8, l.offset)?;
        }
        if rest != 0 {
            if avx512 {
                a.mov(eax, (1i32 << rest) - 1)?;
                a.kmovw(k1, eax)?;
            } else {
                a.lea(rax, ptr(pool))?;
                a.vmovdqu(ymm15, ymmword_ptr(rax + ((lanes - rest) * l.esize) as i32))?;
            }
        }
        a.set_label(&mut outer)?;
        a.cmp(rdx, rcx)?;
        a.jge(done)?;
        a.imul_3(r10, rdx, l.src_outer)?;
        a.add(r10, r8)?;
        a.imul_3(r11, rdx, l.dst_outer)?;
        a.add(r11, r9)?;
        // One block of `n` vectors of columns over `rows` rows (the last
        // vector masked where `masked`), its sums starting from zero or
        // (`resume`) from the output, at rbx/r12, both moved past it.
        let block = |a: &mut CodeAssembler,
                     n: usize,
                     masked: bool,
                     rows: u32,
                     resume: bool|
         -> std::result::Result<(), iced_x86::IcedError> {
            let mut row = a.create_label();
            for u in 0..n {
                let at = r12 + (u * width) as i32;
                let tail = masked && u == n - 1;
                match (avx512, f64, resume, tail) {
                    (true, _, false, _) => a.vpxord(ZMM[u], ZMM[u], ZMM[u])?,
                    (false, _, false, _) => a.vxorps(YMM[u], YMM[u], YMM[u])?,
                    (true, false, true, false) => a.vmovups(ZMM[u], zmmword_ptr(at))?,
                    (true, false, true, true) => a.vmovups(ZMM[u].k1().z(), zmmword_ptr(at))?,
                    (true, true, true, false) => a.vmovupd(ZMM[u], zmmword_ptr(at))?,
                    (true, true, true, true) => a.vmovupd(ZMM[u].k1().z(), zmmword_ptr(at))?,
                    (false, false, true, false) => a.vmovups(YMM[u], ymmword_ptr(at))?,
                    (false, true, true, false) => a.vmovupd(YMM[u], ymmword_ptr(at))?,
                    (false, false, true, true) => a.vmaskmovps(YMM[u], ymm15, ymmword_ptr(at))?,
                    (false, true, true, true) => a.vmaskmovpd(YMM[u], ymm15, ymmword_ptr(at))?,
                }
            }
            a.mov(rax, rbx)?;
            a.mov(esi, rows)?;
            a.set_label(&mut row)?;
            for u in 0..n {
                let at = rax + (u * width) as i32;
                let tail = masked && u == n - 1;
                match (avx512, f64, tail) {
                    (true, false, false) => a.vaddps(ZMM[u], ZMM[u], zmmword_ptr(at))?,
                    (true, false, true) => a.vaddps(ZMM[u].k1(), ZMM[u], zmmword_ptr(at))?,
                    (true, true, false) => a.vaddpd(ZMM[u], ZMM[u], zmmword_ptr(at))?,
                    (true, true, true) => a.vaddpd(ZMM[u].k1(), ZMM[u], zmmword_ptr(at))?,
                    (false, false, false) => a.vaddps(YMM[u], YMM[u], ymmword_ptr(at))?,
                    (false, true, false) => a.vaddpd(YMM[u], YMM[u], ymmword_ptr(at))?,
                    // The lanes past the columns load as zeros.
                    (false, false, true) => {
                        a.vmaskmovps(ymm14, ymm15, ymmword_ptr(at))?;
                        a.vaddps(YMM[u], YMM[u], ymm14)?
                    }
                    (false, true, true) => {
                        a.vmaskmovpd(ymm14, ymm15, ymmword_ptr(at))?;
                        a.vaddpd(YMM[u], YMM[u], ymm14)?
                    }
                }
            }
            a.add(rax, l.src_row)?;
            a.dec(esi)?;
            a.jnz(row)?;
            for u in 0..n {
                let at = r12 + (u * width) as i32;
                let tail = masked && u == n - 1;
                match (avx512, f64, tail) {
                    (true, false, false) => a.vmovups(zmmword_ptr(at), ZMM[u])?,
                    (true, false, true) => a.vmovups(zmmword_ptr(at).k1(), ZMM[u])?,
                    (true, true, false) => a.vmovupd(zmmword_ptr(at), ZMM[u])?,
                    (true, true, true) => a.vmovupd(zmmword_ptr(at).k1(), ZMM[u])?,
                    (false, false, false) => a.vmovups(ymmword_ptr(at), YMM[u])?,
                    (false, true, false) => a.vmovupd(ymmword_ptr(at), YMM[u])?,
                    (false, false, true) => a.vmaskmovps(ymmword_ptr(at), ymm15, YMM[u])?,
                    (false, true, true) => a.vmaskmovpd(ymmword_ptr(at), ymm15, YMM[u])?,
                }
            }
            a.add(rbx, (n * width) as i32)?;
            a.add(r12, (n * width) as i32)
        };
        // Whole column blocks in a loop; the last block (with the masked
        // vector where there is one) after it.
        let (looped, tail) = match (last, rest) {
            (0, 0) => (blocks, 0),
            (0, _) => (blocks - 1, accs),
            (n, _) => (blocks, n),
        };
        // Every column block over one row block starting at r10, which then
        // moves past it.
        let pass = |a: &mut CodeAssembler,
                    rows: u32,
                    resume: bool|
         -> std::result::Result<(), iced_x86::IcedError> {
            a.mov(rbx, r10)?;
            a.mov(r12, r11)?;
            if looped > 0 {
                let mut next = a.create_label();
                a.mov(edi, looped as u32)?;
                a.set_label(&mut next)?;
                block(a, accs, false, rows, resume)?;
                a.dec(edi)?;
                a.jnz(next)?;
            }
            if tail > 0 {
                block(a, tail, rest != 0, rows, resume)?;
            }
            a.add(r10, l.src_row * rows as i32)
        };
        pass(&mut a, first_rows, false)?;
        if row_blocks > 1 {
            let mut next = a.create_label();
            a.mov(r13d, row_blocks - 1)?;
            a.set_label(&mut next)?;
            pass(&mut a, BLOCK_ROWS, true)?;
            a.dec(r13d)?;
            a.jnz(next)?;
        }
        a.add(rdx, 1)?;
        a.jmp(outer)?;
        a.set_label(&mut done)?;
        a.xor(eax, eax)?;
        a.vzeroupper()?;
        a.pop(r13)?;
        a.pop(r12)?;
        a.pop(rbx)?;
        a.ret()
    })()
    .map_err(asm_err)?;
    let (bytes, _) = super::native::encode(&a)?;
    if bytes.len() < code_at {
        return Err(asm_err("the code is shorter than its entry"));
    }
    Ok(Native {
        isa: if avx512 { "AVX-512" } else { "AVX2" },
        source: "codegen/columns.rs",
        bytes,
        code_at,
    })
}

//! The denormal controls of a thread's floating-point environment: on
//! x86-64, MXCSR's flush-to-zero (FTZ: a denormal result becomes zero)
//! and denormals-are-zero (DAZ: a denormal operand reads as zero) bits.
//!
//! Compiled code runs with both set unless asked for exact results, as
//! XLA's CPU code does (`jax.jit(lambda x: x * 0.5)(2e-38)` is 0): on Intel
//! cores every SSE/AVX operation that meets a denormal takes a microcode
//! assist of about a hundred cycles, and a gradient that vanishes through
//! a long loop passes through them by the million (docs/compiler.md,
//! "Denormals"). The mode is per thread: [`FpMode::enter`] sets it for a
//! scope and puts the previous one back, and [`crate::pool::run_parts`]
//! runs every part of a split in its caller's mode. Elsewhere than on
//! x86-64 the mode is a no-op: nothing is flushed.

use std::cell::Cell;
use std::marker::PhantomData;

/// A thread's denormal mode (only the FTZ and DAZ bits; rounding, the
/// exception masks and flags are never touched). The default is IEEE
/// 754's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpMode {
    /// MXCSR's FTZ and DAZ bits, as in the register.
    bits: u32,
}

/// MXCSR's flush-to-zero bit.
#[cfg(target_arch = "x86_64")]
const FTZ: u32 = 1 << 15;
/// MXCSR's denormals-are-zero bit.
#[cfg(target_arch = "x86_64")]
const DAZ: u32 = 1 << 6;
#[cfg(target_arch = "x86_64")]
const DENORMAL_BITS: u32 = FTZ | DAZ;
#[cfg(not(target_arch = "x86_64"))]
const DENORMAL_BITS: u32 = 0;

#[cfg(target_arch = "x86_64")]
fn read_csr() -> u32 {
    let mut csr: u32 = 0;
    // SAFETY: `stmxcsr` stores the 4-byte MXCSR to the given address, a
    // live local; SSE is part of the x86-64 baseline.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &raw mut csr, options(nostack, preserves_flags));
    }
    csr
}

#[cfg(target_arch = "x86_64")]
fn write_csr(csr: u32) {
    // SAFETY: `csr` is a value read by `read_csr` with only the FTZ and DAZ
    // bits changed, both valid on every x86-64 processor (DAZ since the
    // Pentium 4's SSE2, which x86-64 includes): no reserved bit is set, so
    // `ldmxcsr` cannot fault. The Rust code that then runs in flush mode
    // (runtime kernels, the `gemm` crate) was compiled assuming the default
    // environment: its float results may flush as the compiled code's do,
    // which is the mode's purpose; nothing in it relies on denormals for
    // memory safety (no float computes an index or a length), as XLA's
    // and PyTorch's runtimes run their own code under these bits.
    unsafe {
        std::arch::asm!("ldmxcsr [{}]", in(reg) &raw const csr, options(nostack, preserves_flags, readonly));
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_csr() -> u32 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
fn write_csr(_: u32) {}

impl FpMode {
    /// The calling thread's mode.
    pub fn current() -> FpMode {
        FpMode {
            bits: read_csr() & DENORMAL_BITS,
        }
    }

    /// IEEE 754's mode: denormals computed and kept.
    pub fn ieee() -> FpMode {
        FpMode { bits: 0 }
    }

    /// The mode that flushes denormal results and operands to zero (where
    /// the target can; elsewhere [`FpMode::ieee`]).
    pub fn flush_denormals() -> FpMode {
        FpMode {
            bits: DENORMAL_BITS,
        }
    }

    /// Whether this mode flushes denormals.
    pub fn flushes_denormals(self) -> bool {
        self.bits != 0
    }

    /// Sets this mode on the calling thread for good.
    pub fn set(self) {
        let csr = read_csr();
        let wanted = (csr & !DENORMAL_BITS) | self.bits;
        if wanted != csr {
            write_csr(wanted);
        }
    }

    /// Sets this mode on the calling thread until the guard drops, which
    /// restores the thread's previous mode. Costs one register read when
    /// the thread is already in it.
    pub fn enter(self) -> FpModeGuard {
        self.enter_from(read_csr())
    }

    /// [`FpMode::enter`] with MXCSR as just read.
    fn enter_from(self, csr: u32) -> FpModeGuard {
        let wanted = (csr & !DENORMAL_BITS) | self.bits;
        let restore = (wanted != csr).then(|| {
            write_csr(wanted);
            FpMode {
                bits: csr & DENORMAL_BITS,
            }
        });
        FpModeGuard {
            restore,
            outer: None,
            thread_bound: PhantomData,
        }
    }

    /// [`FpMode::enter`] for a call of compiled code, in `mode` or (None)
    /// in the thread's own: until the guard drops, [`FpMode::outer`] on
    /// this thread is the mode the thread had before, the one code outside
    /// the call (a callback, another pool's job run while this thread
    /// waits) must run in. One register read when the mode stays.
    pub fn enter_call(mode: Option<FpMode>) -> FpModeGuard {
        let csr = read_csr();
        let before = FpMode {
            bits: csr & DENORMAL_BITS,
        };
        let previous = OUTER.with(|o| o.replace(Some(before)));
        let mut guard = mode.unwrap_or(before).enter_from(csr);
        guard.outer = Some(previous);
        guard
    }

    /// The calling thread's mode outside compiled code: the mode it had
    /// before the innermost [`FpMode::enter_call`] still in force, else its
    /// current mode.
    pub fn outer() -> FpMode {
        OUTER.with(Cell::get).unwrap_or_else(FpMode::current)
    }
}

thread_local! {
    /// The mode before the innermost [`FpMode::enter_call`] in force.
    static OUTER: Cell<Option<FpMode>> = const { Cell::new(None) };
}

/// Restores a thread's previous mode when dropped ([`FpMode::enter`]); it
/// belongs to the thread that entered the mode (not `Send`).
#[derive(Debug)]
#[must_use = "the mode lasts until the guard drops"]
pub struct FpModeGuard {
    /// The mode as it was, when it was changed.
    restore: Option<FpMode>,
    /// [`OUTER`] as it was, when [`FpMode::enter_call`] set it.
    outer: Option<Option<FpMode>>,
    thread_bound: PhantomData<*const ()>,
}

impl Drop for FpModeGuard {
    fn drop(&mut self) {
        if let Some(mode) = self.restore {
            // Only the two bits: exception flags raised meanwhile stay.
            mode.set();
        }
        if let Some(previous) = self.outer {
            OUTER.with(|o| o.set(previous));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FpMode;

    /// A denormal product, computed where the optimizer cannot fold it.
    fn halve(x: f32) -> f32 {
        std::hint::black_box(x) * std::hint::black_box(0.5f32)
    }

    #[test]
    fn entering_flushes_until_the_guard_drops() {
        let tiny = f32::MIN_POSITIVE;
        let denormal = halve(tiny);
        assert!(denormal.is_subnormal());
        assert_eq!(FpMode::current(), FpMode::ieee());
        {
            let _g = FpMode::flush_denormals().enter();
            assert_eq!(FpMode::current(), FpMode::flush_denormals());
            if cfg!(target_arch = "x86_64") {
                assert_eq!(halve(tiny), 0.0);
                // DAZ: a denormal operand reads as zero (the product
                // would be a normal number).
                assert_eq!(
                    std::hint::black_box(denormal) * std::hint::black_box(1e30f32),
                    0.0
                );
            }
            // Entering the mode the thread is in changes nothing, and
            // its guard restores nothing.
            drop(FpMode::flush_denormals().enter());
            assert_eq!(FpMode::current(), FpMode::flush_denormals());
            // A nested IEEE scope, then back.
            {
                let _ieee = FpMode::ieee().enter();
                assert!(halve(tiny).is_subnormal());
            }
            assert_eq!(FpMode::current(), FpMode::flush_denormals());
        }
        assert_eq!(FpMode::current(), FpMode::ieee());
        assert!(halve(tiny).is_subnormal());
    }

    /// The guard puts back the two bits only: an exception flag raised in
    /// the scope stays raised (sticky, as IEEE 754 has it).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn leaving_keeps_the_flags_raised_meanwhile() {
        const DIVIDE_BY_ZERO: u32 = 1 << 2;
        super::write_csr(super::read_csr() & !DIVIDE_BY_ZERO);
        {
            let _g = FpMode::flush_denormals().enter();
            assert!((std::hint::black_box(1.0f32) / std::hint::black_box(0.0f32)).is_infinite());
        }
        assert_ne!(super::read_csr() & DIVIDE_BY_ZERO, 0);
        assert_eq!(FpMode::current(), FpMode::ieee());
    }
}

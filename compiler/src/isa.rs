//! The x86-64 instruction sets tensorlift's own code may use: what the host
//! has, capped by the `TENSORLIFT_MAX_ISA` environment variable (`avx512`,
//! `avx2` or `sse4.2`), as XLA's `--xla_cpu_max_isa` caps its own. With a
//! cap, an AVX-512 host runs (and so tests and times) the code an AVX2-only
//! or SSE4.2-only host would: the Cranelift ISA flags, the wide routines'
//! choice of module, and every codegen decision that asks for a feature.
//! The GEMM library dispatches on the host's features by itself and is not
//! capped.
//!
//! The variable is read once per process; a value that is none of the
//! three makes every compile fail with an error naming it (a timing taken
//! with a misspelled cap must not pass for one).

use std::sync::OnceLock;

use tensorlift_ir::{Error, Result};

/// An x86-64 level, in the order of what it includes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IsaLevel {
    /// x86-64-v2: SSE4.2 and POPCNT; no AVX, no FMA.
    Sse42,
    /// x86-64-v3: AVX2, FMA, BMI1/2, LZCNT; no AVX-512.
    Avx2,
    /// x86-64-v4 as tensorlift uses it: AVX-512F/DQ/VL on top of v3.
    Avx512,
}

impl IsaLevel {
    /// The name `TENSORLIFT_MAX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Sse42 => "sse4.2",
            IsaLevel::Avx2 => "avx2",
            IsaLevel::Avx512 => "avx512",
        }
    }

    fn parse(s: &str) -> Option<IsaLevel> {
        [IsaLevel::Sse42, IsaLevel::Avx2, IsaLevel::Avx512]
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// The cap from the environment: `Ok(None)` when unset, `Err` (the
/// message) for a value that names no level.
fn cap() -> &'static std::result::Result<Option<IsaLevel>, String> {
    static CAP: OnceLock<std::result::Result<Option<IsaLevel>, String>> = OnceLock::new();
    CAP.get_or_init(|| match std::env::var("TENSORLIFT_MAX_ISA") {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!(
            "TENSORLIFT_MAX_ISA={v:?} is not valid Unicode; expected avx512, avx2 or sse4.2"
        )),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => IsaLevel::parse(&v)
            .map(Some)
            .ok_or_else(|| format!("TENSORLIFT_MAX_ISA={v:?}: expected avx512, avx2 or sse4.2")),
    })
}

/// Checks the cap before a compile: an `InvalidArgument` naming the
/// variable's value when it names no level.
pub(crate) fn check_cap() -> Result<()> {
    cap()
        .as_ref()
        .map(|_| ())
        .map_err(|m| Error::invalid(m.clone()))
}

/// Whether code of `level` may run: the cap allows it (a bad cap allows
/// nothing above SSE4.2, though no compile gets that far).
fn allowed(level: IsaLevel) -> bool {
    match cap() {
        Ok(None) => true,
        Ok(Some(c)) => level <= *c,
        Err(_) => level == IsaLevel::Sse42,
    }
}

/// The widest level the host has and the cap allows.
pub fn max_isa() -> IsaLevel {
    if has_avx512() {
        IsaLevel::Avx512
    } else if has_avx2() {
        IsaLevel::Avx2
    } else {
        IsaLevel::Sse42
    }
}

/// The host's features, detected once, and the levels they reach.
struct Host {
    avx512: bool,
    avx2: bool,
    fma: bool,
    avx: bool,
}

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::is_x86_feature_detected!("fma") && allowed(IsaLevel::Avx2);
            let avx = std::is_x86_feature_detected!("avx") && allowed(IsaLevel::Avx2);
            let avx2 = std::is_x86_feature_detected!("avx2") && fma;
            let avx512 = std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("avx512vl")
                && avx2
                && allowed(IsaLevel::Avx512);
            Host {
                avx512,
                avx2,
                fma,
                avx,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Host {
                avx512: false,
                avx2: false,
                fma: false,
                avx: false,
            }
        }
    })
}

/// AVX-512F/DQ/VL, AVX2 and FMA, within the cap.
pub(crate) fn has_avx512() -> bool {
    host().avx512
}

/// AVX2 and FMA, within the cap.
pub(crate) fn has_avx2() -> bool {
    host().avx2
}

/// AVX (VEX encodings in Cranelift's code), within the cap: below the
/// AVX2 level Cranelift emits legacy SSE.
pub(crate) fn has_avx() -> bool {
    host().avx
}

/// FMA3, within the cap (it belongs to the AVX2 level).
pub(crate) fn has_fma() -> bool {
    host().fma
}

/// Turns off, in a Cranelift x64 ISA builder set up from the host, every
/// feature above the cap.
pub(crate) fn cap_cranelift(b: &mut cranelift_codegen::isa::Builder) -> Result<()> {
    use cranelift_codegen::settings::Configurable;
    if !cfg!(target_arch = "x86_64") {
        return Ok(());
    }
    let mut off = Vec::new();
    if !allowed(IsaLevel::Avx512) {
        off.extend([
            "has_avx512bitalg",
            "has_avx512dq",
            "has_avx512f",
            "has_avx512vl",
            "has_avx512vbmi",
            "has_avx512vnni",
        ]);
    }
    if !allowed(IsaLevel::Avx2) {
        off.extend([
            "has_avx",
            "has_avx2",
            "has_fma",
            "has_avx_vnni",
            "has_bmi1",
            "has_bmi2",
            "has_lzcnt",
        ]);
    }
    for flag in off {
        b.set(flag, "false")
            .map_err(|e| Error::internal(format!("Cranelift setting {flag}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_by_name_and_order_by_inclusion() {
        for l in [IsaLevel::Sse42, IsaLevel::Avx2, IsaLevel::Avx512] {
            assert_eq!(IsaLevel::parse(l.name()), Some(l));
        }
        assert_eq!(IsaLevel::parse(" AVX2 "), Some(IsaLevel::Avx2));
        assert_eq!(IsaLevel::parse("avx"), None);
        assert!(IsaLevel::Sse42 < IsaLevel::Avx2 && IsaLevel::Avx2 < IsaLevel::Avx512);
    }
}

//! The fuzz targets: each takes the bytes of one case, runs it, and says
//! how far it got and whether an oracle (a round trip, the interpreter
//! against the JIT) disagreed. A target never panics on purpose: a panic
//! escaping one is a bug found.

use crate::compiler::{self, JitOptions, OptLevel};
use crate::fuzz::random_graph::{GenOptions, Rng, random_graph_with, random_tensor};
use crate::ir::{Scalar, TensorType, ValueId, text, verify};
use crate::runtime::interp;
use crate::{DType, Graph, Result, Tensor, npy};

/// The three things fuzzed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `.tlir` text: parse, print/parse round trip, verify, run
    /// interpreted, and (one case in four) compiled against the
    /// interpreter when the program is small and statically shaped.
    Text,
    /// `.npy` bytes: [`npy::read`], and a write/read round trip of what
    /// it accepted.
    Npy,
    /// A random well-typed graph (the case's bytes are its seed): text
    /// round trip, interpreter against the JIT in exact mode.
    Graph,
}

impl Target {
    /// Every target, in the order the driver runs them.
    pub const ALL: [Target; 3] = [Target::Text, Target::Npy, Target::Graph];

    /// The name used on the command line and for corpus folders.
    pub fn name(self) -> &'static str {
        match self {
            Target::Text => "tlir",
            Target::Npy => "npy",
            Target::Graph => "graph",
        }
    }

    /// The target named `name` ([`Target::name`]).
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Runs one case. Returns how far it got, or a mismatch; panics only
    /// on a bug in tensorlift (the driver catches and records it).
    pub fn run(self, input: &[u8]) -> Verdict {
        match self {
            Target::Text => run_text(input),
            Target::Npy => run_npy(input),
            Target::Graph => run_graph(input),
        }
    }
}

/// How a case ended, when it did not panic or crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Rejected with an error (a parse error, an invalid `.npy` header).
    Rejected,
    /// Accepted (parsed, read) but not run further.
    Accepted,
    /// Verified and run by the interpreter (an error result included).
    Ran,
    /// Also compiled and compared with the interpreter.
    Compared,
    /// An oracle disagreed: what, and the evidence.
    Mismatch(String),
}

impl Verdict {
    /// 0 for [`Verdict::Rejected`] up to 3 for [`Verdict::Compared`]: how
    /// deep the case went (the driver keeps deeper inputs for mutation).
    pub fn depth(&self) -> u8 {
        match self {
            Verdict::Rejected | Verdict::Mismatch(_) => 0,
            Verdict::Accepted => 1,
            Verdict::Ran => 2,
            Verdict::Compared => 3,
        }
    }
}

/// The exact-mode JIT configurations of the differential tests
/// (`tests/jit_differential.rs`): bitwise agreement is required.
pub const EXACT: [JitOptions; 3] = [
    JitOptions {
        opt_level: OptLevel::None,
        exact: true,
        vectorize: false,
        threads: false,
        wide_math: true,
        flush_denormals: true,
    },
    JitOptions {
        opt_level: OptLevel::Speed,
        exact: true,
        vectorize: true,
        threads: true,
        wide_math: true,
        flush_denormals: true,
    },
    JitOptions {
        opt_level: OptLevel::None,
        exact: true,
        vectorize: true,
        threads: true,
        wide_math: true,
        flush_denormals: true,
    },
];

/// Programs with more values than this are not compiled by the text target.
const MAX_COMPILED_VALUES: usize = 64;
/// Programs with a value of more elements than this are not run.
const MAX_RUN_ELEMENTS: usize = 1 << 20;

/// FNV-1a of `bytes`: seeds the inputs a case's program gets.
pub fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// True when two results agree bitwise (any NaN matches any NaN): the
/// exact-mode contract.
pub fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    if a.dtype() == DType::String {
        return a.strings() == b.strings();
    }
    let same = |x: f64, y: f64| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits();
    let (la, lb) = (a.to_literal(), b.to_literal());
    (0..la.len()).all(|i| match (la.element(i), lb.element(i)) {
        (Scalar::Float(x, _), Scalar::Float(y, _)) => same(x, y),
        (Scalar::Complex(x, xi), Scalar::Complex(y, yi)) => same(x, y) && same(xi, yi),
        (x, y) => x == y,
    })
}

/// The print → parse → print round trip must reproduce the printed text.
fn round_trip(g: &Graph) -> Option<String> {
    let printed = text::print(g);
    match text::parse(&printed, "printed.tlir") {
        Ok(back) => {
            let again = text::print(&back);
            (again != printed).then(|| {
                format!("text round trip changed the program:\n{printed}\n--- became ---\n{again}")
            })
        }
        Err(e) => Some(format!("printed program does not parse: {e}\n{printed}")),
    }
}

/// Inputs for `g`'s parameters: random values, dynamic dims drawn from
/// 1..=3. `None` when a parameter cannot be filled (unknown rank, strings).
fn inputs_for(g: &Graph, rng: &mut Rng) -> Option<Vec<Tensor>> {
    g.params()
        .into_iter()
        .map(|p| {
            let ty = g.ty(p);
            if ty.dtype == DType::String {
                return None;
            }
            let dims: Vec<usize> = ty
                .shape
                .dims()?
                .iter()
                .map(|d| d.unwrap_or_else(|| 1 + rng.below(3)))
                .collect();
            random_tensor(rng, &TensorType::known(ty.dtype, &dims)).ok()
        })
        .collect()
}

/// Every value of `g` has a shape whose known dims hold at most
/// [`MAX_RUN_ELEMENTS`] elements.
fn small_enough(g: &Graph) -> bool {
    (0..g.num_values()).all(|i| {
        let v = ValueId(i as u32);
        g.ty(v).shape.dims().is_none_or(|dims| {
            dims.iter()
                .try_fold(1usize, |acc, d| acc.checked_mul(d.unwrap_or(1)))
                .is_some_and(|n| n <= MAX_RUN_ELEMENTS)
        })
    })
}

/// Runs `g` compiled with `opts` and compares with the interpreter's
/// `want`: bitwise on success, the same error code on failure.
fn compare_with_jit(
    g: &Graph,
    inputs: &[Tensor],
    want: &Result<Vec<Tensor>>,
    opts: &JitOptions,
) -> Option<String> {
    let exe = match compiler::compile(g, opts) {
        Ok(exe) => exe,
        Err(e) if e.code() == crate::Code::Internal => {
            return Some(format!("compile failed: {e}\n{}", text::print(g)));
        }
        // Not compilable (a callback without a JIT form, say): not a bug.
        Err(_) => return None,
    };
    match (want, exe.run(inputs)) {
        (Ok(w), Ok(o)) => {
            let differ = w.len() != o.len() || w.iter().zip(&o).any(|(a, b)| !same_bits(a, b));
            differ.then(|| {
                format!(
                    "interpreter and JIT differ ({opts:?}):\n jit    {o:?}\n interp {w:?}\n{}",
                    text::print(g)
                )
            })
        }
        (Err(a), Err(b)) if a.code() == b.code() => None,
        (w, o) => Some(format!(
            "interpreter {:?} vs JIT {:?} ({opts:?})\n{}",
            w.as_ref().err(),
            o.err(),
            text::print(g)
        )),
    }
}

fn run_text(input: &[u8]) -> Verdict {
    let src = String::from_utf8_lossy(input);
    let Ok(g) = text::parse(&src, "fuzz.tlir") else {
        return Verdict::Rejected;
    };
    if let Some(m) = round_trip(&g) {
        return Verdict::Mismatch(m);
    }
    if verify(&g).is_err() || !small_enough(&g) {
        return Verdict::Accepted;
    }
    let mut rng = Rng::new(hash(input));
    let Some(inputs) = inputs_for(&g, &mut rng) else {
        return Verdict::Accepted;
    };
    let want = interp::run(&g, &inputs);
    if let Some(m) = check_gradient(&g, &inputs, &mut rng) {
        return Verdict::Mismatch(m);
    }
    // One verified program in four is also compiled: compiling costs ten
    // times what the rest does, and the graph target covers the JIT.
    let compilable = rng.below(4) == 0
        && g.num_values() <= MAX_COMPILED_VALUES
        && (0..g.num_values()).all(|i| g.ty(ValueId(i as u32)).shape.is_static());
    if !compilable {
        return Verdict::Ran;
    }
    let opts = &EXACT[rng.below(EXACT.len())];
    match compare_with_jit(&g, &inputs, &want, opts) {
        Some(m) => Verdict::Mismatch(m),
        None => Verdict::Compared,
    }
}

/// Differentiates a verified program with respect to its real floating
/// inputs: an internal error, or a gradient graph the verifier rejects, is
/// a finding; the gradient then runs in the interpreter on random
/// cotangents (its errors are not findings, a panic is).
fn check_gradient(g: &Graph, inputs: &[Tensor], rng: &mut Rng) -> Option<String> {
    let wrt: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].dtype().is_float())
        .collect();
    let all_static = (0..g.num_values()).all(|i| g.ty(ValueId(i as u32)).shape.is_static());
    if wrt.is_empty() || !all_static {
        return None;
    }
    let v = match crate::ir::autodiff::vjp(g, &wrt) {
        Ok(v) => v,
        Err(e) if e.code() == crate::Code::Internal => {
            return Some(format!("differentiation failed: {e}\n{}", text::print(g)));
        }
        Err(_) => return None,
    };
    if let Err(e) = verify(&v) {
        return Some(format!(
            "the gradient graph does not verify: {e}\n{}",
            text::print(g)
        ));
    }
    let mut args = inputs.to_vec();
    for p in &v.params()[inputs.len()..] {
        args.push(random_tensor(rng, v.ty(*p)).ok()?);
    }
    let _ = interp::run(&v, &args);
    None
}

fn run_npy(input: &[u8]) -> Verdict {
    let Ok(t) = npy::read(input) else {
        return Verdict::Rejected;
    };
    let n = t.shape().iter().try_fold(1usize, |a, d| a.checked_mul(*d));
    if n != Some(t.to_literal().len()) {
        return Verdict::Mismatch(format!(
            "read a tensor of shape {:?} holding {} elements",
            t.shape(),
            t.to_literal().len()
        ));
    }
    let mut bytes = Vec::new();
    if let Err(e) = npy::write(&t, &mut bytes) {
        // Some dtypes read cannot be written back (none today).
        return Verdict::Mismatch(format!("cannot write back what was read: {e}"));
    }
    match npy::read(bytes.as_slice()) {
        Ok(back) if same_bits(&back, &t) => Verdict::Ran,
        Ok(back) => Verdict::Mismatch(format!("write/read changed {t:?} into {back:?}")),
        Err(e) => Verdict::Mismatch(format!("reading back what was written failed: {e}")),
    }
}

/// The graph target's case: bytes 0..8 the seed (little endian, missing
/// bytes are 0), byte 8 the op count (1 + b % 30, as the property tests),
/// and a byte 9 of flags: 1 when the generator draws NaN payloads
/// ([`GenOptions::nan_payloads`]), 2 when it draws loops and branches
/// ([`GenOptions::control_flow`]).
pub fn graph_case(seed: u64, n_ops: u8, options: GenOptions) -> Vec<u8> {
    let mut v = seed.to_le_bytes().to_vec();
    v.push(n_ops);
    let flags = u8::from(options.nan_payloads) | (u8::from(options.control_flow) << 1);
    if flags != 0 {
        v.push(flags);
    }
    v
}

fn run_graph(input: &[u8]) -> Verdict {
    let mut seed = [0u8; 8];
    for (d, s) in seed.iter_mut().zip(input) {
        *d = *s;
    }
    let n = 1 + usize::from(input.get(8).copied().unwrap_or(0)) % 30;
    let seed = u64::from_le_bytes(seed);
    let flags = input.get(9).copied().unwrap_or(0);
    let options = GenOptions {
        nan_payloads: flags & 1 != 0,
        control_flow: flags & 2 != 0,
    };
    let (g, inputs) = match random_graph_with(seed, n, options) {
        Ok(gi) => gi,
        Err(e) => return Verdict::Mismatch(format!("generator failed for seed {seed}: {e}")),
    };
    if let Some(m) = round_trip(&g) {
        return Verdict::Mismatch(format!("seed {seed}, {n} ops: {m}"));
    }
    let want = interp::run(&g, &inputs);
    for opts in &EXACT {
        if let Some(m) = compare_with_jit(&g, &inputs, &want, opts) {
            return Verdict::Mismatch(format!("seed {seed}, {n} ops: {m}"));
        }
    }
    Verdict::Compared
}

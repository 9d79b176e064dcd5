//! Checks, once per process, that the embedded Python can run tensorlift's
//! callbacks: that the libpython the process loaded is the one tensorlift
//! was built against, and that NumPy imports.
//!
//! pyo3 links `libpython3.x.so` by its soname without a run-time search
//! path, so a binary that does not record one (tensorlift's own binaries
//! do, in the root build.rs; a dependent crate calls
//! `tensorlift_build::link_python()` from its build.rs) loads whichever
//! libpython the dynamic loader finds first — typically the system Python,
//! without NumPy, where pyenv's or conda's was meant. Every callback would
//! then fail with a bare `No module named 'numpy'`; instead the first one
//! fails with an error that names both Pythons and the fix.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tensorlift_ir::{Detail, Error, Result};

/// Set once the check has passed: later calls cost one atomic load.
static PASSED: AtomicBool = AtomicBool::new(false);
/// The outcome of the one check of this process.
static OUTCOME: PyOnceLock<Result<()>> = PyOnceLock::new();

/// Checks that this process's embedded Python can run callbacks; call it
/// right after attaching to Python, before any other use of it. The check
/// runs once per process (a failure is remembered and returned again);
/// after it passed, a call is one atomic load.
///
/// # Errors
/// `FailedPrecondition` when the process loaded a libpython other than the
/// one tensorlift was built against while that one exists on this machine,
/// or when NumPy cannot be imported. The message names the libpython
/// loaded (with its version and `sys.base_prefix`), the one expected, and
/// the fix: `tensorlift_build::link_python();` in the binary's crate's
/// build.rs, or `LD_LIBRARY_PATH=<its directory>`.
pub fn check(py: Python<'_>) -> Result<()> {
    if PASSED.load(Ordering::Acquire) {
        return Ok(());
    }
    let outcome = OUTCOME.get_or_init(py, || diagnose(py));
    if outcome.is_ok() {
        PASSED.store(true, Ordering::Release);
    }
    outcome.clone()
}

/// What pyo3 was configured with when the runtime was built.
struct Built {
    lib_dir: &'static str,
    lib_name: &'static str,
    version: &'static str,
    executable: &'static str,
    /// "1" when pyo3 linked a shared libpython.
    shared: &'static str,
}

const BUILT: Built = Built {
    lib_dir: env_or_empty(option_env!("TENSORLIFT_PYTHON_LIB_DIR")),
    lib_name: env_or_empty(option_env!("TENSORLIFT_PYTHON_LIB_NAME")),
    version: env_or_empty(option_env!("TENSORLIFT_PYTHON_VERSION")),
    executable: env_or_empty(option_env!("TENSORLIFT_PYTHON_EXECUTABLE")),
    shared: env_or_empty(option_env!("TENSORLIFT_PYTHON_SHARED")),
};

const fn env_or_empty(v: Option<&'static str>) -> &'static str {
    match v {
        Some(v) => v,
        None => "",
    }
}

impl Built {
    /// The shared library pyo3 linked, when known.
    fn lib_file(&self) -> Option<PathBuf> {
        (self.shared == "1" && !self.lib_dir.is_empty() && !self.lib_name.is_empty())
            .then(|| Path::new(self.lib_dir).join(format!("lib{}.so", self.lib_name)))
    }
}

/// The libpython mapped into this process (Linux: from /proc/self/maps,
/// which shows the real path the dynamic loader opened).
fn loaded_libpython() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.find('/').map(|i| Path::new(&l[i..])))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libpython"))
        })
        .map(Path::to_path_buf)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn diagnose(py: Python<'_>) -> Result<()> {
    let sys_attr = |name: &str| -> String {
        py.import("sys")
            .and_then(|s| s.getattr(name))
            .and_then(|v| v.str().map(|s| s.to_string()))
            .unwrap_or_else(|_| "?".to_string())
    };
    let version = sys_attr("version")
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string();
    let base_prefix = sys_attr("base_prefix");
    let numpy_error = py.import("numpy").err().map(|e| e.to_string());
    let loaded = loaded_libpython();
    // Only a mismatch with a libpython present on this machine: a binary
    // run elsewhere loads that machine's Python, which is fine if it has
    // NumPy.
    let expected = BUILT.lib_file().filter(|f| f.exists());
    let mismatch = match (&loaded, &expected) {
        (Some(l), Some(e)) => !same_file(l, e),
        _ => false,
    };
    let loaded_text = match &loaded {
        Some(l) => format!(
            "{} (Python {version}, sys.base_prefix {base_prefix})",
            l.display()
        ),
        None => format!("Python {version} (sys.base_prefix {base_prefix})"),
    };
    let message = if let (true, Some(expected)) = (mismatch, &expected) {
        let numpy = match &numpy_error {
            Some(e) => format!(", where NumPy cannot be imported ({e})"),
            None => String::new(),
        };
        format!(
            "the embedded Python is not the one tensorlift was built against: this process loaded {loaded_text}{numpy}, but tensorlift was built against {} (Python {}, {}). The binary has no run-time search path (rpath) to {dir}, so the dynamic loader took the first libpython it found. Fix: call `tensorlift_build::link_python();` from the build.rs of the crate that builds this binary (with tensorlift-build in its [build-dependencies]; see docs/callbacks.md), or run it with LD_LIBRARY_PATH={dir}",
            expected.display(),
            BUILT.version,
            BUILT.executable,
            dir = BUILT.lib_dir,
        )
    } else if let Some(e) = &numpy_error {
        let python = if BUILT.executable.is_empty() || loaded.is_some() && expected.is_none() {
            format!("{base_prefix}/bin/python3")
        } else {
            BUILT.executable.to_string()
        };
        format!(
            "NumPy cannot be imported by the embedded Python, {loaded_text}: {e}. Python callbacks need it: install it into that Python (`{python} -m pip install numpy`; scripts/setup-python.sh does)"
        )
    } else {
        return Ok(());
    };
    Err(Error::FailedPrecondition(Detail::msg(message)))
}

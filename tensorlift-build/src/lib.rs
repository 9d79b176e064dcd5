//! Build-script helper for crates whose binaries use tensorlift's Python
//! callbacks (`numpy_function`, `py_func`, `py_function`).
//!
//! pyo3 links `libpython3.x.so` by its soname but records no run-time
//! search path, so a binary loads whichever libpython the dynamic loader
//! finds first — on a machine with pyenv (or conda) and a system Python,
//! often the system one, without NumPy. A build script cannot pass a linker
//! argument on to the crates that depend on it, so each crate with
//! binaries, tests or examples that embed Python calls [`link_python`] from
//! its own `build.rs`:
//!
//! ```toml
//! [build-dependencies]
//! tensorlift-build = { path = "../tensorlift/tensorlift-build" }
//! ```
//!
//! ```text
//! // build.rs
//! fn main() {
//!     tensorlift_build::link_python();
//! }
//! ```
//!
//! Without it, tensorlift's first Python callback fails with a
//! `FailedPrecondition` error naming the libpython that was loaded, the one
//! tensorlift was built against, and this fix.

use std::env;

/// The `links` metadata key under which tensorlift's build script exports
/// the directory of its libpython (`DEP_TENSORLIFT_PYTHON_LIB_DIR` in the
/// build scripts of crates that depend on tensorlift).
const DEP_KEY: &str = "DEP_TENSORLIFT_PYTHON_LIB_DIR";

/// Records the directory of the libpython tensorlift was built against as
/// a run-time search path (rpath) of every binary, test and example of the
/// calling crate. Call it from `build.rs` of a crate that depends on
/// tensorlift (or on pyo3 directly). Where that directory is unknown (a
/// static or unknown Python build, or called from a crate that depends on
/// neither) it emits a cargo warning and nothing else.
pub fn link_python() {
    match python_lib_dir() {
        Some(dir) => println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}"),
        None => println!(
            "cargo:warning=tensorlift_build::link_python(): the directory of libpython is unknown ({DEP_KEY} is not set: does this crate depend on tensorlift with its `python` feature?); no rpath was added"
        ),
    }
}

/// The directory of the libpython tensorlift was built against: from
/// tensorlift's build script (in a crate that depends on tensorlift), else
/// from pyo3's build configuration (in a crate that depends on pyo3
/// directly, tensorlift itself included). Only meaningful in a build script.
pub fn python_lib_dir() -> Option<String> {
    if let Some(dir) = env::var(DEP_KEY).ok().filter(|d| !d.is_empty()) {
        return Some(dir);
    }
    if has_pyo3_config() {
        return pyo3_build_config::get().lib_dir().map(str::to_string);
    }
    None
}

/// Whether pyo3's build configuration is readable here:
/// `pyo3_build_config::get()` panics unless pyo3 or pyo3-ffi is a direct
/// dependency, which is when cargo sets one of these variables.
fn has_pyo3_config() -> bool {
    ["DEP_PYO3_PYTHON_PYO3_CONFIG", "DEP_PYTHON_PYO3_CONFIG"]
        .iter()
        .any(|v| env::var_os(v).is_some())
}

/// For tensorlift's own build scripts: exports the libpython directory to
/// the build scripts of dependent crates (`links` metadata, read by
/// [`python_lib_dir`]), and records pyo3's configuration as compile-time
/// environment variables of the calling crate (`TENSORLIFT_PYTHON_LIB_DIR`,
/// `_LIB_NAME`, `_VERSION`, `_EXECUTABLE`, `_SHARED`: "1" or "0"), which
/// the runtime compares with the Python it finds loaded. The calling crate
/// must depend on pyo3 directly.
#[doc(hidden)]
pub fn export_python_config() {
    if !has_pyo3_config() {
        return;
    }
    let c = pyo3_build_config::get();
    let v = c.version();
    let lib_dir = c.lib_dir().unwrap_or_default();
    println!("cargo:python_lib_dir={lib_dir}");
    let version = format!("{}.{}", v.major, v.minor);
    let vars = [
        ("LIB_DIR", lib_dir),
        ("LIB_NAME", c.lib_name().unwrap_or_default()),
        ("VERSION", version.as_str()),
        ("EXECUTABLE", c.executable().unwrap_or_default()),
        ("SHARED", if c.shared() { "1" } else { "0" }),
    ];
    for (name, value) in vars {
        println!("cargo:rustc-env=TENSORLIFT_PYTHON_{name}={value}");
    }
}

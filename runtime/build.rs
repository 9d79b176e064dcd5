//! With the `python` feature, records which Python pyo3 builds against, so
//! that the first Python callback can tell whether the process loaded that
//! libpython (see `src/python_env.rs`).
fn main() {
    #[cfg(feature = "python")]
    tensorlift_build::export_python_config();
}

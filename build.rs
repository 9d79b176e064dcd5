//! With the `python` feature, the binaries and tests embed CPython: record
//! the directory of libpython as an rpath so they run without
//! LD_LIBRARY_PATH (pyo3 links it but adds no rpath). The directory is
//! also exported to the build scripts of crates that depend on tensorlift
//! (`links = "tensorlift"`), where `tensorlift_build::link_python()` does
//! the same for their binaries; the tests read the configuration as
//! `TENSORLIFT_PYTHON_*` variables.
fn main() {
    #[cfg(feature = "python")]
    {
        tensorlift_build::link_python();
        tensorlift_build::export_python_config();
    }
}

//! With the `python` feature, the binaries and tests embed CPython: record
//! the directory of libpython as an rpath so they run without
//! LD_LIBRARY_PATH (pyo3 links it but adds no rpath).
fn main() {
    #[cfg(feature = "python")]
    {
        let config = pyo3_build_config::get();
        if let Some(dir) = config.lib_dir() {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}

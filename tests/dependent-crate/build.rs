//! What a crate whose binaries use tensorlift's Python callbacks puts in
//! its build.rs: the one line below.
fn main() {
    if std::env::var_os("CARGO_FEATURE_WITHOUT_LINK_PYTHON").is_none() {
        tensorlift_build::link_python();
    }
}

//! The `tensorlift` command-line tool.

fn main() {
    std::process::exit(tensorlift::cli::main_with_args(std::env::args_os()));
}

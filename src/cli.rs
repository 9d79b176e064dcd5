//! The `tensorlift` command line: `run`, `compile`, `bench` and `graph`.

mod compare;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};
use tensorlift_compiler::{JitOptions, OptLevel};
use tensorlift_ir::{Error, Graph, Result};
use tensorlift_runtime::{Tensor, interp};

/// tensorlift: run and inspect tensor programs written in the .tlir text format.
#[derive(Debug, Parser)]
#[command(name = "tensorlift", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How `run` executes a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// The reference interpreter (after the optimization passes).
    Interp,
    /// Compiled to native code by the Cranelift JIT.
    Jit,
}

/// Cranelift optimization level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Opt {
    /// No optimization.
    None,
    /// Optimize for speed.
    Speed,
}

fn jit_options(opt: Opt, exact: bool) -> JitOptions {
    JitOptions {
        opt_level: match opt {
            Opt::None => OptLevel::None,
            Opt::Speed => OptLevel::Speed,
        },
        exact,
        vectorize: true,
        threads: true,
        wide_math: true,
        flush_denormals: true,
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program on .npy inputs and write each result as DIR/<name>.npy.
    Run {
        /// The program (.tlir).
        program: PathBuf,
        /// An input as NAME=FILE.npy, NAME being the parameter's name.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Where to write the results.
        #[arg(long, value_name = "DIR")]
        output_dir: PathBuf,
        /// Execution mode.
        #[arg(long, value_enum, default_value_t = Mode::Interp)]
        mode: Mode,
        /// JIT: bit-exact with the interpreter (no approximated functions,
        /// no reordered float reductions, no division as a product with a
        /// reciprocal, denormals kept rather than flushed to zero).
        #[arg(long)]
        exact: bool,
        /// Binds the program's callback target NAME to a Python function,
        /// imported from `module` (found on PYTHONPATH); repeatable.
        #[arg(long = "callback", value_name = "NAME=module:function")]
        callbacks: Vec<String>,
    },
    /// Compile a program and write every stage (input, optimized, fused
    /// plan, Cranelift IR) to DIR.
    Compile {
        /// The program (.tlir).
        program: PathBuf,
        /// Where to write the stages.
        #[arg(long, value_name = "DIR")]
        dump_to: PathBuf,
        /// Cranelift optimization level.
        #[arg(long, value_enum, default_value_t = Opt::Speed)]
        opt_level: Opt,
        /// Bit-exact with the interpreter.
        #[arg(long)]
        exact: bool,
    },
    /// Run a program interpreted and compiled on the same inputs: both
    /// times (medians), the ratio, and whether the results agree within the
    /// JIT's tolerance (docs/compiler.md); exit status 1 when they do not.
    Bench {
        /// The program (.tlir).
        program: PathBuf,
        /// An input as NAME=FILE.npy.
        #[arg(long = "input", value_name = "NAME=FILE.npy")]
        inputs: Vec<String>,
        /// Timed runs of each (after one warm-up run).
        #[arg(long, default_value_t = 20)]
        iters: usize,
        /// Also write each compiled result as DIR/<name>.npy.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
        /// JIT: bit-exact with the interpreter, and checked to be.
        #[arg(long)]
        exact: bool,
    },
    /// Print the program as a Graphviz DOT graph.
    Graph {
        /// The program (.tlir).
        program: PathBuf,
    },
}

/// Runs the CLI on `args` and returns the process exit code. Errors are one
/// line on stderr; nothing panics out of here.
pub fn main_with_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match std::panic::catch_unwind(|| execute(cli)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("tensorlift: error: {}", one_line(&e));
            1
        }
        Err(_) => {
            eprintln!("tensorlift: internal error: unexpected panic (please report it)");
            70
        }
    }
}

fn one_line(e: &Error) -> String {
    e.to_string().replace('\n', " ")
}

/// A time in milliseconds as text: microseconds below 0.1 ms, where three
/// decimals of a millisecond would read 0.000 for a small program.
fn duration(ms: f64) -> String {
    if ms < 0.1 {
        format!("{:.2} µs", ms * 1e3)
    } else {
        format!("{ms:.3} ms")
    }
}

/// Loads and parses a program; parse errors carry `file:line:col`.
pub fn load_program(path: &Path) -> Result<Graph> {
    let src = std::fs::read(path).map_err(|e| {
        Error::NotFound(tensorlift_ir::Detail::msg(format!(
            "cannot read {}: {e}",
            path.display()
        )))
    })?;
    let src = String::from_utf8(src)
        .map_err(|_| Error::invalid(format!("{} is not UTF-8 text", path.display())))?;
    let file = path.display().to_string();
    tensorlift_ir::text::parse(&src, &file).map_err(|e| match e {
        Error::InvalidArgument(mut d) if d.pos.is_some() => {
            if let Some(p) = d.pos.take() {
                // (Not where the node's own site already says it.)
                let named = d.node.as_ref().is_some_and(|n| {
                    (n.site.line, n.site.col) == (p.line, p.col) && *n.site.file == *file
                });
                if !named {
                    d.message = format!("{file}:{}:{}: {}", p.line, p.col, d.message);
                }
            }
            Error::InvalidArgument(d)
        }
        other @ (Error::InvalidArgument(_)
        | Error::OutOfRange(_)
        | Error::ResourceExhausted(_)
        | Error::Unimplemented(_)
        | Error::Unknown(_)
        | Error::Internal(_)
        | Error::NotFound(_)
        | Error::FailedPrecondition(_)
        | Error::JitIncompatible { .. }) => other.context(&file),
    })
}

/// Matches `NAME=FILE` arguments to the graph's parameters, in order.
pub fn load_inputs(g: &Graph, specs: &[String]) -> Result<Vec<Tensor>> {
    let params = g.params();
    let names: Vec<&str> = params
        .iter()
        .map(|p| g.producer(*p).name.as_str())
        .collect();
    let mut slots: Vec<Option<Tensor>> = vec![None; params.len()];
    for s in specs {
        let (name, file) = s
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--input '{s}' must look like NAME=FILE.npy")))?;
        let i = names.iter().position(|n| *n == name).ok_or_else(|| {
            Error::invalid(format!(
                "--input '{name}': the program has no parameter named '{name}' (it has: {})",
                names.join(", ")
            ))
        })?;
        if slots[i].is_some() {
            return Err(Error::invalid(format!("--input '{name}' is given twice")));
        }
        let t = crate::npy::load(file)?;
        let want = g.ty(params[i]);
        if t.dtype() != want.dtype || !want.shape.accepts(t.shape()) {
            return Err(Error::invalid(format!(
                "--input '{name}': {file} holds {}{:?}, but parameter '{name}' is {want}",
                t.dtype().short_name(),
                t.shape()
            )));
        }
        slots[i] = Some(t);
    }
    slots
        .into_iter()
        .zip(&names)
        .map(|(t, n)| t.ok_or_else(|| Error::invalid(format!("missing --input {n}=FILE.npy"))))
        .collect()
}

/// Binds `NAME=module:function` arguments (`--callback`) to the program's
/// callback targets, then checks that every target is bound. Errors: a
/// malformed or repeated argument, or a NAME that is not one of the
/// program's callback targets (the error lists them), is
/// `InvalidArgument`; a Python function that cannot be loaded keeps its
/// error, prefixed with the argument; an unbound target is `NotFound`
/// naming every unbound target and the option that binds it.
pub fn bind_callbacks(g: &mut Graph, specs: &[String]) -> Result<()> {
    let targets = crate::callback_targets(g);
    let mut seen: Vec<&str> = Vec::new();
    for s in specs {
        let (name, spec) = s
            .split_once('=')
            .filter(|(n, f)| !n.is_empty() && !f.is_empty())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "--callback '{s}' must look like NAME=module:function"
                ))
            })?;
        if !targets.iter().any(|t| t.name == name) {
            return Err(Error::invalid(format!(
                "--callback '{name}': the program has no callback named '{name}' (its callbacks: {})",
                crate::bind::names(&targets)
            )));
        }
        if seen.contains(&name) {
            return Err(Error::invalid(format!(
                "--callback '{name}' is given twice"
            )));
        }
        seen.push(name);
        bind_python_spec(g, name, spec).map_err(|e| e.context(format!("--callback '{name}'")))?;
    }
    let unbound: Vec<String> = crate::callback_targets(g)
        .into_iter()
        .filter(|t| !t.bound)
        .map(|t| format!("'{}'", t.name))
        .collect();
    if unbound.is_empty() {
        return Ok(());
    }
    let (noun, verb) = if unbound.len() == 1 {
        ("callback", "has")
    } else {
        ("callbacks", "have")
    };
    Err(Error::NotFound(tensorlift_ir::Detail::msg(format!(
        "{noun} {} of the program {verb} no callable bound (the text format does not serialize callback bodies); bind each with --callback NAME=module:function",
        unbound.join(", ")
    ))))
}

#[cfg(feature = "python")]
fn bind_python_spec(g: &mut Graph, name: &str, spec: &str) -> Result<()> {
    let func = crate::python::callable(spec)?;
    crate::python::bind(g, name, func)
}

#[cfg(not(feature = "python"))]
fn bind_python_spec(_: &mut Graph, _: &str, _: &str) -> Result<()> {
    Err(Error::unimplemented(
        "binding a Python function needs tensorlift built with the `python` feature",
    ))
}

fn execute(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Graph { program } => {
            let g = load_program(&program)?;
            print!("{}", tensorlift_ir::to_dot(&g));
            Ok(())
        }
        Command::Compile {
            program,
            dump_to,
            opt_level,
            exact,
        } => {
            let g = load_program(&program)?;
            let exe = tensorlift_compiler::compile(&g, &jit_options(opt_level, exact))?;
            let stem = program.file_stem().map_or_else(
                || "program".to_string(),
                |s| s.to_string_lossy().into_owned(),
            );
            exe.dump_to(&dump_to, &stem, Some(&g))?;
            println!(
                "wrote {stem}.input.tlir, {stem}.optimized.tlir, {stem}.fused.txt, {stem}.clif to {}",
                dump_to.display()
            );
            Ok(())
        }
        Command::Bench {
            program,
            inputs,
            iters,
            output_dir,
            exact,
        } => bench(
            &program,
            &inputs,
            iters.max(1),
            output_dir.as_deref(),
            exact,
        ),
        Command::Run {
            program,
            inputs,
            output_dir,
            mode,
            exact,
            callbacks,
        } => {
            let mut g = load_program(&program)?;
            bind_callbacks(&mut g, &callbacks)?;
            let inputs = load_inputs(&g, &inputs)?;
            let outputs = match mode {
                Mode::Interp => {
                    interp::optimize(&mut g)?;
                    interp::run(&g, &inputs)?
                }
                Mode::Jit => tensorlift_compiler::compile(&g, &jit_options(Opt::Speed, exact))?
                    .run(&inputs)?,
            };
            write_outputs(&g, &outputs, &output_dir)
        }
    }
}

/// Writes each output `t` of `g` as `dir/<name>.npy`.
fn write_outputs(g: &Graph, outputs: &[Tensor], dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::invalid(format!("cannot create {}: {e}", dir.display())))?;
    for (o, t) in g.outputs().iter().zip(outputs) {
        if o.name.contains(['/', '\\']) || o.name.starts_with('.') {
            return Err(Error::invalid(format!(
                "output name '{}' cannot be used as a file name",
                o.name
            )));
        }
        crate::npy::save(t, dir.join(format!("{}.npy", o.name)))?;
    }
    Ok(())
}

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(
    program: &Path,
    specs: &[String],
    iters: usize,
    output_dir: Option<&Path>,
    exact: bool,
) -> Result<()> {
    let g = load_program(program)?;
    let inputs = load_inputs(&g, specs)?;
    let mut opt = g.clone();
    interp::optimize(&mut opt)?;
    let t = std::time::Instant::now();
    let exe = tensorlift_compiler::compile(&g, &jit_options(Opt::Speed, exact))?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let time = |f: &dyn Fn() -> Result<Vec<Tensor>>| -> Result<(f64, Vec<Tensor>)> {
        let out = f()?;
        let mut ts = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = std::time::Instant::now();
            f()?;
            ts.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((median_ms(ts), out))
    };
    let (ti, oi) = time(&|| interp::run(&opt, &inputs))?;
    let (tj, oj) = time(&|| exe.run(&inputs))?;
    println!("program      {}", program.display());
    println!("compile      {}", duration(compile_ms));
    println!("interpreter  {} (median of {iters})", duration(ti));
    println!("jit          {} (median of {iters})", duration(tj));
    println!("speedup      {:.2}x", ti / tj);
    if let Some(dir) = output_dir {
        write_outputs(&g, &oj, dir)?;
        println!("wrote        the JIT's results to {}", dir.display());
    }
    let names: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
    match compare::compare(&names, &oi, &oj, exact) {
        Ok(compare::Agreement::BitIdentical) => {
            println!("agreement    bit-identical results");
            Ok(())
        }
        Ok(compare::Agreement::Within { worst, rtol }) => {
            println!(
                "agreement    within the JIT's tolerance: max |jit - interpreter| = {worst:.2e} × max |interpreter| (tolerance {rtol:e})"
            );
            Ok(())
        }
        Err(e) => {
            println!("agreement    NO (see the error)");
            Err(e)
        }
    }
}

//! Runs a parsed `.tlir` program whose callbacks are bound from Rust: the
//! text names each callback target but holds no body, so the program binds
//! a Rust closure to one target and a Python function to the other, then
//! runs interpreted and compiled and checks that both agree.
//!
//! Run: `cargo run --example bind_parsed`

use tensorlift::{JitOptions, Tensor, bind_host_fn, bind_python, callback_targets};

/// `clip` is a Rust closure (host_fn); `smooth` is called twice — two nodes,
/// one target — and is a NumPy function.
const PROGRAM: &str = r#"graph @bind_parsed {
  %x = parameter 0 : f32[6]
  %s = numpy_function "smooth" (%x) : (f32[6])
  %c = host_fn "clip" (%s) : (f32[6])
  %s2 = numpy_function "smooth" (%c) : (f32[6])
  %y = add(%s2, %x) : f32[6]
  return %y as "y"
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut graph = tensorlift::ir::text::parse(PROGRAM, "bind_parsed.tlir")?;
    for t in callback_targets(&graph) {
        println!(
            "callback target {:<8} {:<15} Tout {:?}  called by {:?}",
            t.name,
            t.kind.name(),
            t.tout,
            t.nodes
        );
    }

    // A Rust closure: borrowed tensors in, new tensors out.
    bind_host_fn(&mut graph, "clip", |ins: &[Tensor]| {
        Ok(vec![Tensor::from(
            ins[0].array_view::<f32>()?.mapv(|v| v.clamp(-1.0, 1.0)),
        )])
    })?;

    // A Python function from source text (or from a module on PYTHONPATH:
    // `tensorlift::python::callable("mypkg.filters:smooth")`).
    let smooth = tensorlift::python::callable_from_source(
        "import numpy as np\n\
         def smooth(x):\n    \
             p = np.pad(x, 1, mode='edge')\n    \
             return ((p[:-2] + p[1:-1] + p[2:]) / 3).astype(np.float32)\n",
        "smooth",
    )?;
    bind_python(&mut graph, "smooth", smooth)?;

    let x = Tensor::from(ndarray::arr1(&[-3.0f32, 0.5, 2.0, -0.25, 4.0, 1.0]).into_dyn());

    let mut optimized = graph.clone();
    tensorlift::runtime::interp::optimize(&mut optimized)?;
    let interpreted = tensorlift::runtime::interp::run(&optimized, std::slice::from_ref(&x))?;
    let compiled = tensorlift::compiler::compile(&graph, &JitOptions::default())?
        .run(std::slice::from_ref(&x))?;

    let (a, b) = (
        interpreted[0].array_view::<f32>()?,
        compiled[0].array_view::<f32>()?,
    );
    println!("interpreted {a}");
    println!("compiled    {b}");
    if a.iter().zip(b.iter()).any(|(p, q)| (p - q).abs() > 1e-6) {
        return Err("the interpreter and the compiled code disagree".into());
    }
    Ok(())
}

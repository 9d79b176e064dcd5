//! The optimization passes, one behaviour at a time, on graphs written in
//! the text format.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use tensorlift::ir::passes::{constant_fold, cse, dce, simplify};
use tensorlift::ir::{Graph, text, verify};
use tensorlift::runtime::interp::{self, InterpreterEval};

fn g(body: &str) -> Graph {
    text::parse(&format!("graph @t {{\n{body}\n}}\n"), "t").unwrap()
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes().iter().map(|n| n.op.name()).collect()
}

#[test]
fn dce_removes_unused_pure_nodes_but_keeps_parameters_and_stateful_callbacks() {
    let mut x = g(
        "%x = parameter 0 : f32[2]\n%y = parameter 1 : f32[2]\n%a = exp(%x) : f32[2]\n%b = neg(%x) : f32[2]\n%cb = host_fn \"log_it\" (%a) stateful : ()\n%p = py_func \"pure\" (%a) : (f32[2])\nreturn %b as \"b\"",
    );
    assert!(dce(&mut x));
    assert_eq!(ops(&x), ["parameter", "parameter", "exp", "neg", "host_fn"]);
    verify(&x).unwrap();
    assert!(!dce(&mut x), "second run changes nothing");
}

#[test]
fn cse_merges_pure_nodes_only() {
    let mut x = g(
        "%x = parameter 0 : f32[2]\n%a = exp(%x) : f32[2]\n%b = exp(%x) : f32[2]\n%c = add(%a, %b) : f32[2]\n%s1 = numpy_function \"f\" (%x) stateful : (f32[2])\n%s2 = numpy_function \"f\" (%x) stateful : (f32[2])\n%p1 = numpy_function \"g\" (%x) : (f32[2])\n%p2 = numpy_function \"g\" (%x) : (f32[2])\nreturn %c as \"c\", %s1 as \"s1\", %s2 as \"s2\", %p1 as \"p1\", %p2 as \"p2\"",
    );
    assert!(cse(&mut x));
    verify(&x).unwrap();
    assert_eq!(
        ops(&x),
        [
            "parameter",
            "exp",
            "add",
            "numpy_function",
            "numpy_function",
            "numpy_function"
        ]
    );
    let add = x.nodes().iter().find(|n| n.op.name() == "add").unwrap();
    assert_eq!(add.inputs[0], add.inputs[1]);
    // The two pure callbacks became one; both outputs read it.
    assert_eq!(x.outputs()[3].value, x.outputs()[4].value);
    assert_ne!(x.outputs()[1].value, x.outputs()[2].value);
}

#[test]
fn constant_folding_evaluates_constant_subgraphs() {
    let mut x = g(
        "%x = parameter 0 : f32[2]\n%a = constant [1.0, 4.0] : f32[2]\n%b = sqrt(%a) : f32[2]\n%c = add(%b, %b) : f32[2]\n%d = mul(%x, %c) : f32[2]\nreturn %d as \"d\"",
    );
    assert!(constant_fold(&mut x, &InterpreterEval));
    dce(&mut x);
    assert_eq!(ops(&x), ["parameter", "constant", "mul"]);
    assert!(
        text::print(&x).contains("constant [2.0, 4.0] : f32[2]"),
        "{}",
        text::print(&x)
    );
    // An error during folding leaves the node to fail at run time instead.
    let mut y = g(
        "%t = constant [1.0, 2.0] : f32[2]\n%i = constant [5] : i32[1]\n%r = take(%t, %i) {axis=0} : f32[1]\nreturn %r as \"r\"",
    );
    assert!(!constant_fold(&mut y, &InterpreterEval));
    assert!(
        interp::run(&y, &[])
            .unwrap_err()
            .to_string()
            .contains("indices[0] = 5 is not in [0, 2)")
    );
}

#[test]
fn large_broadcasts_of_constants_are_not_folded() {
    let mut x = g(
        "%c = constant 1.0 : f32[]\n%b = broadcast_in_dim(%c) {shape=[100000], dims=[]} : f32[100000]\nreturn %b as \"b\"",
    );
    assert!(!constant_fold(&mut x, &InterpreterEval));
    let mut y = g(
        "%c = constant 1.0 : f32[]\n%b = broadcast_in_dim(%c) {shape=[8], dims=[]} : f32[8]\nreturn %b as \"b\"",
    );
    assert!(constant_fold(&mut y, &InterpreterEval));
}

#[test]
fn simplification_is_exact() {
    let mut x = g(
        "%x = parameter 0 : f32[2]\n%i = parameter 1 : i32[2]\n%z = constant 0.0 : f32[]\n%nz = constant -0.0 : f32[]\n%one = constant 1.0 : f32[]\n%iz = constant 0 : i32[]\n%a = add(%x, %z) : f32[2]\n%b = add(%x, %nz) : f32[2]\n%c = mul(%x, %one) : f32[2]\n%d = neg(%x) : f32[2]\n%e = neg(%d) : f32[2]\n%f = add(%i, %iz) : i32[2]\n%g = sub(%x, %z) : f32[2]\n%h = convert(%x) : f32[2]\nreturn %a as \"a\", %b as \"b\", %c as \"c\", %e as \"e\", %f as \"f\", %g as \"g\", %h as \"h\"",
    );
    assert!(simplify(&mut x));
    verify(&x).unwrap();
    let x0 = x.params()[0];
    let i0 = x.params()[1];
    let outs: Vec<_> = x.outputs().iter().map(|o| o.value).collect();
    // Float arithmetic stays: x + 0.0 is not x for x = -0.0, and x + (-0.0),
    // x * 1, x - 0 quiet a signalling NaN that x itself is (the NaN
    // policy). -(-x) (sign-bit operations), i + 0 and convert-to-self go.
    for k in [0, 1, 2, 5] {
        assert_ne!(outs[k], x0, "output {k}");
    }
    assert_eq!([outs[3], outs[4], outs[6]], [x0, i0, x0]);
}

//! Property tests over random graphs and shapes: the text format round
//! trips, the verifier accepts what every pass produces, optimization never
//! changes a result, parsing never panics, and implicit broadcasting follows
//! NumPy's rule.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::random_graph::random_graph;
use ndarray::Dimension;
use proptest::prelude::*;
use tensorlift::ir::passes::{run_to_fixed_point, standard_passes};
use tensorlift::ir::{Shape, text, verify};
use tensorlift::runtime::interp::{self, InterpreterEval};
use tensorlift::{Sym, Tensor, function};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_round_trip_through_text(seed in any::<u64>(), n in 1usize..40) {
        let (g, _) = random_graph(seed, n);
        verify(&g).unwrap();
        let printed = text::print(&g);
        let parsed = text::parse(&printed, "x").unwrap_or_else(|e| panic!("{e}\n{printed}"));
        prop_assert_eq!(&parsed, &g);
        prop_assert_eq!(text::print(&parsed), printed);
    }

    #[test]
    fn optimization_preserves_results(seed in any::<u64>(), n in 1usize..40) {
        let (g, inputs) = random_graph(seed, n);
        let mut opt = g.clone();
        // The verifier runs after every pass.
        run_to_fixed_point(&mut opt, &standard_passes(&InterpreterEval), true).unwrap();
        prop_assert!(opt.nodes().len() <= g.nodes().len());
        let before = interp::run(&g, &inputs);
        let after = interp::run(&opt, &inputs);
        match (before, after) {
            (Ok(b), Ok(a)) => {
                prop_assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(&b) {
                    prop_assert!(common::same_bits(x, y), "optimized {:?} != {:?}\n{}\n{}", x, y, text::print(&g), text::print(&opt));
                }
            }
            (Err(b), Err(a)) => prop_assert_eq!(a.code(), b.code()),
            (b, a) => prop_assert!(false, "one side failed: before {:?}, after {:?}\n{}", b.err(), a.err(), text::print(&g)),
        }
    }

    #[test]
    fn parsing_mutated_text_never_panics(seed in any::<u64>(), cut in 0usize..2000, byte in any::<u8>()) {
        let (g, _) = random_graph(seed, 8);
        let mut bytes = text::print(&g).into_bytes();
        let at = cut % bytes.len();
        match seed % 3 {
            0 => { bytes[at] = byte; }
            1 => { bytes.truncate(at); }
            _ => { bytes.insert(at, byte); }
        }
        let s = String::from_utf8_lossy(&bytes);
        if let Err(e) = text::parse(&s, "m") {
            prop_assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn implicit_broadcasting_follows_numpy(a in proptest::collection::vec(1usize..4, 0..4), b in proptest::collection::vec(1usize..4, 0..4)) {
        let x = Tensor::from(ndarray::ArrayD::from_shape_fn(a.clone(), |i| (0..i.ndim()).map(|k| i[k]).collect::<Vec<_>>().iter().fold(0.0f32, |s, &k| s * 10.0 + k as f32)));
        let y = Tensor::from(ndarray::ArrayD::from_shape_fn(b.clone(), |i| (0..i.ndim()).map(|k| i[k]).collect::<Vec<_>>().iter().fold(0.0f32, |s, &k| s * 7.0 + k as f32)));
        let f = function(|x: Sym, y: Sym| x + y);
        let reference = numpy_broadcast(&a, &b);
        match (f.call(&[x.clone(), y.clone()]), reference) {
            (Ok(out), Some(shape)) => {
                prop_assert_eq!(out[0].shape(), &shape[..]);
                let (xa, ya) = (x.to_ndarray::<f32>().unwrap(), y.to_ndarray::<f32>().unwrap());
                let want = &xa + &ya; // ndarray's own broadcasting is NumPy's
                prop_assert_eq!(out[0].to_ndarray::<f32>().unwrap(), want);
            }
            (Err(e), None) => prop_assert!(e.to_string().contains("cannot be broadcast"), "{}", e),
            (r, s) => prop_assert!(false, "shapes {:?} + {:?}: got {:?}, reference {:?}", a, b, r.map(|o| o[0].shape().to_vec()), s),
        }
    }

    #[test]
    fn broadcast_shapes_with_unknown_dims(a in proptest::collection::vec(proptest::option::of(1usize..4), 0..4), b in proptest::collection::vec(proptest::option::of(1usize..4), 0..4)) {
        let r = tensorlift::ir::infer::broadcast_shapes(&Shape::Ranked(a.clone()), &Shape::Ranked(b.clone()));
        // Whenever the known parts are compatible, the result's rank is the
        // larger rank and every known dim of the result is one of the inputs'.
        if let Ok(Shape::Ranked(out)) = r {
            prop_assert_eq!(out.len(), a.len().max(b.len()));
            for (i, d) in out.iter().enumerate() {
                let pa = (i + a.len()).checked_sub(out.len()).map(|k| a[k]);
                let pb = (i + b.len()).checked_sub(out.len()).map(|k| b[k]);
                if let Some(n) = d {
                    prop_assert!(pa == Some(Some(*n)) || pb == Some(Some(*n)) || *n == 1);
                }
            }
        }
    }
}

fn numpy_broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let x = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let y = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            if x == y || y == 1 {
                Some(x)
            } else if x == 1 {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

//! A loop that runs until its caller asks it to stop: the check an
//! embedding registers (`runtime::interrupt`, the Python package's Ctrl-C)
//! stops interpreted and compiled loops alike, with its error. Its own
//! binary: the check is global to the process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tensorlift::{Code, DType, Error, Sym, function, while_loop};

static STOP: AtomicBool = AtomicBool::new(false);

fn check() -> tensorlift::Result<()> {
    match STOP.load(Ordering::SeqCst) {
        true => Err(Error::invalid("stopped by the test")),
        false => Ok(()),
    }
}

#[test]
fn a_registered_check_stops_runaway_loops_in_both_modes() {
    assert!(tensorlift::runtime::interrupt::set_check(check));
    for jit in [false, true] {
        STOP.store(false, Ordering::SeqCst);
        // Never ends: x stops growing at 2^24 in f32, and stays >= 0.
        let f = function(|x: Sym| {
            let zero = x.graph().scalar(DType::F32, 0.0);
            while_loop(|c| c[0].greater_equal(&zero), |c| vec![&c[0] + 1.0], &[x]).remove(0)
        })
        .jit_compile(jit);
        let stopper = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            STOP.store(true, Ordering::SeqCst);
        });
        let t = Instant::now();
        let e = f.call(&[common::f32s(&[1.0], &[])]).unwrap_err();
        stopper.join().unwrap();
        assert_eq!(e.code(), Code::InvalidArgument, "jit {jit}: {e}");
        assert!(
            e.to_string().contains("stopped by the test"),
            "jit {jit}: {e}"
        );
        // (Generous: a slow machine; the loop polls every 2^14 iterations.)
        assert!(t.elapsed() < Duration::from_secs(60), "jit {jit}");
        // Without a stop, a loop that ends runs to its end.
        STOP.store(false, Ordering::SeqCst);
        let g = function(|x: Sym| {
            let end = x.graph().scalar(DType::F32, 100_000.0);
            while_loop(|c| c[0].less(&end), |c| vec![&c[0] + 1.0], &[x]).remove(0)
        })
        .jit_compile(jit);
        let y = g.call(&[common::f32s(&[0.0], &[])]).unwrap();
        assert_eq!(common::to_vec::<f32>(&y[0]), vec![100_000.0], "jit {jit}");
    }
}

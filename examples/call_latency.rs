//! Single-call latency after idle: each call follows a 20 ms sleep, so the
//! thread pool has gone to sleep and the core may have clocked down, as in
//! the peers' best-of-7 loop (`examples/peer_method.rs`) and in a server
//! answering sparse requests. Prints the median and the fastest of 41
//! such calls per workload; criterion's medians (`benches/jit.rs`) time
//! back-to-back calls instead.
//!
//! `cargo run --release --example call_latency` (`IDLE_MS=0` for
//! back-to-back calls, `RAYON_NUM_THREADS=1` for one core).
#![allow(clippy::unwrap_used, reason = "a measurement script")]

use tensorlift::{Function, Tensor, function};

#[path = "../benches/workloads/mod.rs"]
#[allow(dead_code, reason = "the module also serves benches/jit.rs")]
mod workloads;

use workloads::{arith, softmax, tensor, transc};

/// Median and minimum (ms) of 41 calls, each after `idle` ms asleep.
fn after_idle(f: &Function, inputs: &[Tensor], idle: u64) -> (f64, f64) {
    f.call(inputs).unwrap();
    let mut t: Vec<f64> = (0..41)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(idle));
            let t = std::time::Instant::now();
            std::hint::black_box(f.call(inputs).unwrap());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[0])
}

fn main() {
    let idle = std::env::var("IDLE_MS").map_or(20, |v| v.parse().unwrap());
    let x = [tensor(&[1 << 20], 1)];
    let rows = [tensor(&[4096, 1024], 2)];
    let cases: [(&str, Function, &[Tensor]); 3] = [
        ("arith 1M", function(arith).jit_compile(true), &x),
        ("transcendental 1M", function(transc).jit_compile(true), &x),
        (
            "softmax 4096x1024",
            function(softmax).jit_compile(true),
            &rows,
        ),
    ];
    for (name, f, inputs) in &cases {
        let (median, min) = after_idle(f, inputs, idle);
        println!("{name:<18} median {median:7.3} ms   fastest {min:7.3} ms");
    }
}

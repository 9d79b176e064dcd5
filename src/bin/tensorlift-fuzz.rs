//! `tensorlift-fuzz`: runs the fuzz targets (docs/reliability.md).
//!
//! ```text
//! tensorlift-fuzz [--target tlir|npy|graph|all] [--cases N] [--seconds S]
//!                 [--seed N] [--corpus DIR] [--findings DIR]
//!                 [--timeout-ms N] [--memory-mb N]
//!                 [--nan-payloads] [--control-flow]
//! tensorlift-fuzz --replay TARGET FILE...
//! ```
//! Exits 1 when a run found anything (crash, hang, panic, mismatch).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tensorlift::fuzz::driver::{self, Config};
use tensorlift::fuzz::targets::{Target, Verdict};

fn usage(msg: &str) -> ExitCode {
    eprintln!("tensorlift-fuzz: {msg}");
    eprintln!(
        "usage: tensorlift-fuzz [--target tlir|npy|graph|all] [--cases N] [--seconds S] [--seed N] [--corpus DIR] [--findings DIR] [--timeout-ms N] [--memory-mb N] [--nan-payloads] [--control-flow]\n       tensorlift-fuzz --replay TARGET FILE..."
    );
    ExitCode::from(2)
}

fn target(name: &str) -> Result<Target, String> {
    Target::from_name(name).ok_or_else(|| format!("unknown target {name:?}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let Some(t) = args.get(1).and_then(|n| Target::from_name(n)) else {
            return usage("--child needs a target");
        };
        return match driver::child_main(t) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(3),
        };
    }
    if args.first().map(String::as_str) == Some("--replay") {
        let Some(t) = args.get(1).and_then(|n| Target::from_name(n)) else {
            return usage("--replay needs a target");
        };
        let mut bad = false;
        for f in &args[2..] {
            match std::fs::read(f) {
                Ok(bytes) => {
                    let v = t.run(&bytes);
                    bad |= matches!(v, Verdict::Mismatch(_));
                    println!("{f}: {v:?}");
                }
                Err(e) => return usage(&format!("{f}: {e}")),
            }
        }
        return if bad {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    match run(&args) {
        Ok(code) => code,
        Err(msg) => usage(&msg),
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut targets = Target::ALL.to_vec();
    let mut cases = None;
    let mut seconds = None;
    let mut seed = 1u64;
    let mut corpus = PathBuf::from("fuzz/corpus");
    let mut findings = PathBuf::from("target/fuzz/findings");
    let mut timeout = Duration::from_secs(20);
    let mut memory_mb = 4096;
    let mut nan_payloads = false;
    let mut control_flow = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--target" => {
                let v = value()?;
                targets = if v == "all" {
                    Target::ALL.to_vec()
                } else {
                    vec![target(&v)?]
                };
            }
            "--cases" => cases = Some(num(value()?)?),
            "--seconds" => {
                let v = value()?;
                seconds = Some(
                    v.parse::<f64>()
                        .map_err(|e| format!("--seconds {v}: {e}"))?,
                );
            }
            "--seed" => seed = num(value()?)?,
            "--corpus" => corpus = PathBuf::from(value()?),
            "--findings" => findings = PathBuf::from(value()?),
            "--timeout-ms" => timeout = Duration::from_millis(num(value()?)?),
            "--memory-mb" => memory_mb = num(value()?)?,
            "--nan-payloads" => nan_payloads = true,
            "--control-flow" => control_flow = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if cases.is_none() && seconds.is_none() {
        return Err("give --cases N or --seconds S (or both)".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut found = 0;
    for t in targets {
        let config = Config {
            target: t,
            seed,
            cases,
            seconds,
            corpus: corpus.join(t.name()),
            findings: findings.join(t.name()),
            timeout,
            memory_mb,
            nan_payloads,
            control_flow,
            exe: exe.clone(),
        };
        let summary = driver::run(&config).map_err(|e| format!("{}: {e}", t.name()))?;
        println!("{}", summary.line(t));
        found += summary.findings();
    }
    Ok(if found == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

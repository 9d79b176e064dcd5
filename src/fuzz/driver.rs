//! The fuzz driver: a parent that makes cases and a child process that
//! runs them, each under `catch_unwind`. A child that dies (stack
//! overflow, abort, signal) or hangs past the case timeout is recorded
//! with the input it was running and restarted; the run goes on.
//!
//! Protocol (child stdin): `u32 LE length, bytes` per case; (child stdout):
//! `u8 kind, u32 LE length, message` per case, kind 0..=3 a
//! [`Verdict::depth`], 4 a mismatch, 5 a panic.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::fuzz::mutate::Mutator;
use crate::fuzz::random_graph::{GenOptions, Rng, SHAPES, random_graph, random_tensor};
use crate::fuzz::targets::{Target, Verdict, graph_case, hash};
use crate::ir::{ALL_DTYPES, TensorType, text};
use crate::{DType, npy};

/// What one fuzzing run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// The target fuzzed.
    pub target: Target,
    /// Seeds everything the parent draws: one seed, one sequence of cases.
    pub seed: u64,
    /// Stop after this many cases (when set).
    pub cases: Option<u64>,
    /// Stop after this long (when set).
    pub seconds: Option<f64>,
    /// Folder of seed inputs (`fuzz/corpus/<target>`); may be missing.
    pub corpus: PathBuf,
    /// Folder the inputs that crashed, hung, panicked or mismatched are
    /// written to.
    pub findings: PathBuf,
    /// A case running longer than this is a hang.
    pub timeout: Duration,
    /// The child's address-space limit in MiB (`ulimit -v`), 0 for none.
    pub memory_mb: u64,
    /// Graph target: draw NaN payloads (signalling, negative NaNs).
    pub nan_payloads: bool,
    /// Graph target: draw loops and branches.
    pub control_flow: bool,
    /// The program the child runs: this executable, with `--child NAME`.
    pub exe: PathBuf,
}

/// Counts of one run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Cases run.
    pub cases: u64,
    /// Cases per verdict depth (rejected, accepted, ran, compared).
    pub depth: [u64; 4],
    /// Child processes that died (stack overflow, abort, signal).
    pub crashes: u64,
    /// Cases that ran past the timeout.
    pub hangs: u64,
    /// Panics caught in the child.
    pub panics: u64,
    /// Oracle disagreements.
    pub mismatches: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl Summary {
    /// Findings of every kind.
    pub fn findings(&self) -> u64 {
        self.crashes + self.hangs + self.panics + self.mismatches
    }

    /// One line: the figures docs/reliability.md reports.
    pub fn line(&self, target: Target) -> String {
        let secs = self.elapsed.as_secs_f64();
        format!(
            "fuzz {:<5}: {} cases in {:.1} s ({:.0}/s); rejected {}, accepted {}, ran {}, compared {}; crashes {}, hangs {}, panics {}, mismatches {}",
            target.name(),
            self.cases,
            secs,
            self.cases as f64 / secs.max(1e-9),
            self.depth[0],
            self.depth[1],
            self.depth[2],
            self.depth[3],
            self.crashes,
            self.hangs,
            self.panics,
            self.mismatches
        )
    }
}

/// The child's main loop: runs each case read from stdin under
/// `catch_unwind` and writes its outcome to stdout, until stdin closes.
pub fn child_main(target: Target) -> std::io::Result<()> {
    let last_panic: Arc<Mutex<String>> = Arc::default();
    let hook_slot = last_panic.clone();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut s) = hook_slot.lock() {
            *s = info.to_string();
        }
    }));
    let mut stdin = BufReader::new(std::io::stdin().lock());
    let mut stdout = std::io::stdout().lock();
    loop {
        let mut len = [0u8; 4];
        if stdin.read_exact(&mut len).is_err() {
            return Ok(());
        }
        let mut input = vec![0u8; u32::from_le_bytes(len) as usize];
        stdin.read_exact(&mut input)?;
        let (kind, msg) = match std::panic::catch_unwind(|| target.run(&input)) {
            Ok(Verdict::Mismatch(m)) => (4u8, m),
            Ok(v) => (v.depth(), String::new()),
            Err(_) => (5, last_panic.lock().map(|s| s.clone()).unwrap_or_default()),
        };
        stdout.write_all(&[kind])?;
        stdout.write_all(&(msg.len() as u32).to_le_bytes())?;
        stdout.write_all(msg.as_bytes())?;
        stdout.flush()?;
    }
}

/// A running child: its stdin, a channel of its replies, and the tail of
/// its stderr.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<(u8, String)>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Worker {
    fn start(config: &Config) -> std::io::Result<Worker> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"if [ "$1" != 0 ]; then ulimit -v $(($1 * 1024)); fi; shift; exec "$@""#)
            .arg("sh")
            .arg(config.memory_mb.to_string())
            .arg(&config.exe)
            .arg("--child")
            .arg(config.target.name())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let missing = || std::io::Error::other("child process without a pipe");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or_else(missing)?);
        let mut err_pipe = child.stderr.take().ok_or_else(missing)?;
        let (tx, replies) = channel();
        std::thread::spawn(move || {
            loop {
                let mut head = [0u8; 5];
                if stdout.read_exact(&mut head).is_err() {
                    return;
                }
                let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
                let mut msg = vec![0u8; len];
                if stdout.read_exact(&mut msg).is_err()
                    || tx
                        .send((head[0], String::from_utf8_lossy(&msg).into_owned()))
                        .is_err()
                {
                    return;
                }
            }
        });
        let stderr: Arc<Mutex<Vec<u8>>> = Arc::default();
        let tail = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err_pipe.read(&mut buf) {
                if let Ok(mut t) = tail.lock() {
                    t.extend_from_slice(&buf[..n]);
                    let excess = t.len().saturating_sub(8192);
                    t.drain(..excess);
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            replies,
            stderr,
        })
    }

    /// Runs one case: `Ok(reply)`, or `Err(why)` when the child died or hung
    /// (the child is then killed and reaped).
    fn run(&mut self, input: &[u8], timeout: Duration) -> Result<(u8, String), (bool, String)> {
        let sent = self
            .stdin
            .write_all(&(input.len() as u32).to_le_bytes())
            .and_then(|()| self.stdin.write_all(input))
            .and_then(|()| self.stdin.flush());
        let reply = match sent {
            Ok(()) => self.replies.recv_timeout(timeout),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        };
        match reply {
            Ok(r) => Ok(r),
            Err(e) => {
                let hang = e == RecvTimeoutError::Timeout;
                let _ = self.child.kill();
                let status = self.child.wait();
                // Give the stderr reader a moment to drain the pipe.
                std::thread::sleep(Duration::from_millis(20));
                let tail = self
                    .stderr
                    .lock()
                    .map(|t| String::from_utf8_lossy(&t).into_owned())
                    .unwrap_or_default();
                let what = if hang {
                    format!("hang: no result after {timeout:?}")
                } else {
                    format!("child died: {status:?}")
                };
                Err((hang, format!("{what}\nstderr tail:\n{tail}")))
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The files of `dir`, sorted by name (none when it does not exist).
pub fn read_dir_sorted(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect()
}

/// Seed inputs made by tensorlift itself: printed random graphs for the
/// text target, written tensors of every dtype and shape for `.npy`.
fn generated_seeds(target: Target) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(7);
    match target {
        Target::Text => (0..32u64)
            .filter_map(|s| random_graph(s, 1 + (s as usize % 12)).ok())
            .map(|(g, _)| text::print(&g).into_bytes())
            .collect(),
        Target::Npy => {
            let mut out = Vec::new();
            for dtype in ALL_DTYPES {
                if dtype == DType::String {
                    continue;
                }
                for dims in SHAPES.iter().take(4).chain(&[&[0usize, 3][..]]) {
                    let Ok(t) = random_tensor(&mut rng, &TensorType::known(dtype, dims)) else {
                        continue;
                    };
                    let mut bytes = Vec::new();
                    if npy::write(&t, &mut bytes).is_ok() {
                        out.push(bytes);
                    }
                }
            }
            out
        }
        Target::Graph => Vec::new(),
    }
}

/// Runs one fuzzing campaign and returns its counts; each finding is
/// written to `config.findings` as `<kind>-<hash>.<target>` with a `.txt`
/// beside it saying what happened. Errors only when the child cannot be
/// started or a finding cannot be written.
pub fn run(config: &Config) -> std::io::Result<Summary> {
    let start = Instant::now();
    let mut seeds: Vec<Vec<u8>> = read_dir_sorted(&config.corpus)
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    seeds.extend(generated_seeds(config.target));
    let max_len = match config.target {
        Target::Text => 1 << 20,
        Target::Npy | Target::Graph => 1 << 16,
    };
    let mut mutator = Mutator::new(config.seed, max_len);
    let mut pool = seeds.clone();
    let n_seeds = pool.len();
    let mut summary = Summary::default();
    let mut worker = Worker::start(config)?;
    let mut recorded = 0u32;
    loop {
        let done_cases = config.cases.is_some_and(|n| summary.cases >= n);
        let done_time = config
            .seconds
            .is_some_and(|s| start.elapsed().as_secs_f64() >= s);
        if done_cases || done_time {
            break;
        }
        // Every seed once as it is, then mutations of the pool.
        let i = summary.cases as usize;
        let input = match config.target {
            Target::Graph => {
                let r = mutator.rng();
                let options = GenOptions {
                    nan_payloads: config.nan_payloads,
                    control_flow: config.control_flow,
                };
                graph_case(r.next(), r.next() as u8, options)
            }
            Target::Text | Target::Npy if i < n_seeds => pool[i].clone(),
            Target::Text | Target::Npy => {
                let base = mutator.rng().below(pool.len());
                let base = pool[base].clone();
                mutator.mutate(&base, &pool)
            }
        };
        summary.cases += 1;
        let finding = match worker.run(&input, config.timeout) {
            Ok((kind @ 0..=3, _)) => {
                summary.depth[usize::from(kind)] += 1;
                // Inputs that got further are kept for mutation: the pool
                // drifts toward valid programs without coverage feedback.
                let keep = match kind {
                    0 => false,
                    1 => mutator.rng().chance(5),
                    _ => mutator.rng().chance(25),
                };
                // Small ones only: the pool stays within a few MiB.
                let small = input.len() <= 1 << 12;
                if keep && small && config.target != Target::Graph && i >= n_seeds {
                    if pool.len() < 4096 {
                        pool.push(input);
                    } else {
                        let slot = n_seeds + mutator.rng().below(pool.len() - n_seeds);
                        pool[slot] = input;
                    }
                }
                None
            }
            Ok((4, msg)) => {
                summary.mismatches += 1;
                Some(("mismatch", msg, input))
            }
            Ok((_, msg)) => {
                summary.panics += 1;
                Some(("panic", msg, input))
            }
            Err((hang, msg)) => {
                if hang {
                    summary.hangs += 1;
                } else {
                    summary.crashes += 1;
                }
                worker = Worker::start(config)?;
                Some((if hang { "hang" } else { "crash" }, msg, input))
            }
        };
        if let Some((kind, msg, input)) = finding {
            eprintln!(
                "fuzz {}: {kind} at case {}: {}",
                config.target.name(),
                summary.cases - 1,
                msg.lines().next().unwrap_or("")
            );
            // At most 50 files a run: one bug found a thousand times
            // should not fill the disk.
            if recorded < 50 {
                recorded += 1;
                std::fs::create_dir_all(&config.findings)?;
                let name = format!("{kind}-{:016x}", hash(&input));
                let base = config.findings.join(name);
                std::fs::write(base.with_extension(config.target.name()), &input)?;
                std::fs::write(base.with_extension("txt"), &msg)?;
            }
        }
    }
    summary.elapsed = start.elapsed();
    Ok(summary)
}

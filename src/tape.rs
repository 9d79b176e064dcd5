//! Run-time tapes of reverse mode through `while` loops whose trip count
//! depends on data ([`WhileCarries::Tape`]): each loop's forward pass
//! pushes the carries its gradient reads, the backward loop pops them.
//!
//! The two ends are stateful `host_fn` callbacks the autodiff names
//! `{TAPE_PREFIX}{n}_push` / `_pop`; [`bind_tapes`] binds them to a stack
//! per tape and thread. A gradient runs on the thread that called it (its
//! callbacks too, interpreted and compiled), so concurrent calls from other
//! threads have stacks of their own, and a call made from inside a callback
//! (re-entrancy) pushes and pops its own entries above the caller's.

use std::cell::RefCell;
use std::collections::HashMap;

use tensorlift_ir::autodiff::TAPE_PREFIX;
use tensorlift_ir::{CallbackKind, Error, Graph, Op, Result};
use tensorlift_runtime::Tensor;
use tensorlift_runtime::callback::HostCallback;

#[cfg(doc)]
use tensorlift_ir::autodiff::WhileCarries;

thread_local! {
    /// Tape number → the entries pushed and not yet popped on this thread.
    static TAPES: RefCell<HashMap<u64, Vec<Vec<Tensor>>>> = RefCell::new(HashMap::new());
}

/// Every callback target of `g` and of the regions inside it.
fn targets(g: &Graph, out: &mut Vec<String>) {
    for node in g.nodes() {
        if let Op::Callback(c) = &node.op
            && !out.contains(&c.target)
        {
            out.push(c.target.clone());
        }
        for r in node.op.regions() {
            targets(r.graph(), out);
        }
    }
}

/// Binds the tape callbacks of a gradient built with
/// [`WhileCarries::Tape`]; other targets are left alone.
pub(crate) fn bind_tapes(g: &mut Graph) -> Result<()> {
    let mut all = Vec::new();
    targets(g, &mut all);
    for target in all {
        let Some(rest) = target.strip_prefix(TAPE_PREFIX) else {
            continue;
        };
        let (n, end) = rest
            .split_once('_')
            .and_then(|(n, end)| Some((n.parse::<u64>().ok()?, end)))
            .ok_or_else(|| Error::internal(format!("malformed tape target '{target}'")))?;
        let cb = match end {
            "push" => HostCallback::new(CallbackKind::HostFn, move |inputs: &[Tensor]| {
                TAPES.with(|t| {
                    t.borrow_mut().entry(n).or_default().push(inputs.to_vec());
                });
                Ok(Vec::new())
            }),
            "pop" => HostCallback::new(CallbackKind::HostFn, move |_: &[Tensor]| {
                TAPES.with(|t| {
                    let mut tapes = t.borrow_mut();
                    let stack = tapes.get_mut(&n);
                    let entry = stack.and_then(Vec::pop).ok_or_else(|| {
                        Error::internal(format!(
                            "loop gradient tape {n} popped more entries than its forward loop pushed"
                        ))
                    })?;
                    if tapes.get(&n).is_some_and(Vec::is_empty) {
                        tapes.remove(&n);
                    }
                    Ok(entry)
                })
            }),
            other => {
                return Err(Error::internal(format!(
                    "tape target '{target}' ends in '{other}', not push or pop"
                )));
            }
        };
        g.bind(target.clone(), cb.into_ref());
    }
    Ok(())
}

//! Host callbacks: callables bound to the callback nodes of a graph, run by
//! the interpreter and by compiled code (as runtime steps).
//!
//! A [`HostCallback`] wraps the user's function behind one signature,
//! `Fn(&[Tensor]) -> Result<Vec<Tensor>>`; every call checks what came back
//! (count, dtype, declared shape) and turns a panic into an `Internal`
//! error naming the op, so the function and its compiled code stay usable
//! after any callback failure.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tensorlift_ir::{CallbackKind, CallbackRef, Error, Graph, Node, Op, Result, TensorType};

use crate::tensor::Tensor;

/// The callable behind a callback node.
pub type HostFnBody = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A callable bound to a callback target.
pub struct HostCallback {
    kind: CallbackKind,
    body: Box<HostFnBody>,
}

impl std::fmt::Debug for HostCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostCallback({})", self.kind.name())
    }
}

impl HostCallback {
    /// A callback of `kind` running `body`.
    pub fn new(
        kind: CallbackKind,
        body: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    ) -> Self {
        HostCallback {
            kind,
            body: Box::new(body),
        }
    }

    /// The API that made it.
    pub fn kind(&self) -> CallbackKind {
        self.kind
    }

    /// As the opaque reference the IR binds by name.
    pub fn into_ref(self) -> CallbackRef {
        CallbackRef(Arc::new(self))
    }
}

/// The callback bound to `target` in `graph`.
pub fn bound(graph: &Graph, target: &str) -> Result<Arc<HostCallback>> {
    let r = graph.binding(target).ok_or_else(|| {
        Error::NotFound(tensorlift_ir::Detail::msg(format!(
            "callback '{target}' has no callable bound; the text format does not serialize callback bodies, so bind one before running"
        )))
    })?;
    r.0.clone().downcast::<HostCallback>().map_err(|_| {
        Error::invalid(format!(
            "callback '{target}' is bound to something that is not a host callback"
        ))
    })
}

/// Runs callback node `node` on `args`: calls the bound function (catching
/// panics) and checks the count, dtypes and declared shapes of its results.
pub fn run_callback(graph: &Graph, node: &Node, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let Op::Callback(op) = &node.op else {
        return Err(Error::internal(
            "run_callback on a node that is not a callback",
        ));
    };
    let cb = bound(graph, &op.target)?;
    let inputs: Vec<Tensor> = args.iter().map(|t| (*t).clone()).collect();
    let outs = match catch_unwind(AssertUnwindSafe(|| (cb.body)(&inputs))) {
        Ok(r) => r?,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            return Err(Error::internal(format!("the callback panicked: {msg}")));
        }
    };
    let want: Vec<&TensorType> = node.results.iter().map(|r| graph.ty(*r)).collect();
    check_results(op.kind.name(), &node.name, &want, &outs)?;
    Ok(outs)
}

/// Checks a callback's results against its declared types.
pub fn check_results(kind: &str, name: &str, want: &[&TensorType], got: &[Tensor]) -> Result<()> {
    if want.len() != got.len() {
        return Err(Error::invalid(format!(
            "{kind} '{name}' returned {} value(s), but Tout declares {}",
            got.len(),
            want.len()
        )));
    }
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        if w.dtype != g.dtype() {
            return Err(Error::invalid(format!(
                "output {i} of {kind} '{name}' is {}, but Tout says {}",
                g.dtype(),
                w.dtype
            )));
        }
        if !w.shape.accepts(g.shape()) {
            return Err(Error::invalid(format!(
                "output {i} of {kind} '{name}' has shape {:?}, but its declared shape is {}",
                g.shape(),
                w.shape
            )));
        }
    }
    Ok(())
}

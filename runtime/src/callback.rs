//! Host callbacks: callables bound to the callback nodes of a graph, run by
//! the interpreter and by compiled code (as runtime steps).
//!
//! A [`HostCallback`] wraps the user's function behind one of three
//! signatures: borrowed tensors in, new tensors out (`host_fn`); tensors by
//! value (NumPy callbacks, which hand buffers no one else references to
//! Python without a copy); or borrowed views in, runtime-provided output
//! buffers to fill (`host_fn_into`, no allocation). Every call checks what came back
//! (count, dtype, declared shape) and turns a panic into an `Internal`
//! error naming the op, so the function and its compiled code stay usable
//! after any callback failure.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use tensorlift_ir::{CallbackKind, CallbackRef, DType, Error, Graph, Node, Op, Result, TensorType};

use crate::tensor::{AlignedBytes, Tensor, TensorMut, TensorRef};

/// A callable reading borrowed tensors and returning new ones (`host_fn`).
pub type HostFnBody = dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync;

/// A callable taking its inputs by value: a tensor nothing else references
/// may be handed on (to NumPy) and written without a copy.
pub type OwnedBody = dyn Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync;

/// A callable reading borrowed inputs and filling output buffers the runtime
/// provides (`host_fn_into`): no allocation on either side.
pub type BuffersBody = dyn Fn(&[TensorRef<'_>], &mut [TensorMut<'_>]) -> Result<()> + Send + Sync;

enum Body {
    Tensors(Box<HostFnBody>),
    Owned(Box<OwnedBody>),
    Buffers(Box<BuffersBody>),
}

/// A callable bound to a callback target.
pub struct HostCallback {
    kind: CallbackKind,
    body: Body,
}

impl std::fmt::Debug for HostCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostCallback({})", self.kind.name())
    }
}

/// The message of a caught panic.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn caught<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(Error::internal(format!(
            "the callback panicked: {}",
            panic_message(&*p)
        )))
    })
}

impl HostCallback {
    /// A callback of `kind` running `body` on borrowed tensors.
    pub fn new(
        kind: CallbackKind,
        body: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    ) -> Self {
        HostCallback {
            kind,
            body: Body::Tensors(Box::new(body)),
        }
    }

    /// A callback of `kind` that takes its inputs by value.
    pub fn owned(
        kind: CallbackKind,
        body: impl Fn(Vec<Tensor>) -> Result<Vec<Tensor>> + Send + Sync + 'static,
    ) -> Self {
        HostCallback {
            kind,
            body: Body::Owned(Box::new(body)),
        }
    }

    /// A callback of `kind` that fills output buffers (its outputs must
    /// have static shapes and non-string dtypes).
    pub fn buffers(
        kind: CallbackKind,
        body: impl Fn(&[TensorRef<'_>], &mut [TensorMut<'_>]) -> Result<()> + Send + Sync + 'static,
    ) -> Self {
        HostCallback {
            kind,
            body: Body::Buffers(Box::new(body)),
        }
    }

    /// The API that made it.
    pub fn kind(&self) -> CallbackKind {
        self.kind
    }

    /// True when it takes inputs by value (so a runtime should hand it
    /// values no one reads again rather than copies).
    pub fn takes_ownership(&self) -> bool {
        matches!(self.body, Body::Owned(_))
    }

    /// True when it writes into output buffers ([`HostCallback::call_buffers`]).
    pub fn writes_buffers(&self) -> bool {
        matches!(self.body, Body::Buffers(_))
    }

    /// As the opaque reference the IR binds by name.
    pub fn into_ref(self) -> CallbackRef {
        CallbackRef(Arc::new(self))
    }

    /// Calls it on `inputs`, catching panics; `want` are the declared result
    /// types (used to allocate outputs of a buffer-filling callback).
    pub fn call(&self, inputs: Vec<Tensor>, want: &[&TensorType]) -> Result<Vec<Tensor>> {
        match &self.body {
            Body::Tensors(f) => caught(|| f(&inputs)),
            Body::Owned(f) => caught(|| f(inputs)),
            Body::Buffers(f) => {
                let shapes = want
                    .iter()
                    .map(|t| {
                        t.shape
                            .as_known()
                            .filter(|_| t.dtype != DType::String)
                            .ok_or_else(|| {
                                Error::internal(format!(
                                    "{} outputs need static shapes and byte dtypes, not {t}",
                                    self.kind.name()
                                ))
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut bufs: Vec<AlignedBytes> = want
                    .iter()
                    .zip(&shapes)
                    .map(|(t, s)| {
                        Ok(AlignedBytes::try_zeroed(crate::tensor::byte_len(
                            t.dtype, s,
                        )?)?)
                    })
                    .collect::<Result<_>>()?;
                {
                    let ins: Vec<TensorRef<'_>> = inputs.iter().map(Tensor::as_ref).collect();
                    let mut outs = bufs
                        .iter_mut()
                        .zip(want.iter().zip(&shapes))
                        .map(|(b, (t, s))| TensorMut::new(t.dtype, s, b.as_mut_slice()))
                        .collect::<Result<Vec<_>>>()?;
                    caught(|| f(&ins, &mut outs))?;
                }
                bufs.into_iter()
                    .zip(want.iter().zip(&shapes))
                    .map(|(b, (t, s))| Tensor::from_aligned(t.dtype, s, b))
                    .collect::<Result<Vec<_>>>()
                    .map_err(|e| {
                        Error::invalid(format!(
                            "{} wrote invalid output bytes: {e}",
                            self.kind.name()
                        ))
                    })
            }
        }
    }

    /// Calls a buffer-filling callback on borrowed inputs and outputs,
    /// catching panics (the compiled-code fast path: nothing is allocated).
    pub fn call_buffers(&self, ins: &[TensorRef<'_>], outs: &mut [TensorMut<'_>]) -> Result<()> {
        match &self.body {
            Body::Buffers(f) => caught(|| f(ins, outs)),
            Body::Tensors(_) | Body::Owned(_) => Err(Error::internal(
                "call_buffers on a callback that returns tensors",
            )),
        }
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

/// Runs callback node `node` on `args` (by value: a tensor no one else
/// references may be handed to the callable without a copy): calls the
/// bound function (catching panics) and checks the count, dtypes and
/// declared shapes of its results.
pub fn run_callback(graph: &Graph, node: &Node, args: Vec<Tensor>) -> Result<Vec<Tensor>> {
    let Op::Callback(op) = &node.op else {
        return Err(Error::internal(
            "run_callback on a node that is not a callback",
        ));
    };
    let cb = bound(graph, &op.target)?;
    let want: Vec<&TensorType> = node.results.iter().map(|r| graph.ty(*r)).collect();
    let outs = cb.call(args, &want)?;
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

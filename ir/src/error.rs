//! The one error type shared by every tensorlift crate.
//!
//! Variants follow TensorFlow's status codes, so that errors map one-to-one
//! onto `tf.errors.*` in the Python package. Every variant carries a
//! [`Detail`]: the message plus, where known, the node (name, op, creation
//! site) and the text position (line:column) the error is about.

use std::fmt;
use std::sync::Arc;

thread_local! {
    /// The site [`Site::scoped`] set on this thread, if any.
    static FRONT_END_SITE: std::cell::RefCell<Option<Site>> = const { std::cell::RefCell::new(None) };
}

/// Where a node was created: a `#[track_caller]` location in Rust, a source
/// position in a `.tlir` file, or a Python frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// File the node was created in.
    pub file: Arc<str>,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

impl Site {
    /// The site of the caller of a `#[track_caller]` function.
    ///
    /// Inside [`Site::scoped`] it is the front end's site instead: a front
    /// end in another language (the Python package) names its own frames.
    #[track_caller]
    pub fn caller() -> Self {
        if let Some(s) = FRONT_END_SITE.with(|c| c.borrow().clone()) {
            return s;
        }
        Self::from(std::panic::Location::caller())
    }

    /// Runs `f` with every [`Site::caller`] on this thread answering `site`
    /// (restored afterwards, also when `f` unwinds).
    pub fn scoped<R>(site: Site, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Site>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                FRONT_END_SITE.with(|c| *c.borrow_mut() = previous);
            }
        }
        let _restore = Restore(FRONT_END_SITE.with(|c| c.borrow_mut().replace(site)));
        f()
    }

    /// A site in a source file of another language (a Python frame).
    pub fn at(file: &str, line: u32, col: u32) -> Self {
        Site {
            file: Arc::from(file),
            line,
            col,
        }
    }

    /// A site that is not known (nodes made by passes inherit their
    /// originating node's site instead; this is for tests and tools).
    pub fn unknown() -> Self {
        Site {
            file: Arc::from("<unknown>"),
            line: 0,
            col: 0,
        }
    }
}

impl From<&'static std::panic::Location<'static>> for Site {
    fn from(loc: &'static std::panic::Location<'static>) -> Self {
        Site {
            file: Arc::from(loc.file()),
            line: loc.line(),
            col: loc.column(),
        }
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// The node an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    /// The node's unique name.
    pub name: String,
    /// The op's text name (`add`, `numpy_function`, ...).
    pub op: String,
    /// Where the node was created.
    pub site: Site,
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}' (created at {})", self.op, self.name, self.site)
    }
}

/// A position in a text file (1-based line and column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

/// What an error says, and what it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detail {
    /// Human-readable explanation.
    pub message: String,
    /// The node the error is about, if any.
    pub node: Option<NodeRef>,
    /// Position in a text file, for parse errors.
    pub pos: Option<TextPos>,
}

impl Detail {
    /// A detail with only a message.
    pub fn msg(message: impl Into<String>) -> Self {
        Detail {
            message: message.into(),
            node: None,
            pos: None,
        }
    }
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(pos) = &self.pos {
            write!(f, "{}:{}: ", pos.line, pos.col)?;
        }
        if let Some(node) = &self.node {
            write!(f, "{node}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// A node that the JIT cannot compile, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offender {
    /// The node.
    pub node: NodeRef,
    /// Why it cannot be compiled.
    pub reason: String,
}

/// Kinds of error, TensorFlow's status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// Bad input from the caller (TensorFlow's `InvalidArgumentError`).
    InvalidArgument,
    /// An index or iteration out of range.
    OutOfRange,
    /// Memory or another resource is exhausted.
    ResourceExhausted,
    /// The operation is not implemented.
    Unimplemented,
    /// An error of unknown kind (e.g. an arbitrary Python exception).
    Unknown,
    /// A bug in tensorlift or a panic caught at a boundary.
    Internal,
    /// Something named does not exist (a file, a callback binding).
    NotFound,
    /// The system is not in a state the operation needs.
    FailedPrecondition,
    /// The program cannot be compiled with `jit_compile=true`.
    JitIncompatible,
}

/// tensorlift's error: a TensorFlow status kind plus a structured detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// See [`Code::InvalidArgument`].
    #[error("InvalidArgument: {0}")]
    InvalidArgument(Detail),
    /// See [`Code::OutOfRange`].
    #[error("OutOfRange: {0}")]
    OutOfRange(Detail),
    /// See [`Code::ResourceExhausted`].
    #[error("ResourceExhausted: {0}")]
    ResourceExhausted(Detail),
    /// See [`Code::Unimplemented`].
    #[error("Unimplemented: {0}")]
    Unimplemented(Detail),
    /// See [`Code::Unknown`].
    #[error("Unknown: {0}")]
    Unknown(Detail),
    /// See [`Code::Internal`].
    #[error("Internal: {0}")]
    Internal(Detail),
    /// See [`Code::NotFound`].
    #[error("NotFound: {0}")]
    NotFound(Detail),
    /// See [`Code::FailedPrecondition`].
    #[error("FailedPrecondition: {0}")]
    FailedPrecondition(Detail),
    /// The program cannot be compiled with `jit_compile=true`; lists every
    /// offending node.
    #[error("{}", jit_incompatible_message(.offenders))]
    JitIncompatible {
        /// Every node that cannot be compiled.
        offenders: Vec<Offender>,
    },
}

fn jit_incompatible_message(offenders: &[Offender]) -> String {
    let mut s = format!(
        "JitIncompatible: the function cannot be compiled with jit_compile=true: {} node(s) cannot be compiled:",
        offenders.len()
    );
    for o in offenders {
        s.push_str(&format!("\n  - {}: {}", o.node, o.reason));
    }
    s
}

/// `Result` with tensorlift's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An `InvalidArgument` error with only a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(Detail::msg(message))
    }

    /// An `Internal` error with only a message.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(Detail::msg(message))
    }

    /// An `Unimplemented` error with only a message.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Error::Unimplemented(Detail::msg(message))
    }

    /// An error of kind `code` with `detail`.
    pub fn new(code: Code, detail: Detail) -> Self {
        match code {
            Code::InvalidArgument => Error::InvalidArgument(detail),
            Code::OutOfRange => Error::OutOfRange(detail),
            Code::ResourceExhausted => Error::ResourceExhausted(detail),
            Code::Unimplemented => Error::Unimplemented(detail),
            Code::Unknown => Error::Unknown(detail),
            Code::Internal => Error::Internal(detail),
            Code::NotFound => Error::NotFound(detail),
            Code::FailedPrecondition => Error::FailedPrecondition(detail),
            Code::JitIncompatible => Error::JitIncompatible {
                offenders: Vec::new(),
            },
        }
    }

    /// The kind of this error.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::OutOfRange(_) => Code::OutOfRange,
            Error::ResourceExhausted(_) => Code::ResourceExhausted,
            Error::Unimplemented(_) => Code::Unimplemented,
            Error::Unknown(_) => Code::Unknown,
            Error::Internal(_) => Code::Internal,
            Error::NotFound(_) => Code::NotFound,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::JitIncompatible { .. } => Code::JitIncompatible,
        }
    }

    /// The detail, for every kind but `JitIncompatible`.
    pub fn detail(&self) -> Option<&Detail> {
        match self {
            Error::InvalidArgument(d)
            | Error::OutOfRange(d)
            | Error::ResourceExhausted(d)
            | Error::Unimplemented(d)
            | Error::Unknown(d)
            | Error::Internal(d)
            | Error::NotFound(d)
            | Error::FailedPrecondition(d) => Some(d),
            Error::JitIncompatible { .. } => None,
        }
    }

    fn detail_mut(&mut self) -> Option<&mut Detail> {
        match self {
            Error::InvalidArgument(d)
            | Error::OutOfRange(d)
            | Error::ResourceExhausted(d)
            | Error::Unimplemented(d)
            | Error::Unknown(d)
            | Error::Internal(d)
            | Error::NotFound(d)
            | Error::FailedPrecondition(d) => Some(d),
            Error::JitIncompatible { .. } => None,
        }
    }

    /// Attaches the node the error is about, unless one is already attached.
    pub fn at_node(mut self, node: NodeRef) -> Self {
        if let Some(d) = self.detail_mut()
            && d.node.is_none()
        {
            d.node = Some(node);
        }
        self
    }

    /// Appends a clause to the message ("...; the largest buffer is ...").
    pub fn and(mut self, more: impl fmt::Display) -> Self {
        if let Some(d) = self.detail_mut() {
            d.message = format!("{}; {more}", d.message);
        }
        self
    }

    /// Prefixes the message with more context ("while loading x.npy: ...").
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        if let Some(d) = self.detail_mut() {
            d.message = format!("{ctx}: {}", d.message);
        }
        self
    }
}

//! Nested structures of values, as `tf.nest` sees them: tuples, lists and
//! dicts (string keys) with leaves of any type.
//!
//! Flattening is depth-first, left to right; **a dict's entries come in
//! sorted-key order** (byte order of the UTF-8 keys, the same as Python's
//! `sorted` on `str`), which is `tf.nest`'s rule: `{"z": a, "a": b}` flattens
//! to `[b, a]`. [`Nest::unflatten`] packs leaves back in that order.
//! `tf.contrib.framework.py_func` from Rust uses it for its arguments, its
//! declared output types and shapes, and its results.

use std::collections::BTreeMap;
use std::fmt;

use tensorlift_ir::{Error, Result};

/// A nested structure with leaves of type `T`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nest<T> {
    /// One value.
    Leaf(T),
    /// A Python tuple.
    Tuple(Vec<Nest<T>>),
    /// A Python list.
    List(Vec<Nest<T>>),
    /// A Python dict with string keys; iterated (and flattened) in sorted-key
    /// order.
    Dict(BTreeMap<String, Nest<T>>),
}

/// One step into a nested structure: an index into a tuple or list, or a
/// dict key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathItem {
    /// A tuple or list position.
    Index(usize),
    /// A dict key.
    Key(String),
}

/// Where a value sits in a nested structure; displays as Python would
/// subscript it, e.g. `['b'][1]` (empty for the root).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NestPath(pub Vec<PathItem>);

impl NestPath {
    /// The root.
    pub fn root() -> Self {
        NestPath(Vec::new())
    }

    /// True for the root (no step).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `what` at this path, e.g. `output ['b'][1]`, or `what` alone at the
    /// root.
    pub fn describe(&self, what: &str) -> String {
        if self.is_root() {
            what.to_string()
        } else {
            format!("{what} {self}")
        }
    }

    /// This path extended by `item`.
    pub fn child(&self, item: PathItem) -> NestPath {
        let mut p = self.clone();
        p.0.push(item);
        p
    }
}

impl fmt::Display for NestPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for item in &self.0 {
            match item {
                PathItem::Index(i) => write!(f, "[{i}]")?,
                PathItem::Key(k) => write!(f, "[{}]", quote_key(k))?,
            }
        }
        Ok(())
    }
}

impl<T> Nest<T> {
    /// One value.
    pub fn leaf(value: T) -> Self {
        Nest::Leaf(value)
    }

    /// A tuple of `items`.
    pub fn tuple(items: impl IntoIterator<Item = Nest<T>>) -> Self {
        Nest::Tuple(items.into_iter().collect())
    }

    /// A list of `items`.
    pub fn list(items: impl IntoIterator<Item = Nest<T>>) -> Self {
        Nest::List(items.into_iter().collect())
    }

    /// A dict of `entries` (a repeated key keeps the last value, as a Python
    /// dict literal does).
    pub fn dict<K: Into<String>>(entries: impl IntoIterator<Item = (K, Nest<T>)>) -> Self {
        Nest::Dict(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// The leaf value, if this is a leaf.
    pub fn as_leaf(&self) -> Option<&T> {
        match self {
            Nest::Leaf(v) => Some(v),
            Nest::Tuple(_) | Nest::List(_) | Nest::Dict(_) => None,
        }
    }

    /// The leaf value, if this is a leaf.
    pub fn into_leaf(self) -> Option<T> {
        match self {
            Nest::Leaf(v) => Some(v),
            Nest::Tuple(_) | Nest::List(_) | Nest::Dict(_) => None,
        }
    }

    /// Item `i` of a tuple or list.
    pub fn item(&self, i: usize) -> Option<&Nest<T>> {
        match self {
            Nest::Tuple(v) | Nest::List(v) => v.get(i),
            Nest::Leaf(_) | Nest::Dict(_) => None,
        }
    }

    /// The value under `key` of a dict.
    pub fn key(&self, key: &str) -> Option<&Nest<T>> {
        match self {
            Nest::Dict(m) => m.get(key),
            Nest::Leaf(_) | Nest::Tuple(_) | Nest::List(_) => None,
        }
    }

    /// How many leaves it holds.
    pub fn num_leaves(&self) -> usize {
        match self {
            Nest::Leaf(_) => 1,
            Nest::Tuple(v) | Nest::List(v) => v.iter().map(Nest::num_leaves).sum(),
            Nest::Dict(m) => m.values().map(Nest::num_leaves).sum(),
        }
    }

    /// The leaves in flattening order (dicts by sorted key).
    pub fn leaves(&self) -> Vec<&T> {
        self.leaves_with_paths()
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    }

    /// The leaves in flattening order, each with its path.
    pub fn leaves_with_paths(&self) -> Vec<(NestPath, &T)> {
        fn walk<'a, T>(n: &'a Nest<T>, path: &NestPath, out: &mut Vec<(NestPath, &'a T)>) {
            match n {
                Nest::Leaf(v) => out.push((path.clone(), v)),
                Nest::Tuple(items) | Nest::List(items) => {
                    for (i, item) in items.iter().enumerate() {
                        walk(item, &path.child(PathItem::Index(i)), out);
                    }
                }
                Nest::Dict(m) => {
                    for (k, item) in m {
                        walk(item, &path.child(PathItem::Key(k.clone())), out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &NestPath::root(), &mut out);
        out
    }

    /// The leaves in flattening order, by value.
    pub fn into_leaves(self) -> Vec<T> {
        fn walk<T>(n: Nest<T>, out: &mut Vec<T>) {
            match n {
                Nest::Leaf(v) => out.push(v),
                Nest::Tuple(items) | Nest::List(items) => {
                    items.into_iter().for_each(|i| walk(i, out));
                }
                Nest::Dict(m) => m.into_values().for_each(|i| walk(i, out)),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// The same structure with `f` applied to every leaf (in flattening
    /// order).
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Nest<U> {
        self.map_ref(&mut f)
    }

    fn map_ref<U>(&self, f: &mut impl FnMut(&T) -> U) -> Nest<U> {
        match self {
            Nest::Leaf(v) => Nest::Leaf(f(v)),
            Nest::Tuple(items) => Nest::Tuple(items.iter().map(|i| i.map_ref(f)).collect()),
            Nest::List(items) => Nest::List(items.iter().map(|i| i.map_ref(f)).collect()),
            Nest::Dict(m) => Nest::Dict(m.iter().map(|(k, i)| (k.clone(), i.map_ref(f))).collect()),
        }
    }

    /// The same structure with `f` applied to every leaf by value (in
    /// flattening order).
    pub fn map_into<U>(self, mut f: impl FnMut(T) -> U) -> Nest<U> {
        self.map_owned(&mut f)
    }

    fn map_owned<U>(self, f: &mut impl FnMut(T) -> U) -> Nest<U> {
        match self {
            Nest::Leaf(v) => Nest::Leaf(f(v)),
            Nest::Tuple(items) => Nest::Tuple(items.into_iter().map(|i| i.map_owned(f)).collect()),
            Nest::List(items) => Nest::List(items.into_iter().map(|i| i.map_owned(f)).collect()),
            Nest::Dict(m) => Nest::Dict(m.into_iter().map(|(k, i)| (k, i.map_owned(f))).collect()),
        }
    }

    /// `leaves` packed into this structure (`tf.nest.pack_sequence_as`):
    /// the `i`-th leaf in flattening order becomes the `i`-th of `leaves`.
    /// `InvalidArgument` when the counts differ.
    pub fn unflatten<U>(&self, leaves: impl IntoIterator<Item = U>) -> Result<Nest<U>> {
        fn pack<T, U>(n: &Nest<T>, it: &mut impl Iterator<Item = U>) -> Option<Nest<U>> {
            Some(match n {
                Nest::Leaf(_) => Nest::Leaf(it.next()?),
                Nest::Tuple(items) => {
                    Nest::Tuple(items.iter().map(|i| pack(i, it)).collect::<Option<_>>()?)
                }
                Nest::List(items) => {
                    Nest::List(items.iter().map(|i| pack(i, it)).collect::<Option<_>>()?)
                }
                Nest::Dict(m) => Nest::Dict(
                    m.iter()
                        .map(|(k, i)| Some((k.clone(), pack(i, it)?)))
                        .collect::<Option<_>>()?,
                ),
            })
        }
        let mut it = leaves.into_iter().fuse();
        let packed = pack(self, &mut it);
        let extra = it.count();
        match packed {
            Some(p) if extra == 0 => Ok(p),
            Some(_) => Err(Error::invalid(format!(
                "cannot pack {} leaves into a structure of {}",
                self.num_leaves() + extra,
                self.num_leaves()
            ))),
            None => Err(Error::invalid(format!(
                "cannot pack fewer than {} leaves into a structure of {}",
                self.num_leaves(),
                self.num_leaves()
            ))),
        }
    }

    /// What it is, for messages: `a tuple of 2`, `a list of 3`, `a dict
    /// with keys ['a', 'b']`, `a single value`.
    pub fn describe(&self) -> String {
        match self {
            Nest::Leaf(_) => "a single value".into(),
            Nest::Tuple(v) => format!("a tuple of {}", v.len()),
            Nest::List(v) => format!("a list of {}", v.len()),
            Nest::Dict(m) => format!(
                "a dict with keys [{}]",
                m.keys()
                    .map(|k| quote_key(k))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The first place where `other`'s structure differs from this one, or
    /// `None` when they match (leaf values are not compared).
    pub fn structure_mismatch<U>(&self, other: &Nest<U>) -> Option<Mismatch> {
        self.mismatch_at(other, &NestPath::root())
    }

    fn mismatch_at<U>(&self, other: &Nest<U>, path: &NestPath) -> Option<Mismatch> {
        let differ = || {
            Some(Mismatch {
                path: path.clone(),
                this: self.describe(),
                other: other.describe(),
            })
        };
        match (self, other) {
            (Nest::Leaf(_), Nest::Leaf(_)) => None,
            (Nest::Tuple(a), Nest::Tuple(b)) | (Nest::List(a), Nest::List(b)) => {
                if a.len() != b.len() {
                    return differ();
                }
                a.iter()
                    .zip(b)
                    .enumerate()
                    .find_map(|(i, (x, y))| x.mismatch_at(y, &path.child(PathItem::Index(i))))
            }
            (Nest::Dict(a), Nest::Dict(b)) => {
                if !a.keys().eq(b.keys()) {
                    return differ();
                }
                a.iter()
                    .zip(b.values())
                    .find_map(|((k, x), y)| x.mismatch_at(y, &path.child(PathItem::Key(k.clone()))))
            }
            (Nest::Leaf(_) | Nest::Tuple(_) | Nest::List(_) | Nest::Dict(_), _) => differ(),
        }
    }
}

/// Where two structures differ ([`Nest::structure_mismatch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The path of the first difference.
    pub path: NestPath,
    /// What the structure asked about has there ([`Nest::describe`]).
    pub this: String,
    /// What the other structure has there.
    pub other: String,
}

/// A dict key `s` as Python's `repr` writes a plain string: in single quotes, with
/// backslashes and single quotes escaped.
pub fn quote_key(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

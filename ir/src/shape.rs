//! Shapes (known rank with known or unknown dims, or unknown rank) and
//! tensor types.

use std::fmt;

use crate::DType;

/// One dimension: its size, or `None` when not known until run time.
pub type Dim = Option<usize>;

/// The shape of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Known rank; each dim known or not.
    Ranked(Vec<Dim>),
    /// Unknown rank: what a callback without a declared shape produces.
    Unranked,
}

impl Shape {
    /// A fully known shape.
    pub fn known(dims: &[usize]) -> Self {
        Shape::Ranked(dims.iter().map(|&d| Some(d)).collect())
    }

    /// A scalar (rank 0).
    pub fn scalar() -> Self {
        Shape::Ranked(Vec::new())
    }

    /// The rank, if known.
    pub fn rank(&self) -> Option<usize> {
        match self {
            Shape::Ranked(d) => Some(d.len()),
            Shape::Unranked => None,
        }
    }

    /// The dims, if the rank is known.
    pub fn dims(&self) -> Option<&[Dim]> {
        match self {
            Shape::Ranked(d) => Some(d),
            Shape::Unranked => None,
        }
    }

    /// The dims, if every one is known.
    pub fn as_known(&self) -> Option<Vec<usize>> {
        self.dims()?.iter().copied().collect()
    }

    /// Rank and every dim known.
    pub fn is_static(&self) -> bool {
        self.as_known().is_some()
    }

    /// Number of elements, if the shape is static.
    /// `None` also when the count overflows `usize`.
    pub fn num_elements(&self) -> Option<usize> {
        self.as_known()?
            .iter()
            .try_fold(1usize, |acc, d| acc.checked_mul(*d))
    }

    /// True when a tensor of the concrete shape `dims` matches this shape.
    pub fn accepts(&self, dims: &[usize]) -> bool {
        match self {
            Shape::Unranked => true,
            Shape::Ranked(ds) => {
                ds.len() == dims.len()
                    && ds.iter().zip(dims).all(|(d, &n)| d.is_none_or(|d| d == n))
            }
        }
    }

    /// True when the two shapes could describe the same tensor.
    pub fn compatible(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Ranked(a), Shape::Ranked(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| x.is_none() || y.is_none() || x == y)
            }
            _ => true,
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Unranked => f.write_str("[*]"),
            Shape::Ranked(dims) => {
                f.write_str("[")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    match d {
                        Some(n) => write!(f, "{n}")?,
                        None => f.write_str("?")?,
                    }
                }
                f.write_str("]")
            }
        }
    }
}

/// The type of a value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Shape,
}

impl TensorType {
    /// A type from a dtype and a shape.
    pub fn new(dtype: DType, shape: Shape) -> Self {
        TensorType { dtype, shape }
    }

    /// A type with a fully known shape.
    pub fn known(dtype: DType, dims: &[usize]) -> Self {
        TensorType {
            dtype,
            shape: Shape::known(dims),
        }
    }

    /// A scalar type.
    pub fn scalar(dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: Shape::scalar(),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype.short_name(), self.shape)
    }
}

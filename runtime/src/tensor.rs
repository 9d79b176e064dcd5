//! `Tensor`: a dtype, a static shape and a shared, immutable buffer.

use std::fmt;
use std::sync::Arc;

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use num_complex::{Complex32, Complex64};
use tensorlift_ir::{DType, Error, Literal, LiteralData, Result, TensorType};

pub use crate::memory::AlignedBytes;

/// The storage behind a tensor.
#[derive(Clone, Debug)]
pub enum Data {
    /// Little-endian element bytes (bool: one byte, 0 or 1).
    Bytes(AlignedBytes),
    /// One byte string per element.
    Strings(Vec<Vec<u8>>),
    /// Element bytes owned by something else (a NumPy array a Python
    /// callback returned and nobody else references), adopted without a copy.
    Foreign(Arc<dyn ForeignBytes>),
}

/// Immutable, 16-byte aligned element bytes owned outside the runtime.
/// Implementations guarantee the bytes neither move nor change while the
/// value lives.
pub trait ForeignBytes: Send + Sync + fmt::Debug {
    /// The bytes.
    fn bytes(&self) -> &[u8];
}

/// An n-dimensional array: dtype, static shape, shared immutable data.
/// Cloning is cheap (the buffer is reference-counted).
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Arc<Data>,
}

/// Element types with a plain-old-data representation that kernels view in
/// place (`u8` doubles as the view of `bool`).
pub trait Pod: bytemuck::Pod + Send + Sync + 'static {}
impl<T: bytemuck::Pod + Send + Sync + 'static> Pod for T {}

impl Tensor {
    /// A tensor from raw little-endian bytes; checks the length (and, for
    /// bool, that every byte is 0 or 1).
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Self> {
        Self::from_aligned(dtype, shape, AlignedBytes::from_slice(bytes))
    }

    /// A tensor owning `bytes`; checks the length as [`Tensor::from_bytes`].
    pub fn from_aligned(dtype: DType, shape: &[usize], bytes: AlignedBytes) -> Result<Self> {
        if dtype == DType::String {
            return Err(Error::invalid(
                "a string tensor is made from strings, not bytes",
            ));
        }
        let want = byte_len(dtype, shape)?;
        if bytes.len() != want {
            return Err(Error::invalid(format!(
                "a {dtype} tensor of shape {shape:?} needs {want} bytes, got {}",
                bytes.len()
            )));
        }
        if dtype == DType::Bool && bytes.as_slice().iter().any(|b| *b > 1) {
            return Err(Error::invalid("a bool tensor's bytes must be 0 or 1"));
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Bytes(bytes)),
        })
    }

    /// A tensor of typed elements `T` stored as `dtype` (which must have the
    /// size of `T`). Internal: callers guarantee the bit patterns are valid.
    pub(crate) fn from_vec_as<T: Pod>(dtype: DType, shape: &[usize], v: Vec<T>) -> Tensor {
        Tensor::from_slice_as(dtype, shape, &v)
    }

    /// [`Tensor::from_vec_as`] from a slice (one copy).
    pub(crate) fn from_slice_as<T: Pod>(dtype: DType, shape: &[usize], v: &[T]) -> Tensor {
        debug_assert_eq!(std::mem::size_of::<T>(), dtype.size());
        debug_assert_eq!(v.len(), shape.iter().product::<usize>());
        let src: &[u8] = bytemuck::cast_slice(v);
        // SAFETY: every byte is written by the copy below before anything
        // reads the buffer.
        let mut b = unsafe { AlignedBytes::for_overwrite(src.len()) };
        // SAFETY: `b` has `src.len()` bytes; the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), b.as_mut_ptr(), src.len()) };
        Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Bytes(b)),
        }
    }

    /// A tensor over bytes owned elsewhere (no copy). The bytes must be
    /// 16-byte aligned, of the right length, and 0/1 for bool.
    pub fn from_foreign(dtype: DType, shape: &[usize], buf: Arc<dyn ForeignBytes>) -> Result<Self> {
        let bytes = buf.bytes();
        if dtype == DType::String || bytes.len() != byte_len(dtype, shape)? {
            return Err(Error::internal(format!(
                "foreign buffer of {} bytes cannot hold a {dtype} tensor of shape {shape:?}",
                bytes.len()
            )));
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(16) {
            return Err(Error::internal("foreign buffers must be 16-byte aligned"));
        }
        if dtype == DType::Bool && bytes.iter().any(|b| *b > 1) {
            return Err(Error::invalid("a bool tensor's bytes must be 0 or 1"));
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Foreign(buf)),
        })
    }

    /// The tensor's own buffer when nothing else references it (a value no
    /// one reads again may be handed on, and written, without a copy);
    /// otherwise the tensor back.
    pub fn into_unique_bytes(self) -> std::result::Result<AlignedBytes, Tensor> {
        let Tensor { dtype, shape, data } = self;
        match Arc::try_unwrap(data) {
            Ok(Data::Bytes(b)) => Ok(b),
            Ok(other) => Err(Tensor {
                dtype,
                shape,
                data: Arc::new(other),
            }),
            Err(data) => Err(Tensor { dtype, shape, data }),
        }
    }

    /// A borrowed view (dtype, shape, bytes).
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: self.bytes(),
        }
    }

    /// A string tensor.
    pub fn from_strings(shape: &[usize], strings: Vec<Vec<u8>>) -> Result<Self> {
        let n = element_count(DType::String, shape)?;
        if strings.len() != n {
            return Err(Error::invalid(format!(
                "a string tensor of shape {shape:?} needs {n} elements, got {}",
                strings.len()
            )));
        }
        Ok(Tensor {
            dtype: DType::String,
            shape: shape.to_vec(),
            data: Arc::new(Data::Strings(strings)),
        })
    }

    /// A tensor of zeros (empty strings for strings): an
    /// `InvalidArgument` when the shape's size overflows the address space,
    /// `ResourceExhausted` when the memory cannot be allocated.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let data = if dtype == DType::String {
            let n = element_count(dtype, shape)?;
            let mut strings = Vec::new();
            strings.try_reserve_exact(n).map_err(|_| {
                Error::ResourceExhausted(tensorlift_ir::Detail::msg(format!(
                    "could not allocate {n} strings for a tensor of shape {shape:?}"
                )))
            })?;
            strings.resize(n, Vec::new());
            Data::Strings(strings)
        } else {
            Data::Bytes(AlignedBytes::try_zeroed(byte_len(dtype, shape)?)?)
        };
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(data),
        })
    }

    /// A scalar of a host element type.
    pub fn scalar<T: HostElement>(v: T) -> Tensor {
        Tensor::from(ndarray::arr0(v).into_dyn())
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type of this tensor.
    pub fn ty(&self) -> TensorType {
        TensorType::known(self.dtype, &self.shape)
    }

    /// The raw bytes (empty for strings).
    pub fn bytes(&self) -> &[u8] {
        match &*self.data {
            Data::Bytes(b) => b.as_slice(),
            Data::Foreign(f) => f.bytes(),
            Data::Strings(_) => &[],
        }
    }

    /// The strings of a string tensor (empty for other dtypes).
    pub fn strings(&self) -> &[Vec<u8>] {
        match &*self.data {
            Data::Strings(s) => s,
            Data::Bytes(_) | Data::Foreign(_) => &[],
        }
    }

    /// The elements viewed as `T`, which must have the dtype's size.
    pub fn view<T: Pod>(&self) -> Result<&[T]> {
        if std::mem::size_of::<T>() != self.dtype.size() || self.dtype == DType::String {
            return Err(Error::invalid(format!(
                "cannot view {} elements as a {}-byte type",
                self.dtype,
                std::mem::size_of::<T>()
            )));
        }
        bytemuck::try_cast_slice(self.bytes())
            .map_err(|e| Error::internal(format!("bad tensor buffer: {e}")))
    }

    /// The same data with another shape of the same element count.
    pub fn reshaped(&self, shape: &[usize]) -> Result<Tensor> {
        let count = shape.iter().try_fold(1usize, |n, d| n.checked_mul(*d));
        if count != Some(self.len()) {
            return Err(Error::invalid(format!(
                "cannot reshape {:?} to {shape:?}",
                self.shape
            )));
        }
        Ok(Tensor {
            dtype: self.dtype,
            shape: shape.to_vec(),
            data: self.data.clone(),
        })
    }

    /// True when both tensors share one buffer.
    pub fn shares_buffer_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }

    /// Converts to an `ndarray` array of element type `T` (which must match
    /// the dtype exactly).
    pub fn to_ndarray<T: HostElement>(&self) -> Result<ArrayD<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid(format!(
                "tensor is {}, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        T::to_array(self)
    }

    /// A zero-copy ndarray view of the elements (the dtype must match `T`;
    /// bool tensors are viewed as `u8` 0/1).
    pub fn array_view<T: Pod>(&self) -> Result<ndarray::ArrayViewD<'_, T>> {
        ndarray::ArrayViewD::from_shape(IxDyn(&self.shape), self.view::<T>()?)
            .map_err(|e| Error::internal(e.to_string()))
    }

    /// The tensor as a literal (for constants).
    pub fn to_literal(&self) -> Literal {
        Literal {
            dtype: self.dtype,
            dims: self.shape.clone(),
            data: match &*self.data {
                Data::Strings(s) => LiteralData::Strings(s.clone().into()),
                Data::Bytes(_) | Data::Foreign(_) => LiteralData::Bytes(self.bytes().into()),
            },
        }
    }

    /// A tensor holding a literal's data.
    pub fn from_literal(l: &Literal) -> Result<Tensor> {
        match &l.data {
            LiteralData::Bytes(b) => Tensor::from_bytes(l.dtype, &l.dims, b),
            LiteralData::Strings(s) => Tensor::from_strings(&l.dims, s.to_vec()),
        }
    }

    /// Bitwise equality of dtype, shape and elements.
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype
            && self.shape == other.shape
            && self.bytes() == other.bytes()
            && self.strings() == other.strings()
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lit = self.to_literal();
        let mut s = String::new();
        let n = lit.len().min(16);
        for i in 0..n {
            if i > 0 {
                s.push_str(", ");
            }
            lit.format_element(i, &mut s);
        }
        if lit.len() > n {
            s.push_str(", ...");
        }
        write!(
            f,
            "Tensor({}{:?} [{s}])",
            self.dtype.short_name(),
            self.shape
        )
    }
}

/// A borrowed tensor: dtype, shape and element bytes, as a `host_fn_into`
/// callback reads its inputs (no allocation, no copy).
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    dtype: DType,
    shape: &'a [usize],
    bytes: &'a [u8],
}

/// A borrowed, writable tensor buffer: a `host_fn_into` callback fills its
/// outputs through these.
#[derive(Debug)]
pub struct TensorMut<'a> {
    dtype: DType,
    shape: &'a [usize],
    bytes: &'a mut [u8],
}

#[cold]
fn not_a_tensor(dtype: DType, shape: &[usize], len: usize) -> Error {
    Error::invalid(format!(
        "{len} bytes are not a {dtype} tensor of shape {shape:?}"
    ))
}

/// The element count of `shape`: an error naming the shape when it
/// overflows `usize`.
fn element_count(dtype: DType, shape: &[usize]) -> Result<usize> {
    (shape.iter())
        .try_fold(1usize, |n, d| n.checked_mul(*d))
        .ok_or_else(|| too_large(dtype, shape))
}

/// The bytes of a `dtype` tensor of `shape`: an error naming the shape
/// when the count overflows `usize` (unchecked, the product wraps, and a
/// shape of 2^62 × 4 would take 0 bytes).
pub fn byte_len(dtype: DType, shape: &[usize]) -> Result<usize> {
    element_count(dtype, shape)?
        .checked_mul(dtype.size())
        .ok_or_else(|| too_large(dtype, shape))
}

#[cold]
fn too_large(dtype: DType, shape: &[usize]) -> Error {
    Error::invalid(format!(
        "a {dtype} tensor of shape {shape:?} has more elements than memory can address"
    ))
}

#[cold]
fn bad_view(dtype: DType, want: DType) -> Error {
    Error::invalid(format!("cannot view {dtype} elements as {want}"))
}

#[inline]
fn check_view<T: HostElement>(dtype: DType) -> Result<()> {
    if T::DTYPE != dtype || dtype == DType::Bool || dtype == DType::String {
        return Err(bad_view(dtype, T::DTYPE));
    }
    Ok(())
}

impl<'a> TensorRef<'a> {
    /// A view of `bytes` (which must be `shape`'s element count × the
    /// dtype's size and aligned for it).
    #[inline]
    pub fn new(dtype: DType, shape: &'a [usize], bytes: &'a [u8]) -> Result<Self> {
        if dtype == DType::String || byte_len(dtype, shape).ok() != Some(bytes.len()) {
            return Err(not_a_tensor(dtype, shape, bytes.len()));
        }
        Ok(TensorRef {
            dtype,
            shape,
            bytes,
        })
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Shape.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }
    /// The element bytes (bool: one byte, 0 or 1).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// The elements as `T`, which must be the dtype's host type (bool is
    /// read through [`TensorRef::bytes`]).
    #[inline]
    pub fn slice<T: HostElement + Pod>(&self) -> Result<&'a [T]> {
        check_view::<T>(self.dtype)?;
        bytemuck::try_cast_slice(self.bytes)
            .map_err(|e| Error::internal(format!("bad tensor buffer: {e}")))
    }
    /// An ndarray view of the elements.
    pub fn array<T: HostElement + Pod>(&self) -> Result<ndarray::ArrayViewD<'a, T>> {
        ndarray::ArrayViewD::from_shape(IxDyn(self.shape), self.slice::<T>()?)
            .map_err(|e| Error::internal(e.to_string()))
    }
    /// An owned tensor with a copy of the elements.
    pub fn to_tensor(&self) -> Result<Tensor> {
        Tensor::from_bytes(self.dtype, self.shape, self.bytes)
    }
}

impl<'a> TensorMut<'a> {
    /// A writable view of `bytes` (as [`TensorRef::new`]).
    #[inline]
    pub fn new(dtype: DType, shape: &'a [usize], bytes: &'a mut [u8]) -> Result<Self> {
        TensorRef::new(dtype, shape, bytes)?;
        Ok(TensorMut {
            dtype,
            shape,
            bytes,
        })
    }
    /// A writable view of `data` as a tensor of `shape` (its element count
    /// must be `data`'s length): a caller's own storage, to pass to
    /// `call_into`.
    pub fn from_slice<T: HostElement + Pod>(shape: &'a [usize], data: &'a mut [T]) -> Result<Self> {
        check_view::<T>(T::DTYPE)?;
        let want = (shape.iter()).try_fold(1usize, |n, d| n.checked_mul(*d));
        if want != Some(data.len()) {
            return Err(Error::invalid(format!(
                "a buffer of {} {} elements cannot hold a tensor of shape {shape:?}",
                data.len(),
                T::DTYPE.short_name()
            )));
        }
        TensorMut::new(T::DTYPE, shape, bytemuck::cast_slice_mut(data))
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// Shape.
    pub fn shape(&self) -> &[usize] {
        self.shape
    }
    /// The element bytes to fill (bool: write 0 or 1 only).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }
    /// The elements as `T`, to fill.
    #[inline]
    pub fn slice_mut<T: HostElement + Pod>(&mut self) -> Result<&mut [T]> {
        check_view::<T>(self.dtype)?;
        bytemuck::try_cast_slice_mut(self.bytes)
            .map_err(|e| Error::internal(format!("bad tensor buffer: {e}")))
    }
    /// A writable ndarray view of the elements.
    pub fn array_mut<T: HostElement + Pod>(&mut self) -> Result<ndarray::ArrayViewMutD<'_, T>> {
        let shape = self.shape;
        ndarray::ArrayViewMutD::from_shape(IxDyn(shape), self.slice_mut::<T>()?)
            .map_err(|e| Error::internal(e.to_string()))
    }
}

/// Host element types a tensor converts from and to (`From<ArrayD<T>>` and
/// [`Tensor::to_ndarray`]).
pub trait HostElement: Clone + Sized {
    /// The matching dtype.
    const DTYPE: DType;
    /// Builds a tensor from an array (any memory layout).
    fn from_array(a: ArrayD<Self>) -> Tensor;
    /// Reads a tensor of dtype [`Self::DTYPE`].
    fn to_array(t: &Tensor) -> Result<ArrayD<Self>>;
    /// Builds a tensor from C-order elements; `v.len()` must be the
    /// product of `shape` (an `InvalidArgument` otherwise).
    fn from_slice(shape: &[usize], v: &[Self]) -> Result<Tensor> {
        ArrayD::from_shape_vec(IxDyn(shape), v.to_vec())
            .map(Self::from_array)
            .map_err(|e| Error::invalid(format!("{} elements for shape {shape:?}: {e}", v.len())))
    }
}

macro_rules! pod_host_element {
    ($($t:ty => $d:ident),*) => {$(
        impl HostElement for $t {
            const DTYPE: DType = DType::$d;
            fn from_array(a: ArrayD<$t>) -> Tensor {
                let shape = a.shape().to_vec();
                // A C-contiguous array is one copy; anything else goes
                // element by element (ndarray's IxDyn iterator: ~4 ns each).
                if let Some(v) = a.as_slice() {
                    return Tensor::from_slice_as(DType::$d, &shape, v);
                }
                let v: Vec<$t> = a.iter().copied().collect();
                Tensor::from_vec_as(DType::$d, &shape, v)
            }
            fn to_array(t: &Tensor) -> Result<ArrayD<$t>> {
                ArrayD::from_shape_vec(IxDyn(t.shape()), t.view::<$t>()?.to_vec())
                    .map_err(|e| Error::internal(e.to_string()))
            }
            fn from_slice(shape: &[usize], v: &[$t]) -> Result<Tensor> {
                if Some(v.len()) != shape.iter().try_fold(1usize, |n, d| n.checked_mul(*d)) {
                    return Err(Error::invalid(format!(
                        "{} elements for shape {shape:?}",
                        v.len()
                    )));
                }
                Ok(Tensor::from_slice_as(DType::$d, shape, v))
            }
        }
    )*};
}

pod_host_element!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f16 => F16, bf16 => BF16, f32 => F32, f64 => F64, Complex32 => C64, Complex64 => C128
);

impl HostElement for bool {
    const DTYPE: DType = DType::Bool;
    fn from_array(a: ArrayD<bool>) -> Tensor {
        let shape = a.shape().to_vec();
        let v: Vec<u8> = a.iter().map(|b| u8::from(*b)).collect();
        Tensor::from_vec_as(DType::Bool, &shape, v)
    }
    fn to_array(t: &Tensor) -> Result<ArrayD<bool>> {
        ArrayD::from_shape_vec(
            IxDyn(t.shape()),
            t.bytes().iter().map(|b| *b != 0).collect(),
        )
        .map_err(|e| Error::internal(e.to_string()))
    }
}

impl HostElement for String {
    const DTYPE: DType = DType::String;
    fn from_array(a: ArrayD<String>) -> Tensor {
        let shape = a.shape().to_vec();
        let strings = a.iter().map(|s| s.as_bytes().to_vec()).collect();
        Tensor {
            dtype: DType::String,
            shape,
            data: Arc::new(Data::Strings(strings)),
        }
    }
    fn to_array(t: &Tensor) -> Result<ArrayD<String>> {
        let v = t
            .strings()
            .iter()
            .map(|s| {
                String::from_utf8(s.clone())
                    .map_err(|_| Error::invalid("string element is not UTF-8"))
            })
            .collect::<Result<Vec<_>>>()?;
        ArrayD::from_shape_vec(IxDyn(t.shape()), v).map_err(|e| Error::internal(e.to_string()))
    }
}

impl<T: HostElement> From<ArrayD<T>> for Tensor {
    fn from(a: ArrayD<T>) -> Self {
        T::from_array(a)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// Arrays in every layout convert to the same C-order elements: the
    /// contiguous ones by one copy, the others element by element.
    #[test]
    fn arrays_of_any_layout_convert_in_c_order() {
        let a = ndarray::Array::from_shape_fn(IxDyn(&[3, 4, 5]), |d| {
            (d[0] * 100 + d[1] * 10 + d[2]) as f32
        });
        let want: Vec<f32> = a.iter().copied().collect();
        assert_eq!(Tensor::from(a.clone()).view::<f32>().unwrap(), &want[..]);
        let t = a.clone().permuted_axes(IxDyn(&[2, 0, 1]));
        assert!(t.as_slice().is_none());
        let tw: Vec<f32> = t.iter().copied().collect();
        let tt = Tensor::from(t);
        assert_eq!(tt.shape(), &[5, 3, 4]);
        assert_eq!(tt.view::<f32>().unwrap(), &tw[..]);
        let sliced = a.slice_move(ndarray::s![.., 1..3, ..]).into_dyn();
        let sw: Vec<f32> = sliced.iter().copied().collect();
        assert_eq!(Tensor::from(sliced).view::<f32>().unwrap(), &sw[..]);
        let b = ndarray::Array::from_shape_fn(IxDyn(&[2, 3]), |d| d[0] == d[1]);
        let bt = Tensor::from(b.reversed_axes());
        assert_eq!(bt.bytes(), &[1, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn slices_convert_when_their_length_fits_the_shape() {
        let t = <f64 as HostElement>::from_slice(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(t.view::<f64>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        assert!(<f64 as HostElement>::from_slice(&[2, 3], &[1.0]).is_err());
        assert!(<bool as HostElement>::from_slice(&[3], &[true]).is_err());
        let e = <f32 as HostElement>::from_slice(&[0, 7], &[]).unwrap();
        assert_eq!(e.shape(), &[0, 7]);
    }
}

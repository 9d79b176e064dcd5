//! Reading and writing tensors as NumPy `.npy` files (through `npyz`).
//!
//! Every dtype but string is supported. bfloat16, which NumPy itself lacks,
//! is written as two raw bytes per element (`|V2`), the layout `ml_dtypes`
//! uses; `|V2` data is read back as bfloat16. Fortran-ordered files are
//! read into row-major tensors; big-endian files are byte-swapped.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::path::Path;
use std::rc::Rc;

use half::f16;
use npyz::{FixedSizeBytes, TypeChar, WriterBuilder};
use num_complex::{Complex32, Complex64};
use tensorlift_ir::{DType, Error, Result};
use tensorlift_runtime::Tensor;
use tensorlift_runtime::kernels::layout;

fn io_err(e: std::io::Error) -> Error {
    Error::invalid(format!("not a valid .npy file: {e}"))
}

/// The tensor dtype of a NumPy type string, if we support it.
fn dtype_of(ts: &npyz::TypeStr) -> Option<DType> {
    Some(match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Uint, 2) => DType::U16,
        (TypeChar::Uint, 4) => DType::U32,
        (TypeChar::Uint, 8) => DType::U64,
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 8) => DType::F64,
        (TypeChar::Complex, 8) => DType::C64,
        (TypeChar::Complex, 16) => DType::C128,
        (TypeChar::RawData, 2) => DType::BF16,
        _ => return None,
    })
}

/// Reads a `.npy` stream.
pub fn read(mut reader: impl Read) -> Result<Tensor> {
    // The header is checked before npyz sees it: npyz multiplies the
    // shape's dims without overflow checks.
    let header = read_header(&mut reader)?;
    let data = Rc::new(RefCell::new(reader));
    let file = npyz::NpyFile::new(std::io::Cursor::new(header).chain(Shared(data.clone())))
        .map_err(io_err)?;
    let t = from_npy_file(file)?;
    let mut extra = [0u8; 1];
    match data.borrow_mut().read(&mut extra) {
        Ok(0) => Ok(t),
        Ok(_) => Err(Error::invalid(format!(
            "not a valid .npy file: it holds more data than its header's shape {:?} needs",
            t.shape()
        ))),
        Err(e) => Err(io_err(e)),
    }
}

/// A reader shared between npyz and [`read`], which checks that nothing
/// follows the data npyz read.
struct Shared<R>(Rc<RefCell<R>>);

impl<R: Read> Read for Shared<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

/// Largest header accepted (NumPy writes a few hundred bytes).
const MAX_HEADER: usize = 1 << 20;

/// Reads the magic string, version, header length and header dictionary,
/// checking that the `shape` entry's element count fits in memory's
/// address space; returns the bytes read.
fn read_header(reader: &mut impl Read) -> Result<Vec<u8>> {
    let mut head = vec![0u8; 10];
    reader.read_exact(&mut head).map_err(io_err)?;
    if &head[..6] != b"\x93NUMPY" {
        return Err(Error::invalid(
            "not a valid .npy file: it does not start with \\x93NUMPY",
        ));
    }
    let len = match head[6] {
        1 => u16::from_le_bytes([head[8], head[9]]) as usize,
        2 | 3 => {
            let mut more = [0u8; 2];
            reader.read_exact(&mut more).map_err(io_err)?;
            head.extend_from_slice(&more);
            u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize
        }
        v => {
            return Err(Error::invalid(format!(
                "not a valid .npy file: unknown format version {v}"
            )));
        }
    };
    if len > MAX_HEADER {
        return Err(Error::invalid(format!(
            "not a valid .npy file: a header of {len} bytes (at most {MAX_HEADER})"
        )));
    }
    let start = head.len();
    head.resize(start + len, 0);
    reader.read_exact(&mut head[start..]).map_err(io_err)?;
    let dict = String::from_utf8_lossy(&head[start..]);
    check_depth(&dict)?;
    check_shape(&dict)?;
    Ok(head)
}

/// Deepest bracket nesting accepted in a header: NumPy's own nest at most
/// 4 deep (a structured dtype with subarray fields, which tensorlift does
/// not read anyway).
const MAX_HEADER_DEPTH: usize = 6;

/// Rejects a header whose brackets (`{[(`, outside quoted strings) nest
/// deeper than [`MAX_HEADER_DEPTH`]: npyz's header parser takes time
/// exponential in the nesting depth (16 levels of `{` took 280 s).
fn check_depth(dict: &str) -> Result<()> {
    let mut depth = 0usize;
    let mut quote = None;
    let mut escaped = false;
    for c in dict.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '{' | '[' | '(' => {
                    depth += 1;
                    if depth > MAX_HEADER_DEPTH {
                        return Err(Error::invalid(format!(
                            "not a valid .npy file: its header nests brackets more than {MAX_HEADER_DEPTH} deep"
                        )));
                    }
                }
                '}' | ']' | ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    Ok(())
}

/// Checks the dims of the header dictionary's `'shape': (...)` entry:
/// each a non-negative integer, the product of the nonzero ones within
/// `usize` (so an empty array's strides cannot overflow either).
fn check_shape(dict: &str) -> Result<()> {
    let bad =
        |what: &str| Error::invalid(format!("not a valid .npy file: {what} in header {dict:?}"));
    let Some(at) = dict.find("'shape'").or_else(|| dict.find("\"shape\"")) else {
        return Err(bad("no 'shape'"));
    };
    let rest = &dict[at + 7..];
    let (Some(open), Some(close)) = (rest.find('('), rest.find(')')) else {
        return Err(bad("a shape that is not a tuple"));
    };
    if close < open {
        return Err(bad("a shape that is not a tuple"));
    }
    let mut count: usize = 1;
    let mut dims = Vec::new();
    for part in rest[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let d: u128 = part.trim_end_matches('L').parse().map_err(|_| {
            bad(&format!(
                "a dim '{part}' that is not a non-negative integer"
            ))
        })?;
        dims.push(d);
    }
    // The nonzero dims too: npyz computes strides as products of every
    // dim, without overflow checks, even for an empty array.
    for d in dims.iter().filter(|d| **d != 0) {
        count = usize::try_from(*d)
            .ok()
            .and_then(|d| count.checked_mul(d))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "not a valid .npy file: its shape {dims:?} has too many elements to address"
                ))
            })?;
    }
    Ok(())
}

pub fn from_npy_file<R: Read>(file: npyz::NpyFile<R>) -> Result<Tensor> {
    let ts = match file.dtype() {
        npyz::DType::Plain(ts) => ts,
        other @ (npyz::DType::Record(_) | npyz::DType::Array(..)) => {
            return Err(Error::unimplemented(format!(
                "structured .npy data ({}) is not supported",
                other.descr()
            )));
        }
    };
    let dtype = dtype_of(&ts)
        .ok_or_else(|| Error::unimplemented(format!(".npy dtype '{ts}' is not supported")))?;
    let shape: Vec<usize> = file
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::invalid("shape too large")))
        .collect::<Result<_>>()?;
    let count = shape
        .iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(*d))
        .filter(|n| {
            n.checked_mul(dtype.size().max(1))
                .is_some_and(|b| b <= isize::MAX as usize)
        });
    let Some(count) = count else {
        return Err(Error::invalid(format!(
            "not a valid .npy file: its shape {shape:?} has too many elements to address"
        )));
    };
    tensorlift_runtime::interp::check_allocation(
        count.saturating_mul(dtype.size()),
        "this .npy file's data",
    )?;
    let fortran = file.order() == npyz::Order::Fortran && shape.len() > 1;
    // Fortran data is the row-major layout of the reversed shape.
    let stored: Vec<usize> = if fortran {
        shape.iter().rev().copied().collect()
    } else {
        shape.clone()
    };
    // Fast path: little-endian (or byte-sized) data in C order is read
    // straight into the tensor's buffer: no intermediate copies, so a 64 MiB
    // input costs 64 MiB (the `/usr/bin/time -v` check in docs/benchmarks.md).
    let native = !fortran
        && cfg!(target_endian = "little")
        && matches!(
            ts.endianness(),
            npyz::Endianness::Little | npyz::Endianness::Irrelevant
        )
        && ts.num_bytes() == Some(dtype.size());
    if native && dtype != DType::String {
        let bytes = count * dtype.size();
        let mut buf = tensorlift_runtime::AlignedBytes::try_zeroed(bytes)?;
        file.into_inner()
            .read_exact(buf.as_mut_slice())
            .map_err(io_err)?;
        return Tensor::from_aligned(dtype, &shape, buf);
    }
    macro_rules! load {
        ($T:ty) => {
            Tensor::from(
                ndarray::ArrayD::from_shape_vec(
                    stored.clone(),
                    file.into_vec::<$T>().map_err(io_err)?,
                )
                .map_err(|e| Error::invalid(format!("element count does not match shape: {e}")))?,
            )
        };
    }
    let t = match dtype {
        DType::Bool => load!(bool),
        DType::I8 => load!(i8),
        DType::I16 => load!(i16),
        DType::I32 => load!(i32),
        DType::I64 => load!(i64),
        DType::U8 => load!(u8),
        DType::U16 => load!(u16),
        DType::U32 => load!(u32),
        DType::U64 => load!(u64),
        DType::F16 => load!(f16),
        DType::F32 => load!(f32),
        DType::F64 => load!(f64),
        DType::C64 => load!(Complex32),
        DType::C128 => load!(Complex64),
        DType::BF16 => {
            let raw = file.into_vec::<FixedSizeBytes<2>>().map_err(io_err)?;
            let bytes: Vec<u8> = raw.iter().flat_map(|b| b.0).collect();
            Tensor::from_bytes(DType::BF16, &stored, &bytes)?
        }
        DType::String => return Err(Error::unimplemented("string .npy files are not supported")),
    };
    if fortran {
        let perm: Vec<usize> = (0..shape.len()).rev().collect();
        return layout::transpose(&t, &perm);
    }
    Ok(t)
}

/// Writes `t` as a `.npy` stream (C order, little-endian).
pub fn write(t: &Tensor, writer: impl Write) -> Result<()> {
    let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
    let werr = |e: std::io::Error| Error::invalid(format!("cannot write .npy data: {e}"));
    // Elements stream from the tensor's buffer (no copy of the data).
    macro_rules! save {
        ($T:ty) => {{
            let v = t.view::<$T>()?;
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(writer)
                .begin_nd()
                .map_err(werr)?;
            w.extend(v.iter().cloned()).map_err(werr)?;
            w.finish().map_err(werr)
        }};
    }
    match t.dtype() {
        DType::Bool => {
            let mut w = npyz::WriteOptions::<bool>::new()
                .default_dtype()
                .shape(&shape)
                .writer(writer)
                .begin_nd()
                .map_err(werr)?;
            w.extend(t.bytes().iter().map(|b| *b != 0)).map_err(werr)?;
            w.finish().map_err(werr)
        }
        DType::I8 => save!(i8),
        DType::I16 => save!(i16),
        DType::I32 => save!(i32),
        DType::I64 => save!(i64),
        DType::U8 => save!(u8),
        DType::U16 => save!(u16),
        DType::U32 => save!(u32),
        DType::U64 => save!(u64),
        DType::F16 => save!(f16),
        DType::F32 => save!(f32),
        DType::F64 => save!(f64),
        DType::C64 => save!(Complex32),
        DType::C128 => save!(Complex64),
        DType::BF16 => {
            let ts: npyz::TypeStr = "|V2".parse().map_err(|e| Error::internal(format!("{e}")))?;
            let mut w = npyz::WriteOptions::<FixedSizeBytes<2>>::new()
                .dtype(npyz::DType::Plain(ts))
                .shape(&shape)
                .writer(writer)
                .begin_nd()
                .map_err(werr)?;
            w.extend(
                t.bytes()
                    .chunks_exact(2)
                    .map(|c| FixedSizeBytes([c[0], c[1]])),
            )
            .map_err(werr)?;
            w.finish().map_err(werr)
        }
        DType::String => Err(Error::unimplemented(
            "string tensors cannot be written as .npy files",
        )),
    }
}

/// Loads a `.npy` file.
pub fn load(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let f = std::fs::File::open(path).map_err(|e| {
        Error::NotFound(tensorlift_ir::Detail::msg(format!(
            "cannot open {}: {e}",
            path.display()
        )))
    })?;
    read(std::io::BufReader::new(f)).map_err(|e| e.context(path.display()))
}

/// Saves `t` as a `.npy` file.
pub fn save(t: &Tensor, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let f = std::fs::File::create(path)
        .map_err(|e| Error::invalid(format!("cannot create {}: {e}", path.display())))?;
    let mut w = std::io::BufWriter::new(f);
    write(t, &mut w)?;
    w.flush()
        .map_err(|e| Error::invalid(format!("cannot write {}: {e}", path.display())))
}

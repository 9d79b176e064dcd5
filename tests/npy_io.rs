//! .npy reading and writing for every dtype but string, against files
//! NumPy wrote (tests/fixtures/npy/, made by gen_npy.py).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

mod common;

use common::random_graph::{Rng, random_tensor};
use tensorlift::ir::{ALL_DTYPES, TensorType};
use tensorlift::{DType, Tensor, npy};

#[test]
fn every_dtype_round_trips() {
    let mut rng = Rng::new(5);
    for d in ALL_DTYPES {
        if d == DType::String {
            continue;
        }
        for dims in [vec![], vec![3], vec![2, 3], vec![0, 2]] {
            let t = random_tensor(&mut rng, &TensorType::known(d, &dims));
            let mut buf = Vec::new();
            npy::write(&t, &mut buf).unwrap();
            let back = npy::read(&buf[..]).unwrap();
            assert!(t.bit_eq(&back), "{d} {dims:?}: {t:?} vs {back:?}");
        }
    }
    let s = Tensor::from_strings(&[1], vec![b"x".to_vec()]).unwrap();
    assert!(
        npy::write(&s, &mut Vec::new())
            .unwrap_err()
            .to_string()
            .contains("string")
    );
}

#[test]
fn reads_what_numpy_wrote() {
    // Fortran order, big-endian, bfloat16 from ml_dtypes, and a 0-d array.
    let dir = std::path::Path::new("tests/fixtures/npy");
    let f = npy::load(dir.join("fortran_i32.npy")).unwrap();
    assert_eq!(f.shape(), &[2, 3]);
    assert_eq!(common::to_vec::<i32>(&f), vec![0, 1, 2, 3, 4, 5]);
    let b = npy::load(dir.join("big_endian_f64.npy")).unwrap();
    assert_eq!(common::to_vec::<f64>(&b), vec![1.5, -2.25, 1e300]);
    let h = npy::load(dir.join("bf16.npy")).unwrap();
    assert_eq!(h.dtype(), DType::BF16);
    assert_eq!(
        common::to_vec::<half::bf16>(&h)
            .iter()
            .map(|v| v.to_f32())
            .collect::<Vec<_>>(),
        vec![1.5, -2.0, 0.0078125]
    );
    let z = npy::load(dir.join("scalar_c64.npy")).unwrap();
    assert_eq!(z.shape(), &[] as &[usize]);
    assert_eq!(
        common::to_vec::<num_complex::Complex32>(&z),
        vec![num_complex::Complex32::new(1.0, -2.0)]
    );
    let u = npy::load(dir.join("bool.npy")).unwrap();
    assert_eq!(common::to_vec::<bool>(&u), vec![true, false, true]);
}

#[test]
fn bad_files_are_errors() {
    let e = npy::read(&b"not an npy file at all"[..]).unwrap_err();
    assert!(e.to_string().contains("not a valid .npy file"), "{e}");
    let e = npy::load("tests/fixtures/npy/structured.npy").unwrap_err();
    assert!(e.to_string().contains("structured"), "{e}");
    let e = npy::load("tests/fixtures/npy/object.npy").unwrap_err();
    assert!(!e.to_string().is_empty());
    let e = npy::load("no/such/file.npy").unwrap_err();
    assert_eq!(e.code(), tensorlift::Code::NotFound);
    // Truncated data.
    let mut buf = Vec::new();
    npy::write(&common::f32s(&[1.0, 2.0, 3.0], &[3]), &mut buf).unwrap();
    buf.truncate(buf.len() - 2);
    assert!(npy::read(&buf[..]).is_err());
}

/// A version-1 .npy file with header dictionary `dict` followed by `data`.
fn npy_bytes(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut header = dict.to_string();
    // Magic (6) + version (2) + length (2) + header, padded to 64 with '\n'.
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn headers_that_do_not_match_the_data_are_errors() {
    let f32x4: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let cases = [
        // Shapes whose element count overflows, with data that would fit
        // the wrapped count (fuzzer reproducers: Fortran order transposed
        // into an out-of-bounds read).
        (
            "{'descr': '<f4', 'fortran_order': True, 'shape': (4611686018427387905, 4), }",
            "too many elements",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387905, 4), }",
            "too many elements",
        ),
        (
            "{'descr': '<f4', 'fortran_order': True, 'shape': (18446744073709551615, 2), }",
            "too many elements",
        ),
        (
            "{'descr': '>f4', 'fortran_order': False, 'shape': (4611686018427387905, 4), }",
            "too many elements",
        ),
        // More data than the shape holds.
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
            "more data",
        ),
        (
            "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }",
            "more data",
        ),
        (
            "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3), }",
            "more data",
        ),
        // Less.
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
            "not a valid .npy file",
        ),
        (
            "{'descr': '<f4', 'fortran_order': True, 'shape': (5, 1), }",
            "not a valid .npy file",
        ),
    ];
    for (dict, want) in cases {
        let e = npy::read(&npy_bytes(dict, &f32x4)[..]).unwrap_err();
        assert!(e.to_string().contains(want), "{dict}: {e}");
    }
    // The exact size is accepted, in either order.
    let t = npy::read(
        &npy_bytes(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
            &f32x4,
        )[..],
    )
    .unwrap();
    assert_eq!(common::to_vec::<f32>(&t), vec![1.0, 3.0, 2.0, 4.0]);
    // An empty array with a huge dim is a valid (empty) tensor.
    let t = npy::read(
        &npy_bytes(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (4611686018427387905, 0), }",
            &[],
        )[..],
    )
    .unwrap();
    assert_eq!(t.shape(), &[4611686018427387905, 0]);
}

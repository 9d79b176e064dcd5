//! The ops loops need (issue 14): `dynamic_slice`, `dynamic_update_slice`,
//! `scatter`, the integer shifts and `bitcast_convert`. Hand-computed
//! results (NumPy's are in the op fixtures), the interpreter against the
//! JIT bit for bit (clamped and out-of-range indices, out-of-range shift
//! amounts, signalling NaN bits), the text round trip and the errors for
//! bad inputs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use tensorlift::compiler::JitOptions;
use tensorlift::ir::text;
use tensorlift::runtime::interp;
use tensorlift::{Combiner, DType, Sym, Tensor, function};

fn arr<T: tensorlift::HostElement>(v: Vec<T>, shape: &[usize]) -> Tensor {
    Tensor::from(ndarray::ArrayD::from_shape_vec(shape.to_vec(), v).unwrap())
}

fn scalar_i32(v: i32) -> Tensor {
    arr(vec![v], &[])
}

fn to_vec<T: tensorlift::HostElement + Clone>(t: &Tensor) -> Vec<T> {
    t.to_ndarray::<T>().unwrap().iter().cloned().collect()
}

/// Runs `body` interpreted and compiled (every exact option set and the
/// default); the compiled results must have the interpreter's bytes
/// exactly (NaN payloads included). Returns the interpreter's results.
fn same_bytes_everywhere<M>(
    body: impl tensorlift::TraceBody<M> + Clone,
    inputs: &[Tensor],
) -> Vec<Tensor> {
    let want = function(body.clone()).call(inputs).unwrap();
    let options = tensorlift::fuzz::targets::EXACT
        .into_iter()
        .chain([JitOptions::default()]);
    for opts in options {
        let got = function(body.clone())
            .jit_compile(true)
            .jit_options(opts)
            .call(inputs)
            .unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.dtype(), w.dtype());
            assert_eq!(g.shape(), w.shape());
            assert_eq!(g.bytes(), w.bytes(), "{opts:?}: jit {g:?} vs interp {w:?}");
        }
    }
    want
}

fn error_of<M>(body: impl tensorlift::TraceBody<M>, inputs: &[Tensor]) -> String {
    match function(body).call(inputs) {
        Ok(r) => panic!("expected an error, got {r:?}"),
        Err(e) => e.to_string(),
    }
}

// ------------------------------------------------------------ shifts --

/// Every integer dtype, amounts inside and outside `[0, bits)` (negative
/// ones included): the interpreter gives XLA's results and the JIT (scalar
/// code, with elementwise neighbours fused in) the same bits.
#[test]
fn shifts_follow_xla_out_of_range_and_agree_with_the_jit() {
    let amounts: Vec<i64> = vec![0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, 65, 200, -1, -8, -64];
    let xs: Vec<i64> = vec![
        1,
        -1,
        0x55,
        -0x80,
        0x7f,
        i64::MIN,
        i64::MAX,
        0x1234_5678,
        -3,
        2,
        0xff,
        -0x1234,
        5,
        6,
        7,
        -9,
    ];
    let int_dtypes = [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
    ];
    for d in int_dtypes {
        let cast = |v: &[i64]| {
            tensorlift::runtime::kernels::elementwise::convert(&arr(v.to_vec(), &[v.len()]), d)
                .unwrap()
        };
        let (x, y) = (cast(&xs), cast(&amounts));
        let out = same_bytes_everywhere(
            |x: Sym, y: Sym| {
                vec![
                    x.shift_left(&y),
                    x.shift_right_logical(&y),
                    x.shift_right_arithmetic(&y),
                    // Fused with neighbours, and with a scalar amount.
                    (&x + 1).shift_left(&y) ^ x.shift_right_logical(3),
                ]
            },
            &[x.clone(), y.clone()],
        );
        // The rule, computed on i128 from the raw bits.
        let bits = d.size() as u32 * 8;
        let mask = (1u128 << bits) - 1;
        let raw = |t: &Tensor, i: usize| {
            let b = &t.bytes()[i * d.size()..(i + 1) * d.size()];
            let mut w = [0u8; 16];
            w[..b.len()].copy_from_slice(b);
            u128::from_le_bytes(w)
        };
        for i in 0..xs.len() {
            let (xv, amount) = (raw(&x, i), raw(&y, i));
            let sign = (xv >> (bits - 1)) & 1 == 1;
            let (left, logical, arith) = if amount < u128::from(bits) {
                let a = amount as u32;
                let fill = if sign && a > 0 {
                    mask & !(mask >> a)
                } else {
                    0
                };
                ((xv << a) & mask, xv >> a, (xv >> a) | fill)
            } else {
                (0, 0, if sign { mask } else { 0 })
            };
            assert_eq!(raw(&out[0], i), left, "{d} shift_left {i}");
            assert_eq!(raw(&out[1], i), logical, "{d} shift_right_logical {i}");
            assert_eq!(raw(&out[2], i), arith, "{d} shift_right_arithmetic {i}");
        }
    }
}

#[test]
fn shifts_reject_non_integer_dtypes() {
    let x = arr(vec![1.0f32, 2.0], &[2]);
    let e = error_of(|x: Sym| x.shift_left(&x), std::slice::from_ref(&x));
    assert!(e.contains("shift_left is not defined on float32"), "{e}");
    let b = arr(vec![true, false], &[2]);
    let e = error_of(|x: Sym| x.shift_right_arithmetic(&x), &[b]);
    assert!(
        e.contains("shift_right_arithmetic is not defined on bool"),
        "{e}"
    );
}

// --------------------------------------------------- bitcast_convert --

#[test]
fn bitcast_convert_keeps_every_bit_including_signalling_nans() {
    // f32 signalling NaN, quiet NaN with payload, -0.0, denormal, 1.0.
    let words: Vec<u32> = vec![0x7f80_0001, 0xffc0_1234, 0x8000_0000, 1, 0x3f80_0000, 7];
    let out = same_bytes_everywhere(
        |x: Sym| {
            let f = x.bitcast_convert(DType::F32);
            vec![
                f.clone(),
                f.bitcast_convert(DType::I32),
                (&x + 1u32).bitcast_convert(DType::F32),
            ]
        },
        &[arr(words.clone(), &[6])],
    );
    assert_eq!(out[0].dtype(), DType::F32);
    assert_eq!(out[0].bytes(), arr(words.clone(), &[6]).bytes());
    assert_eq!(to_vec::<i32>(&out[1])[0], 0x7f80_0001);
    // Half types run as runtime kernels: their bits survive too.
    let halves: Vec<u16> = vec![0x7c01, 0xfe00, 0x8000, 0x0001, 0x3c00, 0x7d00];
    let out = same_bytes_everywhere(
        |x: Sym| {
            let h = x.bitcast_convert(DType::F16);
            vec![
                h.clone(),
                h.bitcast_convert(DType::BF16),
                h.bitcast_convert(DType::I16),
            ]
        },
        &[arr(halves.clone(), &[6])],
    );
    for t in &out {
        assert_eq!(t.bytes(), arr(halves.clone(), &[6]).bytes());
    }
    assert_eq!(out[0].dtype(), DType::F16);
    // i64 ↔ f64 and back, u64 ↔ i64.
    let longs: Vec<i64> = vec![-1, 0x7ff0_0000_0000_0001, 0, 1];
    let out = same_bytes_everywhere(
        |x: Sym| {
            vec![
                x.bitcast_convert(DType::F64).bitcast_convert(DType::U64),
                x.bitcast_convert(DType::U64),
            ]
        },
        &[arr(longs.clone(), &[4])],
    );
    assert_eq!(to_vec::<u64>(&out[1])[0], u64::MAX);
    assert_eq!(out[0].bytes(), out[1].bytes());
}

#[test]
fn bitcast_convert_errors_name_both_dtypes() {
    let x = arr(vec![1.0f32], &[1]);
    let e = error_of(
        |x: Sym| x.bitcast_convert(DType::F64),
        std::slice::from_ref(&x),
    );
    assert!(e.contains("bitcast_convert from float32 to float64"), "{e}");
    assert!(e.contains("4 vs 8 bytes"), "{e}");
    let e = error_of(
        |x: Sym| x.bitcast_convert(DType::C64),
        &[arr(vec![1.0f64], &[1])],
    );
    assert!(e.contains("from float64 to complex64"), "{e}");
    let e = error_of(
        |x: Sym| x.bitcast_convert(DType::Bool),
        &[arr(vec![1u8], &[1])],
    );
    assert!(e.contains("from uint8 to bool"), "{e}");
    let e = error_of(
        |x: Sym| x.bitcast_convert(DType::U8),
        &[arr(vec![true], &[1])],
    );
    assert!(e.contains("from bool to uint8"), "{e}");
}

// ------------------------------------- dynamic_slice and its update --

fn grid() -> Tensor {
    arr((0..35).map(|v| v as f32).collect(), &[5, 7])
}

/// Starts clamped to `[0, dim - size]`: in range, negative, too large.
#[test]
fn dynamic_slice_clamps_its_starts_like_xla() {
    for (i, j, ci, cj) in [
        (1, 2, 1, 2),
        (-3, 10, 0, 4),
        (4, 6, 3, 4),
        (i32::MIN, i32::MAX, 0, 4),
    ] {
        let out = same_bytes_everywhere(
            |x: Sym, i: Sym, j: Sym| {
                vec![
                    x.dynamic_slice(&[&i, &j], &[2, 3]),
                    // Fused consumers read the runtime kernel's buffer.
                    x.dynamic_slice(&[&i, &j], &[2, 3]) * 2.0f32,
                ]
            },
            &[grid(), scalar_i32(i), scalar_i32(j)],
        );
        let want: Vec<f32> = (0..2)
            .flat_map(|r| (0..3).map(move |c| ((ci + r) * 7 + cj + c) as f32))
            .collect();
        assert_eq!(to_vec::<f32>(&out[0]), want, "starts ({i}, {j})");
        assert_eq!(out[0].shape(), &[2, 3]);
    }
    // int64 indices; a block as large as the operand; an empty block.
    let out = same_bytes_everywhere(
        |x: Sym, i: Sym| {
            vec![
                x.dynamic_slice(&[&i, &i], &[5, 7]),
                x.dynamic_slice(&[&i, &i], &[0, 2]),
            ]
        },
        &[grid(), arr(vec![3i64], &[])],
    );
    assert_eq!(out[0].bytes(), grid().bytes());
    assert_eq!(out[1].shape(), &[0, 2]);
}

#[test]
fn dynamic_update_slice_clamps_so_the_update_fits() {
    for (i, j, ci, cj) in [(1, 2, 1, 2), (-3, 10, 0, 4), (9, -1, 3, 0)] {
        let u = arr(vec![-1.0f32, -2.0, -3.0, -4.0, -5.0, -6.0], &[2, 3]);
        let out = same_bytes_everywhere(
            |x: Sym, u: Sym, i: Sym, j: Sym| x.dynamic_update_slice(&u, &[&i, &j]),
            &[grid(), u, scalar_i32(i), scalar_i32(j)],
        );
        let got = to_vec::<f32>(&out[0]);
        for r in 0..5 {
            for c in 0..7 {
                let inside = (ci..ci + 2).contains(&r) && (cj..cj + 3).contains(&c);
                let want = if inside {
                    -(((r - ci) * 3 + (c - cj) + 1) as f32)
                } else {
                    (r * 7 + c) as f32
                };
                assert_eq!(got[r * 7 + c], want, "starts ({i}, {j}) at ({r}, {c})");
            }
        }
    }
}

#[test]
fn dynamic_slice_errors_name_what_is_wrong() {
    let args = [grid(), scalar_i32(1), scalar_i32(2)];
    let e = error_of(
        |x: Sym, i: Sym, _j: Sym| x.dynamic_slice(&[&i], &[2, 3]),
        &args,
    );
    assert!(
        e.contains("needs 2 start index operand(s), one per dim, got 1"),
        "{e}"
    );
    let e = error_of(
        |x: Sym, i: Sym, j: Sym| x.dynamic_slice(&[&i, &j], &[6, 3]),
        &args,
    );
    assert!(e.contains("size 6 exceeds size 5 of dim 0"), "{e}");
    let e = error_of(
        |x: Sym, i: Sym, j: Sym| x.dynamic_slice(&[&i, &j], &[2]),
        &args,
    );
    assert!(e.contains("needs 2 sizes, one per dim"), "{e}");
    let e = error_of(
        |x: Sym, i: Sym| x.dynamic_slice(&[&i, &i], &[2, 3]),
        &[grid(), arr(vec![1i32, 2], &[2])],
    );
    assert!(
        e.contains("start index 0 must be an int32[] or int64[] scalar, got i32[2]"),
        "{e}"
    );
    let e = error_of(
        |x: Sym, i: Sym, j: Sym| x.dynamic_slice(&[&i, &j], &[2, 3]),
        &[grid(), scalar_i32(1), arr(vec![1i64], &[])],
    );
    assert!(e.contains("must share one dtype"), "{e}");
    let e = error_of(
        |x: Sym, i: Sym| x.dynamic_slice(&[&i, &i], &[2, 3]),
        &[grid(), arr(vec![1.0f32], &[])],
    );
    assert!(
        e.contains("start index 0 must be an int32[] or int64[] scalar, got f32[]"),
        "{e}"
    );
    let e = error_of(
        |x: Sym, u: Sym, i: Sym| x.dynamic_update_slice(&u, &[&i, &i]),
        &[grid(), arr(vec![0.0f32; 8], &[1, 8]), scalar_i32(0)],
    );
    assert!(
        e.contains("is larger than operand f32[5,7] in dim 1"),
        "{e}"
    );
    let e = error_of(
        |x: Sym, u: Sym, i: Sym| x.dynamic_update_slice(&u, &[&i, &i]),
        &[grid(), arr(vec![0.0f64; 2], &[1, 2]), scalar_i32(0)],
    );
    assert!(e.contains("must have the dtype of operand"), "{e}");
    let e = error_of(
        |x: Sym, u: Sym, i: Sym| x.dynamic_update_slice(&u, &[&i]),
        &[grid(), arr(vec![0.0f32; 2], &[1, 2]), scalar_i32(0)],
    );
    assert!(e.contains("needs 2 start index operand(s)"), "{e}");
}

// ------------------------------------------------------------ scatter --

/// The inverse of `take`: duplicates combine (set: last wins), indices
/// outside `[0, n)` are skipped.
#[test]
fn scatter_combines_skips_out_of_range_and_set_keeps_the_last() {
    let x = arr(vec![10i32, 11, 20, 21, 30, 31, 40, 41], &[4, 2]);
    let idx = arr(vec![2i64, -1, 0, 2, 4, 2], &[6]);
    let upd = arr((1..=12).collect::<Vec<i32>>(), &[6, 2]);
    let args = [x, idx, upd];
    let run = |c: Combiner| {
        same_bytes_everywhere(move |x: Sym, i: Sym, u: Sym| x.scatter(&i, &u, 0, c), &args)
            .remove(0)
    };
    // Row 2 gets updates 0, 3 and 5; row 0 gets update 2; -1 and 4 skipped.
    for &c in Combiner::ALL {
        let want = match c {
            Combiner::Set => vec![5, 6, 20, 21, 11, 12, 40, 41],
            Combiner::Add => vec![15, 17, 20, 21, 30 + 1 + 7 + 11, 31 + 2 + 8 + 12, 40, 41],
            Combiner::Min => vec![5, 6, 20, 21, 1, 2, 40, 41],
            Combiner::Max => vec![10, 11, 20, 21, 30, 31, 40, 41],
        };
        assert_eq!(to_vec::<i32>(&run(c)), want, "{c:?}");
    }
}

/// `take`'s gradient: scatter-add of ones along axis 1 counts how often
/// each column was taken; a negative axis counts from the end.
#[test]
fn scatter_add_along_an_inner_axis_counts_takes() {
    let x = arr(vec![0.0f32; 6], &[2, 3]);
    let idx = arr(vec![2i32, 0, 2, 2], &[2, 2]);
    let out = same_bytes_everywhere(
        |x: Sym, i: Sym| {
            let ones = x.take(&i, 1) * 0.0f32 + 1.0f32;
            x.scatter(&i, &ones, -1, Combiner::Add)
        },
        &[x, idx],
    );
    assert_eq!(to_vec::<f32>(&out[0]), vec![1.0, 0.0, 3.0, 1.0, 0.0, 3.0]);
}

#[test]
fn scatter_errors_name_what_is_wrong() {
    let x = arr(vec![0.0f32; 6], &[2, 3]);
    let i = arr(vec![0i32, 1], &[2]);
    let e = error_of(
        |x: Sym, i: Sym, u: Sym| x.scatter(&i, &u, 0, Combiner::Add),
        &[x.clone(), i.clone(), arr(vec![0.0f32; 4], &[2, 2])],
    );
    assert!(e.contains("updates f32[2,2] must have shape [2,3]"), "{e}");
    let e = error_of(
        |x: Sym, i: Sym, u: Sym| x.scatter(&i, &u, 0, Combiner::Add),
        &[x.clone(), arr(vec![0.0f32, 1.0], &[2]), x.clone()],
    );
    assert!(e.contains("scatter indices must be integers"), "{e}");
    let e = error_of(
        |x: Sym, i: Sym, u: Sym| x.scatter(&i, &u, 2, Combiner::Set),
        &[x.clone(), i.clone(), x.clone()],
    );
    assert!(e.contains("axis 2 is out of range"), "{e}");
    let b = arr(vec![true; 2], &[2]);
    let e = error_of(
        |x: Sym, i: Sym| x.scatter(&i, &x, 0, Combiner::Add),
        &[b, i],
    );
    assert!(
        e.contains("scatter combiner add is not defined on bool"),
        "{e}"
    );
}

// --------------------------------------------------------------- text --

const PROGRAM: &str = r#"graph @loop_ops {
  %x = parameter 0 : f32[5,7]
  %i = parameter 1 : i32[]
  %j = parameter 2 : i32[]
  %n = parameter 3 : i64[4]
  %u = parameter 4 : f32[5,4]
  %k = parameter 5 : u32[5,7]
  %s = dynamic_slice(%x, %i, %j) {sizes=[2,3]} : f32[2,3]
  %w = dynamic_update_slice(%x, %s, %j, %i) : f32[5,7]
  %c = scatter(%w, %n, %u) {axis=1, combiner=max} : f32[5,7]
  %b = bitcast_convert(%c) : u32[5,7]
  %l = shift_left(%b, %k) : u32[5,7]
  %r = shift_right_logical(%l, %k) : u32[5,7]
  %a = shift_right_arithmetic(%r, %k) : u32[5,7]
  return %a as "out"
}
"#;

#[test]
fn the_new_ops_print_and_parse_back_identically() {
    let g = text::parse(PROGRAM, "loop_ops.tlir").unwrap();
    let printed = text::print(&g);
    let again = text::parse(&printed, "loop_ops.tlir").unwrap();
    assert_eq!(again, g);
    assert_eq!(text::print(&again), printed);
    for op in [
        "dynamic_slice(",
        "{sizes=[2,3]}",
        "dynamic_update_slice(",
        "{axis=1, combiner=max}",
        "bitcast_convert(",
        "shift_right_arithmetic(",
    ] {
        assert!(printed.contains(op), "{op} missing:\n{printed}");
    }
    // And it runs, interpreted and compiled alike.
    let inputs = [
        grid(),
        scalar_i32(3),
        scalar_i32(-2),
        arr(vec![0i64, 9, 3, 3], &[4]),
        arr((0..20).map(|v| v as f32 - 10.0).collect(), &[5, 4]),
        arr((0..35).map(|v| v as u32 % 40).collect(), &[5, 7]),
    ];
    let want = interp::run(&g, &inputs).unwrap();
    let exe = tensorlift::compiler::compile(&g, &JitOptions::default()).unwrap();
    assert_eq!(exe.run(&inputs).unwrap()[0].bytes(), want[0].bytes());
}

#[test]
fn bad_attributes_and_old_names_are_parse_errors() {
    let bad = PROGRAM.replace("combiner=max", "combiner=mul");
    let e = text::parse(&bad, "x.tlir").unwrap_err().to_string();
    assert!(
        e.contains("attribute 'combiner' of scatter must be one of set, add, min, max"),
        "{e}"
    );
    let bad = PROGRAM.replace("{sizes=[2,3]} ", "");
    let e = text::parse(&bad, "x.tlir").unwrap_err().to_string();
    assert!(e.contains("dynamic_slice needs attribute 'sizes'"), "{e}");
    // Rank-agnostic ops are `unranked_<op>` now; `dynamic_add` is no op.
    let old = "graph @g {\n  %x = parameter 0 : f32[*]\n  %y = dynamic_add(%x, %x) : f32[*]\n  return %y as \"y\"\n}\n";
    let e = text::parse(old, "x.tlir").unwrap_err().to_string();
    assert!(e.contains("unknown op 'dynamic_add'"), "{e}");
    let new = old.replace("dynamic_add", "unranked_add");
    let g = text::parse(&new, "x.tlir").unwrap();
    assert_eq!(text::print(&g).matches("unranked_add(").count(), 1);
}

/// A `dynamic_slice` as large as its operand is the operand (`simplify`).
#[test]
fn a_full_size_dynamic_slice_simplifies_away() {
    let src = "graph @g {\n  %x = parameter 0 : f32[5,7]\n  %i = parameter 1 : i32[]\n  %y = dynamic_slice(%x, %i, %i) {sizes=[5,7]} : f32[5,7]\n  %z = bitcast_convert(%y) : f32[5,7]\n  return %z as \"y\"\n}\n";
    let mut g = text::parse(src, "x.tlir").unwrap();
    interp::optimize(&mut g).unwrap();
    let printed = text::print(&g);
    assert!(!printed.contains("dynamic_slice"), "{printed}");
    assert!(!printed.contains("bitcast_convert"), "{printed}");
}

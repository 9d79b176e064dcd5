//! The text format: every example round trips; bad input gives an error
//! with line and column, never a panic.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use tensorlift::ir::{Code, DType, Graph, Literal, Op, Site, TensorType, text};

#[test]
fn every_example_round_trips() {
    let mut n = 0;
    for entry in std::fs::read_dir("examples").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tlir") {
            let src = std::fs::read_to_string(&path).unwrap();
            let g = text::parse(&src, &path.display().to_string())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let printed = text::print(&g);
            assert_eq!(
                text::parse(&printed, "again").unwrap(),
                g,
                "{}",
                path.display()
            );
            // Nodes written without loc(...) get their position in the file.
            assert!(
                g.nodes()
                    .iter()
                    .all(|n| n.site.line > 0 && *n.site.file == path.display().to_string())
            );
            n += 1;
        }
    }
    assert!(n >= 4, "expected the bundled examples, found {n}");
}

#[test]
fn literals_of_every_dtype_round_trip_bit_exactly() {
    let mut g = Graph::new("lits");
    let site = Site::unknown();
    let cases: Vec<(DType, Vec<u8>)> = vec![
        (
            DType::F32,
            [
                f32::NAN.to_bits() | 1,
                (-0.0f32).to_bits(),
                1e-45f32.to_bits(),
                f32::INFINITY.to_bits(),
                0.1f32.to_bits(),
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
        (
            DType::F64,
            [
                f64::NAN.to_bits(),
                (-0.0f64).to_bits(),
                5e-324f64.to_bits(),
                0.1f64.to_bits(),
                f64::MAX.to_bits(),
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
        (
            DType::F16,
            [0x7c01u16, 0x8000, 0x0001, 0x3555, 0x7bff]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::BF16,
            [0x7fc1u16, 0x8000, 0x0001, 0x3dcd, 0x7f7f]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::I64,
            [i64::MIN, -1, 0, 1, i64::MAX]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::U64,
            [0u64, 1, 2, u64::MAX - 1, u64::MAX]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (DType::Bool, vec![0, 1, 1, 0, 1]),
        (
            DType::C64,
            [
                1.5f32,
                -0.0,
                f32::INFINITY,
                2.0,
                0.1,
                0.2,
                3.0,
                4.0,
                5.0,
                6.0,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
    ];
    for (d, bytes) in &cases {
        let lit = Literal::from_bytes(*d, &[5], bytes.clone()).unwrap();
        g.add(Op::Constant(lit), &[], site.clone()).unwrap();
    }
    let s = Literal::from_strings(
        &[3],
        vec![b"a\"b".to_vec(), vec![0, 255, b'\n'], Vec::new()],
    )
    .unwrap();
    let v = g.add(Op::Constant(s), &[], site.clone()).unwrap();
    g.add_output(v, "strings").unwrap();
    let printed = text::print(&g);
    let back = text::parse(&printed, "x").unwrap();
    assert_eq!(back, g, "{printed}");
}

#[test]
fn parse_errors_name_line_and_column() {
    let cases: &[(&str, u32, u32, &str)] = &[
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = frobnicate(%x) : f32[2]\n  return %y as \"y\"\n}",
            3,
            8,
            "unknown op 'frobnicate'",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = add(%x, %z) : f32[2]\n  return %y as \"y\"\n}",
            3,
            16,
            "undefined value '%z'",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f33[2]\n}",
            2,
            22,
            "unknown dtype 'f33'",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = add(%x, %x) : f32[3]\n  return %y as \"y\"\n}",
            3,
            3,
            "does not match the inferred f32[2]",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %i = parameter 1 : i32[2]\n  %y = add(%x, %i) : f32[2]\n  return %y as \"y\"\n}",
            4,
            3,
            "operand dtypes differ: f32[2] vs i32[2]",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %x = neg(%x) : f32[2]\n}",
            3,
            3,
            "defined twice",
        ),
        (
            "graph @g {\n  %c = constant [1, 2, 3] : f32[2]\n}",
            2,
            17,
            "needs 2 elements, got 3",
        ),
        (
            "graph @g {\n  %c = constant 300 : u8[]\n}",
            2,
            17,
            "out of range for uint8",
        ),
        (
            "graph @g {\n  %s = constant \"abc : string[]\n}",
            2,
            17,
            "unterminated string",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = reduce_sum(%x) {axes=[0]} : f32[]\n}",
            3,
            8,
            "needs attribute 'keepdims'",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  %y = neg(%x) {axis=1} : f32[2]\n}",
            3,
            17,
            "has no attribute 'axis'",
        ),
        (
            "graph @g {\n  %x = parameter 1 : f32[2]\n  return %x as \"x\"\n}",
            0,
            0,
            "parameters must be numbered",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  return %x as \"x\"\n",
            4,
            1,
            "expected '}'",
        ),
        (
            "graph @g {\n  %x = parameter 0 : f32[2]\n  return %x as \"x\"\n} trailing",
            4,
            3,
            "expected end of file",
        ),
        ("grap @g {}", 1, 1, "expected 'graph'"),
        (
            "graph @g {\n  %x = parameter 0 : f32[2] $\n}",
            2,
            29,
            "unexpected character '$'",
        ),
        (
            "graph @g {\n  %s = parameter 0 : string[2]\n  %y = neg(%s) : string[2]\n}",
            3,
            3,
            "strings are opaque",
        ),
        ("", 1, 1, "expected 'graph'"),
        (
            "graph @g {\n  %x = parameter 0 : f32[99999999999999999999999]\n}",
            2,
            26,
            "not a valid size",
        ),
        // NaN bits that are not a NaN of the type (a number, an infinity,
        // bits beyond its width) or not bits at all.
        (
            "graph @g {\n  %c = constant nan(0x1) : f32[]\n}",
            2,
            17,
            "nan(0x1) is not the bit pattern of a float32 NaN",
        ),
        (
            "graph @g {\n  %c = constant [nan(0x3f800000), 2.0] : f32[2]\n}",
            2,
            17,
            "nan(0x3f800000) is not the bit pattern of a float32 NaN",
        ),
        (
            "graph @g {\n  %c = constant nan(0x7f800000) : f32[]\n}",
            2,
            17,
            "is not the bit pattern of a float32 NaN",
        ),
        (
            "graph @g {\n  %c = constant nan(0x7ff0000000000001) : f32[]\n}",
            2,
            17,
            "is not the bit pattern of a float32 NaN",
        ),
        (
            "graph @g {\n  %c = constant nan(0x7c00) : f16[]\n}",
            2,
            17,
            "is not the bit pattern of a float16 NaN",
        ),
        (
            "graph @g {\n  %c = constant (1.0, nan(0x7f800000)) : c64[]\n}",
            2,
            23,
            "nan(0x7f800000) is not the bit pattern of a NaN",
        ),
        (
            "graph @g {\n  %c = constant nan(-1) : f32[]\n}",
            2,
            21,
            "a NaN's bits are a number in [0, 2^64)",
        ),
    ];
    for (src, line, col, needle) in cases {
        let e = text::parse(src, "t.tlir").expect_err(src);
        assert_eq!(e.code(), Code::InvalidArgument, "{src}");
        let d = e.detail().unwrap();
        let msg = e.to_string();
        assert!(msg.contains(needle), "{src}\n=> {msg}\n(wanted '{needle}')");
        if *line > 0 {
            let pos = d.pos.unwrap_or_else(|| panic!("no position: {msg}"));
            assert_eq!((pos.line, pos.col), (*line, *col), "{src}\n=> {msg}");
        }
    }
}

/// A graph named what Python names a lambda (`<lambda>`), or anything
/// else outside `[A-Za-z0-9_./-]`, prints as a quoted name and parses back
/// (an unpickled `tl.function(lambda ...)` failed here on `<`).
#[test]
fn graph_names_of_any_text_round_trip() {
    for name in ["<lambda>", "two words", "quote\"and\\slash", "ünïcode", ""] {
        let src = "graph @g {\n  %x = parameter 0 : f32[2]\n  return %x as y\n}\n";
        let mut g = text::parse(src, "f").unwrap();
        g.name = name.to_string();
        let printed = text::print(&g);
        let back =
            text::parse(&printed, "printed").unwrap_or_else(|e| panic!("{name:?}: {e}\n{printed}"));
        assert_eq!(back.name, name, "{printed}");
        assert_eq!(text::print(&back), printed);
    }
    let e = text::parse("graph @\"\\xff\" {\n  return\n}\n", "bad").unwrap_err();
    assert!(e.to_string().contains("UTF-8"), "{e}");
}

#[test]
fn types_and_sites_parse() {
    let src = "graph @g {\n  %x = parameter 0 : f32[2,?]\n  %u = parameter 1 : f32[*]\n  %y = neg(%x) : f32[2,?] loc(\"a b.rs\":12:34)\n  return %y as \"y\", %u as out2\n}\n";
    let g = text::parse(src, "f").unwrap();
    assert_eq!(
        g.ty(g.params()[0]),
        &TensorType::new(
            DType::F32,
            tensorlift::ir::Shape::Ranked(vec![Some(2), None])
        )
    );
    assert_eq!(g.ty(g.params()[1]).shape, tensorlift::ir::Shape::Unranked);
    let n = &g.nodes()[2];
    assert_eq!((&*n.site.file, n.site.line, n.site.col), ("a b.rs", 12, 34));
    assert_eq!(g.outputs()[1].name, "out2");
}

#[test]
fn nan_payloads_round_trip_in_every_float_and_complex_dtype() {
    // Fuzzer reproducers: signalling NaNs (f32 `01 00 80 7f` came back as
    // `00 00 c0 7f`) and NaN parts of complex numbers.
    let cases: Vec<(DType, Vec<u8>)> = vec![
        (
            DType::F32,
            [0x7f80_0001u32, 0xff80_0001, 0x7fbf_ffff, 0x7fc0_0001]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::F64,
            [
                0x7ff0_0000_0000_0001u64,
                0xfff4_0000_0000_0000,
                0x7ff8_0000_0000_0001,
                0xfff8_0000_0000_0000,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
        (
            DType::F16,
            [0x7c01u16, 0xfd01, 0x7e00, 0xfe00]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::BF16,
            [0x7f81u16, 0xff81, 0x7fc0, 0xffc0]
                .iter()
                .flat_map(|b| b.to_le_bytes())
                .collect(),
        ),
        (
            DType::C64,
            [
                0x7f80_0001u32,
                0x3f80_0000,
                0x0000_0000,
                0xffc0_0123,
                0x7fc0_0000,
                0x7fc0_0000,
                0xff80_4000,
                0x7f80_0001,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
        (
            DType::C128,
            [
                0x7ff0_0000_0000_0001u64,
                0,
                0x3ff0_0000_0000_0000,
                0xfff8_0000_0000_0123,
                0x7ff8_0000_0000_0000,
                0x7ff4_0000_0000_0000,
                0xfff0_0000_0000_0001,
                0x7ff8_0000_0000_0000,
            ]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect(),
        ),
    ];
    for (d, bytes) in cases {
        let mut g = Graph::new("nans");
        let lit = Literal::from_bytes(d, &[4], bytes.clone()).unwrap();
        let v = g.add(Op::Constant(lit), &[], Site::unknown()).unwrap();
        g.add_output(v, "c").unwrap();
        let printed = text::print(&g);
        let back = text::parse(&printed, "x").unwrap();
        let Op::Constant(l) = &back.producer(back.outputs()[0].value).op else {
            panic!("not a constant: {printed}");
        };
        assert_eq!(l.bytes(), &bytes[..], "{d}: {printed}");
        assert_eq!(text::print(&back), printed);
    }
}

#[test]
fn deeply_nested_literals_are_an_error_not_a_stack_overflow() {
    // Fuzzer reproducer: nested complex parentheses recursed once per level
    // in the parser (a stack overflow aborted the process).
    let depth = 1_000_000;
    let src = format!(
        "graph @g {{\n  %x = constant {}1{} : c64[]\n  return %x as \"x\"\n}}\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    let e = text::parse(&src, "nested.tlir").unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.to_string()
            .contains("2:18: expected a literal, found '('"),
        "{e}"
    );
    // One level is the complex syntax.
    let ok = "graph @g {\n  %x = constant (1, -2.5) : c64[]\n  return %x as \"x\"\n}\n";
    text::parse(ok, "ok.tlir").unwrap();
}

//! A generator of random valid graphs and inputs, from a seed. Ops are
//! drawn at random with operands of fitting types; whatever the builder
//! rejects is skipped, so every generated graph is well typed by
//! construction of the builder, not of this generator. Shared by the
//! property tests (`tests/common/random_graph.rs`) and the graph fuzz
//! target; changing what a seed draws changes what those tests cover.

use crate::ir::{
    BinaryOp, CmpOp, DotDims, Graph, Literal, Op, ReduceOp, Region, Scalar, Shape, Site,
    TensorType, UnaryOp, ValueId,
};
use crate::{DType, Error, Result, Tensor};

/// xorshift64*: small, deterministic, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    #[allow(
        clippy::should_implement_trait,
        reason = "an infinite stream, not an Iterator"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// A random element of `v`; panics if `v` is empty.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The dtypes graphs are drawn from (f32 twice: it is the common case).
pub const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::Bool,
    DType::F16,
    DType::BF16,
    DType::C64,
];
/// The static shapes parameters are drawn from.
pub const SHAPES: [&[usize]; 8] = [
    &[4],
    &[2, 3],
    &[3, 1],
    &[],
    &[2, 1, 3],
    &[1, 4],
    &[11],
    &[2, 9],
];

/// A scalar of `dtype`, sometimes an edge value (NaN, ±inf, -0.0,
/// denormal, integer extremes).
pub fn scalar(rng: &mut Rng, dtype: DType) -> Scalar {
    scalar_with(rng, dtype, GenOptions::default())
}

/// What the generator draws beyond the property tests' defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenOptions {
    /// Float edge values include NaNs with other bit patterns than the
    /// quiet positive one: signalling, negative, with a payload.
    pub nan_payloads: bool,
    /// Some ops are `while` loops (0 to 3 iterations, a counter carried
    /// beside a value) and `case`s (2 or 3 branches) whose regions are
    /// random graphs themselves, nested at most two deep.
    pub control_flow: bool,
}

/// Bit patterns of NaNs other than the default quiet one, per float dtype:
/// signalling, negative quiet, signalling with a high payload, negative
/// signalling.
fn payload_nan(rng: &mut Rng, dtype: DType) -> Scalar {
    let bits: u64 = match dtype {
        DType::F16 => *rng.pick(&[0x7c01, 0xfe00, 0x7dff, 0xfc01]),
        DType::BF16 => *rng.pick(&[0x7f81, 0xffc0, 0x7fbf, 0xff81]),
        DType::F32 => *rng.pick(&[0x7f80_0001, 0xffc0_0000, 0x7fbf_ffff, 0xff80_0001]),
        // Only `scalar_with`'s float arm calls this: a string draws there
        // as f64 does (its literal is rejected), other dtypes never come.
        DType::F64
        | DType::String
        | DType::Bool
        | DType::I8
        | DType::I16
        | DType::I32
        | DType::I64
        | DType::U8
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::C64
        | DType::C128 => *rng.pick(&[
            0x7ff0_0000_0000_0001,
            0xfff8_0000_0000_0000,
            0x7ff7_ffff_ffff_ffff,
            0xfff0_0000_0000_0001,
        ]),
    };
    let value = if dtype == DType::F64 {
        f64::from_bits(bits)
    } else {
        f64::NAN
    };
    Scalar::Float(value, Some(bits))
}

/// [`scalar`] with `options`; with the defaults, the same draws.
pub fn scalar_with(rng: &mut Rng, dtype: DType, options: GenOptions) -> Scalar {
    let edge = rng.chance(25);
    match dtype {
        DType::Bool => Scalar::Bool(rng.chance(50)),
        DType::I8 => int_scalar(rng, edge, -128, 127),
        DType::I16 => int_scalar(rng, edge, i16::MIN.into(), i16::MAX.into()),
        DType::I32 => int_scalar(rng, edge, i32::MIN.into(), i32::MAX.into()),
        DType::I64 => int_scalar(rng, edge, i64::MIN.into(), i64::MAX.into()),
        DType::U8 => int_scalar(rng, edge, 0, 255),
        DType::U16 => int_scalar(rng, edge, 0, u16::MAX.into()),
        DType::U32 => int_scalar(rng, edge, 0, u32::MAX.into()),
        DType::U64 => int_scalar(rng, edge, 0, u64::MAX.into()),
        DType::C64 | DType::C128 => Scalar::Complex(
            rng.below(9) as f64 * 0.5 - 2.0,
            rng.below(9) as f64 * 0.25 - 1.0,
        ),
        // A string draws as a float does; `Literal::from_scalars` then
        // rejects it.
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 | DType::String => {
            if edge && options.nan_payloads && rng.chance(30) {
                payload_nan(rng, dtype)
            } else if edge {
                Scalar::Float(
                    *rng.pick(&[
                        f64::NAN,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        -0.0,
                        0.0,
                        1e-40,
                        65504.0,
                    ]),
                    None,
                )
            } else {
                Scalar::Float((rng.below(64) as f64 - 32.0) / 8.0, None)
            }
        }
    }
}

/// An integer in `[lo, hi]`: an extreme, 0, 1 or -1 when `edge`, else a
/// small one.
fn int_scalar(rng: &mut Rng, edge: bool, lo: i128, hi: i128) -> Scalar {
    if edge {
        Scalar::Int(*rng.pick(&[lo, hi, 0, 1, lo.max(-1)]))
    } else {
        Scalar::Int((rng.below(13) as i128 - 6).clamp(lo, hi))
    }
}

/// A tensor of type `ty` filled with [`scalar`]s; an error when `ty` has a
/// dynamic shape or a dtype literals cannot hold (strings).
pub fn random_tensor(rng: &mut Rng, ty: &TensorType) -> Result<Tensor> {
    random_tensor_with(rng, ty, GenOptions::default())
}

/// [`random_tensor`] with `options`.
pub fn random_tensor_with(rng: &mut Rng, ty: &TensorType, options: GenOptions) -> Result<Tensor> {
    let dims = ty
        .shape
        .as_known()
        .ok_or_else(|| Error::invalid(format!("random_tensor: {ty} has a dynamic shape")))?;
    let n: usize = dims.iter().product();
    let vals: Vec<Scalar> = (0..n)
        .map(|_| scalar_with(rng, ty.dtype, options))
        .collect();
    Tensor::from_literal(&Literal::from_scalars(ty.dtype, &dims, &vals)?)
}

fn axes_subset(rng: &mut Rng, rank: usize) -> Vec<usize> {
    (0..rank).filter(|_| rng.chance(50)).collect()
}

/// One random op applied to random existing values (may be ill-typed; the
/// caller lets the builder decide).
fn random_op(rng: &mut Rng, g: &Graph, values: &[ValueId]) -> (Op, Vec<ValueId>) {
    let a = *rng.pick(values);
    let ta = g.ty(a).clone();
    let rank = ta.shape.rank().unwrap_or(0);
    let dims = ta.shape.as_known().unwrap_or_default();
    // Prefer a second operand of the same type.
    let same: Vec<ValueId> = values.iter().copied().filter(|v| g.ty(*v) == &ta).collect();
    let b = if rng.chance(80) {
        *rng.pick(&same)
    } else {
        *rng.pick(values)
    };
    match rng.below(22) {
        20 if rank > 0 => (
            Op::Iota {
                dtype: ta.dtype,
                dims: dims.clone(),
                dim: rng.below(rank),
            },
            vec![],
        ),
        0..=4 => (Op::Unary(*rng.pick(UnaryOp::ALL)), vec![a]),
        5..=9 => (Op::Binary(*rng.pick(BinaryOp::ALL)), vec![a, b]),
        10 => (Op::Compare(*rng.pick(CmpOp::ALL)), vec![a, b]),
        11 => {
            let preds: Vec<ValueId> = values
                .iter()
                .copied()
                .filter(|v| g.ty(*v).dtype == DType::Bool)
                .collect();
            if preds.is_empty() {
                (Op::Convert(DType::Bool), vec![a])
            } else {
                (Op::Select, vec![*rng.pick(&preds), a, b])
            }
        }
        12 if rng.chance(30) => (Op::BitcastConvert(*rng.pick(&DTYPES)), vec![a]),
        12 => (Op::Convert(*rng.pick(&DTYPES)), vec![a]),
        21 => {
            // dynamic_slice / dynamic_update_slice at scalar integer values
            // of the graph (often out of range: they clamp).
            let dt = if rng.chance(50) {
                DType::I32
            } else {
                DType::I64
            };
            let ints: Vec<ValueId> = values
                .iter()
                .copied()
                .filter(|v| g.ty(*v) == &TensorType::known(dt, &[]))
                .collect();
            if ints.is_empty() && rank > 0 {
                return (Op::BitcastConvert(ta.dtype), vec![a]);
            }
            let starts: Vec<ValueId> = (0..rank).map(|_| *rng.pick(&ints)).collect();
            if rng.chance(50) {
                let sizes = dims.iter().map(|&d| rng.below(d + 1)).collect();
                let mut ins = vec![a];
                ins.extend(starts);
                (Op::DynamicSlice { sizes }, ins)
            } else {
                let fits: Vec<ValueId> = values
                    .iter()
                    .copied()
                    .filter(|v| {
                        let t = g.ty(*v);
                        t.dtype == ta.dtype
                            && t.shape.as_known().is_some_and(|u| {
                                u.len() == rank && u.iter().zip(&dims).all(|(m, n)| m <= n)
                            })
                    })
                    .collect();
                let mut ins = vec![a, *rng.pick(&fits)];
                ins.extend(starts);
                (Op::DynamicUpdateSlice, ins)
            }
        }
        13 => {
            let mut shape = vec![2usize];
            shape.extend(dims.iter().copied());
            (
                Op::BroadcastInDim {
                    shape: Shape::known(&shape),
                    dims: (1..=rank).collect(),
                },
                vec![a],
            )
        }
        14 => {
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.reverse();
            if rng.chance(50) {
                (Op::Transpose(perm), vec![a])
            } else {
                (Op::Reshape(Shape::known(&[dims.iter().product()])), vec![a])
            }
        }
        15 => {
            let op = *rng.pick(ReduceOp::ALL);
            (
                Op::Reduce {
                    op,
                    axes: axes_subset(rng, rank),
                    keepdims: rng.chance(50),
                },
                vec![a],
            )
        }
        16 => {
            let start: Vec<usize> = dims
                .iter()
                .map(|&d| if d > 1 { rng.below(d) } else { 0 })
                .collect();
            let limit: Vec<usize> = dims
                .iter()
                .zip(&start)
                .map(|(&d, &s)| s + rng.below(d - s + 1))
                .collect();
            let stride = dims.iter().map(|_| 1 + rng.below(2)).collect();
            if rng.chance(50) {
                (
                    Op::Slice {
                        start,
                        limit,
                        stride,
                    },
                    vec![a],
                )
            } else {
                (Op::Reverse(axes_subset(rng, rank)), vec![a])
            }
        }
        17 => {
            if rank == 0 {
                return (Op::Unary(UnaryOp::Neg), vec![a]);
            }
            let axis = rng.below(rank);
            match rng.below(5) {
                0 => (Op::Concatenate { axis }, vec![a, a]),
                3 if ta.dtype.is_numeric() => (
                    Op::Cumsum {
                        axis,
                        reverse: rng.chance(50),
                        exclusive: rng.chance(50),
                    },
                    vec![a],
                ),
                1 => (
                    Op::ArgMax {
                        axis,
                        index_dtype: DType::I64,
                    },
                    vec![a],
                ),
                2 => (
                    Op::ArgSort {
                        axis,
                        descending: rng.chance(50),
                        index_dtype: DType::I32,
                    },
                    vec![a],
                ),
                _ => (
                    Op::ArgMin {
                        axis,
                        index_dtype: DType::I32,
                    },
                    vec![a],
                ),
            }
        }
        18 => {
            if rank == 2 && rng.chance(70) {
                (
                    Op::DotGeneral(DotDims {
                        lhs_batch: vec![],
                        rhs_batch: vec![],
                        lhs_contract: vec![1],
                        rhs_contract: vec![1],
                    }),
                    vec![a, b],
                )
            } else {
                let pads = rank;
                let low = (0..pads).map(|_| rng.below(3) as i64 - 1).collect();
                let high = (0..pads).map(|_| rng.below(3) as i64).collect();
                let interior = (0..pads).map(|_| rng.below(2)).collect();
                let scalars: Vec<ValueId> = values
                    .iter()
                    .copied()
                    .filter(|v| g.ty(*v).shape.rank() == Some(0) && g.ty(*v).dtype == ta.dtype)
                    .collect();
                let v = if scalars.is_empty() {
                    a
                } else {
                    *rng.pick(&scalars)
                };
                (
                    Op::Pad {
                        low,
                        high,
                        interior,
                    },
                    vec![a, v],
                )
            }
        }
        _ => (Op::Clamp, vec![a, b, b]),
    }
}

/// A random graph with up to `n_ops` ops after its parameters and a few
/// constants, and random inputs for it. The same `seed` and `n_ops` give
/// the same graph on every run and platform. Errors only if the builder
/// rejects a parameter, constant or output (a bug in the generator).
pub fn random_graph(seed: u64, n_ops: usize) -> Result<(Graph, Vec<Tensor>)> {
    random_graph_with(seed, n_ops, GenOptions::default())
}

/// [`random_graph`] with `options` (the same graph as [`random_graph`]
/// with the defaults).
pub fn random_graph_with(
    seed: u64,
    n_ops: usize,
    options: GenOptions,
) -> Result<(Graph, Vec<Tensor>)> {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new(format!("random_{seed}"));
    let site = Site {
        file: "random.rs".into(),
        line: 1,
        col: 1,
    };
    let mut values = Vec::new();
    let mut inputs = Vec::new();
    for i in 0..1 + rng.below(3) {
        let shape: &[usize] = SHAPES[rng.below(SHAPES.len())];
        let ty = TensorType::known(*rng.pick(&DTYPES), shape);
        inputs.push(random_tensor_with(&mut rng, &ty, options)?);
        values.push(g.add_parameter(i, ty, None, site.clone())?);
    }
    for _ in 0..1 + rng.below(3) {
        let d = *rng.pick(&DTYPES);
        let lit = Literal::from_scalars(d, &[], &[scalar_with(&mut rng, d, options)])?;
        values.push(g.add(Op::Constant(lit), &[], site.clone())?);
    }
    fill(&mut rng, &mut g, &mut values, n_ops, options, 0);
    let n_out = 1 + rng.below(3).min(values.len() - 1);
    for (k, v) in values.iter().rev().take(n_out).enumerate() {
        g.add_output(*v, format!("out{k}"))?;
    }
    Ok((g, inputs))
}

/// Adds up to `n_ops` random ops over `values` (and what they add) to `g`;
/// with [`GenOptions::control_flow`], some of them loops and branches
/// whose regions hold random ops in turn (`depth` counts the nesting).
fn fill(
    rng: &mut Rng,
    g: &mut Graph,
    values: &mut Vec<ValueId>,
    n_ops: usize,
    options: GenOptions,
    depth: usize,
) {
    let mut added = 0;
    for _ in 0..n_ops * 8 {
        if added == n_ops {
            break;
        }
        let site = Site {
            file: "random.rs".into(),
            line: 2 + added as u32,
            col: 5 + 4 * depth as u32,
        };
        if options.control_flow && depth < 2 && rng.chance(12) {
            if let Some(v) = random_control(rng, g, values, options, depth, &site) {
                values.push(v);
                added += 1;
            }
            continue;
        }
        let (op, ins) = random_op(rng, g, values);
        if let Ok(v) = g.add(op, &ins, site) {
            values.push(v);
            added += 1;
        }
    }
}

/// A region over parameters of `types` with random ops, and the value it
/// should return: the last value of type `types[out]` (the parameter
/// itself if no op made one). Its outputs are left to the caller.
fn random_region(
    rng: &mut Rng,
    name: String,
    types: &[TensorType],
    out: usize,
    options: GenOptions,
    depth: usize,
    site: &Site,
) -> Option<(Graph, Vec<ValueId>)> {
    let mut r = Graph::new(name);
    let params: Vec<ValueId> = types
        .iter()
        .enumerate()
        .map(|(i, t)| r.add_parameter(i, t.clone(), None, site.clone()))
        .collect::<Result<_>>()
        .ok()?;
    let mut values = params.clone();
    let d = types[out].dtype;
    let lit = Literal::from_scalars(d, &[], &[scalar_with(rng, d, options)]).ok()?;
    values.push(r.add(Op::Constant(lit), &[], site.clone()).ok()?);
    let n_ops = 1 + rng.below(5);
    fill(rng, &mut r, &mut values, n_ops, options, depth + 1);
    let result = values
        .iter()
        .rev()
        .find(|v| *r.ty(**v) == types[out])
        .copied()
        .unwrap_or(params[out]);
    Some((r, vec![result]))
}

/// A random `while` (a counter and one value carried, 0 to 3 iterations) or
/// `case` (2 or 3 branches over one value) whose result has the value's
/// type. `None` when what was drawn does not fit.
fn random_control(
    rng: &mut Rng,
    g: &mut Graph,
    values: &[ValueId],
    options: GenOptions,
    depth: usize,
    site: &Site,
) -> Option<ValueId> {
    let a = *rng.pick(values);
    let ta = g.ty(a).clone();
    if ta.dtype == DType::String {
        return None;
    }
    let counter = TensorType::known(DType::I32, &[]);
    let name = g.fresh_name(if rng.chance(50) { "while" } else { "case" });
    if name.starts_with("while") {
        let types = [counter.clone(), ta.clone()];
        // cond: i < trips, and half the time a test of the carried value
        // too (its maximum below a random bound): a data-dependent exit.
        let mut cond = Graph::new(format!("{name}_cond"));
        let i = cond
            .add_parameter(0, counter.clone(), None, site.clone())
            .ok()?;
        let v = cond.add_parameter(1, ta.clone(), None, site.clone()).ok()?;
        let trips =
            Literal::from_scalars(DType::I32, &[], &[Scalar::Int(rng.below(4) as i128)]).ok()?;
        let n = cond.add(Op::Constant(trips), &[], site.clone()).ok()?;
        let mut c = cond
            .add(Op::Compare(CmpOp::Lt), &[i, n], site.clone())
            .ok()?;
        if ta.dtype.is_real() && rng.chance(50) {
            let rank = ta.shape.rank().unwrap_or(0);
            let m = cond
                .add(
                    Op::Reduce {
                        op: ReduceOp::Max,
                        axes: (0..rank).collect(),
                        keepdims: false,
                    },
                    &[v],
                    site.clone(),
                )
                .ok()?;
            let bound =
                Literal::from_scalars(ta.dtype, &[], &[scalar_with(rng, ta.dtype, options)])
                    .ok()?;
            let b = cond.add(Op::Constant(bound), &[], site.clone()).ok()?;
            let below = cond
                .add(Op::Compare(CmpOp::Lt), &[m, b], site.clone())
                .ok()?;
            c = cond
                .add(Op::Binary(BinaryOp::And), &[c, below], site.clone())
                .ok()?;
        }
        cond.add_output(c, "pred").ok()?;
        // body: i + 1, random ops on the value.
        let (mut body, outs) =
            random_region(rng, format!("{name}_body"), &types, 1, options, depth, site)?;
        let bi = body.params()[0];
        let one = Literal::from_scalars(DType::I32, &[], &[Scalar::Int(1)]).ok()?;
        let one = body.add(Op::Constant(one), &[], site.clone()).ok()?;
        let next = body
            .add(Op::Binary(BinaryOp::Add), &[bi, one], site.clone())
            .ok()?;
        body.add_output(next, "i").ok()?;
        body.add_output(outs[0], "v").ok()?;
        let zero = Literal::from_scalars(DType::I32, &[], &[Scalar::Int(0)]).ok()?;
        let i0 = g.add(Op::Constant(zero), &[], site.clone()).ok()?;
        let id = g
            .add_node(crate::ir::NewNode {
                op: Op::While {
                    cond: Region::new(cond),
                    body: Region::new(body),
                },
                inputs: vec![i0, a],
                name: Some(name),
                site: site.clone(),
                effect: crate::ir::Effect::Pure,
                result_types: None,
            })
            .ok()?;
        return g.node(id).results.get(1).copied();
    }
    // case: the index from an integer scalar when there is one.
    let scalars: Vec<ValueId> = values
        .iter()
        .copied()
        .filter(|v| g.ty(*v).shape.rank() == Some(0) && g.ty(*v).dtype.is_int())
        .collect();
    let index = if !scalars.is_empty() && rng.chance(70) {
        let s = *rng.pick(&scalars);
        g.add(Op::Convert(DType::I32), &[s], site.clone()).ok()?
    } else {
        let k = Literal::from_scalars(DType::I32, &[], &[Scalar::Int(rng.below(4) as i128 - 1)])
            .ok()?;
        g.add(Op::Constant(k), &[], site.clone()).ok()?
    };
    let branches = (0..2 + rng.below(2))
        .map(|k| {
            let (mut r, outs) = random_region(
                rng,
                format!("{name}_branch{k}"),
                std::slice::from_ref(&ta),
                0,
                options,
                depth,
                site,
            )?;
            r.add_output(outs[0], "out").ok()?;
            Some(Region::new(r))
        })
        .collect::<Option<Vec<_>>>()?;
    let id = g
        .add_node(crate::ir::NewNode {
            op: Op::Case { branches },
            inputs: vec![index, a],
            name: Some(name),
            site: site.clone(),
            effect: crate::ir::Effect::Pure,
            result_types: None,
        })
        .ok()?;
    g.node(id).results.first().copied()
}

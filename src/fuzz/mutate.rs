//! A small deterministic byte mutator (AFL/libFuzzer-style havoc without
//! coverage feedback): bit flips, interesting bytes and numbers, inserted
//! dictionary tokens, deleted, duplicated and spliced ranges, and long
//! runs of nesting brackets (for recursion depth).

use crate::fuzz::random_graph::Rng;

/// Tokens of the `.tlir` grammar and the `.npy` header, inserted whole.
pub const DICTIONARY: &[&[u8]] = &[
    b"graph",
    b"@g",
    b"%x",
    b"%y",
    b"%0",
    b" = ",
    b"parameter 0",
    b"parameter 1",
    b"constant",
    b"return",
    b" as ",
    b"\"out\"",
    b"loc(",
    b")",
    b"(",
    b"[",
    b"]",
    b"{",
    b"}",
    b":",
    b", ",
    b"?",
    b"#1",
    b"=",
    b"f32",
    b"f64",
    b"f16",
    b"bf16",
    b"c64",
    b"c128",
    b"i8",
    b"i16",
    b"i32",
    b"i64",
    b"u8",
    b"u16",
    b"u32",
    b"u64",
    b"bool",
    b"string",
    b"nan",
    b"-nan",
    b"inf",
    b"-inf",
    b"nan(0x1)",
    b"0x7f800001",
    b"true",
    b"false",
    b"axes=",
    b"axis=",
    b"dims=",
    b"shape=",
    b"perm=",
    b"keepdims=",
    b"start=",
    b"limit=",
    b"stride=",
    b"dim=",
    b"low=",
    b"high=",
    b"interior=",
    b"lhs_contract=[1]",
    b"rhs_contract=[0]",
    b"lhs_batch=[]",
    b"rhs_batch=[]",
    b"add",
    b"mul",
    b"div",
    b"pow",
    b"exp",
    b"reduce_sum",
    b"reduce_max",
    b"unranked_",
    b"dynamic_slice",
    b"dynamic_update_slice",
    b"scatter",
    b"combiner=add",
    b"shift_left",
    b"shift_right_arithmetic",
    b"bitcast_convert",
    b"sizes=[1]",
    b"broadcast_to",
    b"broadcast_in_dim",
    b"reshape",
    b"transpose",
    b"slice",
    b"concatenate",
    b"take",
    b"iota",
    b"select",
    b"clamp",
    b"convert",
    b"dot_general",
    b"argmax",
    b"pad",
    b"numpy_function",
    b"host_fn",
    b"stateful",
    b"\n",
    b"//",
    b"\\",
    b"\\x00",
    b"'descr': '<f4'",
    b"'>f8'",
    b"'<c16'",
    b"'|b1'",
    b"'<V2'",
    b"'|O'",
    b"'<U3'",
    b"'fortran_order': True",
    b"'shape': (",
    b"(,)",
    b"\x93NUMPY",
    b"\x01\x00",
    b"\x02\x00",
    b"\x03\x00",
    b"\xff\xff",
];

/// Numbers that find overflow and edge bugs.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "255",
    "256",
    "65535",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "4611686018427387905",
    "99999999999999999999999999999",
    "1e308",
    "1e309",
    "-0.0",
    "4.9e-324",
    "65504",
    "0.1",
];

/// Bytes that matter to one of the formats.
const BYTES: &[u8] = b"\x00\xff\x7f\x80\n ()[]{},:%@=\"'?#-.0123456789eE";

/// Mutates bytes drawn from a pool, deterministically from its seed.
#[derive(Debug)]
pub struct Mutator {
    rng: Rng,
    max_len: usize,
}

impl Mutator {
    /// A mutator seeded with `seed` that never makes an input longer than
    /// `max_len` bytes.
    pub fn new(seed: u64, max_len: usize) -> Self {
        Mutator {
            rng: Rng::new(seed),
            max_len,
        }
    }

    /// The mutator's random stream (the driver draws its choices from it
    /// too, so one seed fixes a whole run).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A mutation of `base`: 1 to 16 stacked edits, some taking ranges
    /// from `pool` (splices).
    pub fn mutate(&mut self, base: &[u8], pool: &[Vec<u8>]) -> Vec<u8> {
        let mut data = base.to_vec();
        let n = 1 << self.rng.below(5);
        for _ in 0..n {
            self.edit(&mut data, pool);
        }
        data.truncate(self.max_len);
        data
    }

    fn pos(&mut self, data: &[u8]) -> usize {
        self.rng.below(data.len() + 1)
    }

    fn insert(&mut self, data: &mut Vec<u8>, at: usize, bytes: &[u8]) {
        let room = self.max_len.saturating_sub(data.len());
        let bytes = &bytes[..bytes.len().min(room)];
        data.splice(at..at, bytes.iter().copied());
    }

    fn edit(&mut self, data: &mut Vec<u8>, pool: &[Vec<u8>]) {
        let len = data.len();
        match self.rng.below(12) {
            0 if len > 0 => {
                let i = self.rng.below(len);
                data[i] ^= 1 << self.rng.below(8);
            }
            1 if len > 0 => {
                let i = self.rng.below(len);
                data[i] = *self.rng.pick(BYTES);
            }
            2 if len > 0 => {
                let i = self.rng.below(len);
                data[i] = self.rng.next() as u8;
            }
            3 if len > 0 => {
                // Delete a range, usually short.
                let i = self.rng.below(len);
                let span = if self.rng.chance(80) { 8 } else { len - i };
                let n = 1 + self.rng.below(span);
                data.drain(i..(i + n).min(len));
            }
            4 => {
                let at = self.pos(data);
                let tok = *self.rng.pick(DICTIONARY);
                self.insert(data, at, tok);
            }
            5 => self.replace_number(data),
            6 if len > 0 => {
                // Duplicate a range, sometimes many times (long inputs).
                let i = self.rng.below(len);
                let n = 1 + self.rng.below((len - i).min(256));
                let times = if self.rng.chance(10) {
                    1 + self.rng.below(4096)
                } else {
                    1 + self.rng.below(3)
                };
                let chunk = data[i..i + n].repeat(times);
                let at = self.pos(data);
                self.insert(data, at, &chunk);
            }
            7 if !pool.is_empty() => {
                // Splice in a range of another input.
                let other = self.rng.pick(pool).clone();
                if !other.is_empty() {
                    let i = self.rng.below(other.len());
                    let n = 1 + self.rng.below(other.len() - i);
                    let at = self.pos(data);
                    self.insert(data, at, &other[i..i + n]);
                }
            }
            8 => {
                // Deep nesting: open brackets, something, close brackets.
                let depth = if self.rng.chance(30) {
                    1 + self.rng.below(200_000)
                } else {
                    1 + self.rng.below(64)
                };
                let (open, close) = *self.rng.pick(&[("[", "]"), ("(", ")"), ("{", "}")]);
                let inner = *self.rng.pick(&["1", "", "1, 2", "nan", "(1, 2)", "%x"]);
                let s = format!("{}{inner}{}", open.repeat(depth), close.repeat(depth));
                let at = self.pos(data);
                self.insert(data, at, s.as_bytes());
            }
            9 if len > 0 => {
                let n = self.rng.below(len);
                data.truncate(n);
            }
            10 if len > 1 => {
                // Overwrite a range with another range of the same input.
                let i = self.rng.below(len);
                let j = self.rng.below(len);
                let n = 1 + self.rng.below((len - i.max(j)).min(64));
                let chunk = data[i..i + n].to_vec();
                data[j..j + n].copy_from_slice(&chunk);
            }
            _ => {
                // Little-endian integer edges over 2, 4 or 8 bytes.
                let w = *self.rng.pick(&[2usize, 4, 8]);
                if len >= w {
                    let i = self.rng.below(len - w + 1);
                    let v: u64 = *self
                        .rng
                        .pick(&[0, 1, u64::MAX, 1 << 63, 0x7fff_ffff, 0xffff]);
                    data[i..i + w].copy_from_slice(&v.to_le_bytes()[..w]);
                }
            }
        }
    }

    /// Replaces a decimal number in `data` (the first one at or after a
    /// random position) with one of [`NUMBERS`].
    fn replace_number(&mut self, data: &mut Vec<u8>) {
        let from = self.pos(data);
        let Some(start) = data[from..].iter().position(u8::is_ascii_digit) else {
            return;
        };
        let start = from + start;
        let end = start
            + data[start..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(data.len() - start);
        let num = *self.rng.pick(NUMBERS);
        data.splice(start..end, num.bytes());
    }
}

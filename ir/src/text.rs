//! The `.tlir` text format: one op per line, every value typed; prints and
//! parses back to an identical graph. The grammar is in `docs/ir.md`.

mod attrs;

use std::fmt::Write as _;
use std::sync::Arc;

use attrs::AttrVal;

use crate::literal::{Scalar, write_quoted};
use crate::{
    CallbackKind, CallbackOp, DType, Detail, Effect, Error, Graph, Literal, NewNode, Node, Op,
    Region, Result, Shape, Site, TensorType, TextPos, ValueId,
};

/// Prints `graph` in the text format.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    print_graph(graph, "", &mut out);
    out
}

/// Prints `graph` with every line indented by `indent` (regions nest).
fn print_graph(graph: &Graph, indent: &str, out: &mut String) {
    let _ = write!(out, "{indent}graph @");
    if !graph.name.is_empty() && graph.name.bytes().all(is_name_char) {
        out.push_str(&graph.name);
    } else {
        // Any other name (a Python lambda's `<lambda>`) as a string.
        write_quoted(graph.name.as_bytes(), out);
    }
    out.push_str(" {\n");
    let inner = format!("{indent}  ");
    for node in graph.nodes() {
        out.push_str(&inner);
        print_node(graph, node, &inner, out);
        out.push('\n');
    }
    out.push_str(&inner);
    out.push_str("return");
    for (i, o) in graph.outputs().iter().enumerate() {
        out.push_str(if i == 0 { " " } else { ", " });
        out.push_str(&value_name(graph, o.value));
        out.push_str(" as ");
        write_quoted(o.name.as_bytes(), out);
    }
    let _ = writeln!(out, "\n{indent}}}");
}

/// The text name of a value: `%node` or `%node#i` for multi-result nodes.
pub fn value_name(graph: &Graph, v: ValueId) -> String {
    let info = graph.value(v);
    let node = graph.node(info.node);
    if node.results.len() == 1 {
        format!("%{}", node.name)
    } else {
        format!("%{}#{}", node.name, info.index)
    }
}

fn print_node(graph: &Graph, node: &Node, indent: &str, out: &mut String) {
    let _ = write!(out, "%{} = {}", node.name, node.op.name());
    let operands = |out: &mut String| {
        out.push('(');
        for (i, v) in node.inputs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&value_name(graph, *v));
        }
        out.push(')');
    };
    match &node.op {
        Op::Parameter { index } => {
            let _ = write!(out, " {index}");
        }
        Op::Constant(lit) => {
            out.push(' ');
            print_literal(lit, out);
        }
        Op::Callback(c) => {
            out.push(' ');
            write_quoted(c.target.as_bytes(), out);
            out.push(' ');
            operands(out);
            if node.effect == Effect::Stateful {
                out.push_str(" stateful");
            }
        }
        op @ (Op::Iota { .. }
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Select
        | Op::Clamp
        | Op::Convert(_)
        | Op::BroadcastInDim { .. }
        | Op::Reshape(_)
        | Op::Transpose(_)
        | Op::Slice { .. }
        | Op::Concatenate { .. }
        | Op::Pad { .. }
        | Op::Reverse(_)
        | Op::Reduce { .. }
        | Op::ArgMax { .. }
        | Op::ArgMin { .. }
        | Op::ArgSort { .. }
        | Op::Cumsum { .. }
        | Op::DotGeneral(_)
        | Op::Take { .. }
        | Op::DynamicSlice { .. }
        | Op::DynamicUpdateSlice
        | Op::Scatter { .. }
        | Op::BitcastConvert(_)
        | Op::Dynamic(_)
        | Op::While { .. }
        | Op::Case { .. }
        | Op::StopGradient
        | Op::CustomVjp { .. }) => {
            operands(out);
            attrs::write(op, out);
        }
    }
    out.push_str(" : ");
    let types: Vec<&TensorType> = node.results.iter().map(|r| graph.ty(*r)).collect();
    let regions = node.op.regions();
    if matches!(node.op, Op::Callback(_)) || !regions.is_empty() {
        out.push('(');
        for (i, t) in types.iter().enumerate() {
            let _ = write!(out, "{}{t}", if i > 0 { ", " } else { "" });
        }
        out.push(')');
    } else {
        let _ = write!(out, "{}", types[0]);
    }
    out.push_str(" loc(");
    write_quoted(node.site.file.as_bytes(), out);
    let _ = write!(out, ":{}:{})", node.site.line, node.site.col);
    if !regions.is_empty() {
        out.push_str(" {\n");
        let inner = format!("{indent}  ");
        for r in regions {
            print_graph(r.graph(), &inner, out);
        }
        out.push_str(indent);
        out.push('}');
    }
}

fn print_literal(lit: &Literal, out: &mut String) {
    if lit.dims.is_empty() {
        lit.format_element(0, out);
        return;
    }
    out.push('[');
    for i in 0..lit.len() {
        if i > 0 {
            out.push_str(", ");
        }
        lit.format_element(i, out);
    }
    out.push(']');
}

// ---------------------------------------------------------------- lexer --

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Value(String, Option<u32>),
    Global(String),
    Ident(String),
    Int(i128),
    Float(f64),
    Str(Vec<u8>),
    Punct(char),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Value(n, _) => format!("value '%{n}'"),
            Tok::Global(n) => format!("'@{n}'"),
            Tok::Ident(s) => format!("'{s}'"),
            Tok::Int(i) => format!("number {i}"),
            Tok::Float(f) => format!("number {f}"),
            Tok::Str(_) => "a string".into(),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Eof => "end of file".into(),
        }
    }
}

struct Lexer<'a> {
    src: &'a [u8],
    i: usize,
    line: u32,
    col: u32,
}

fn is_name_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'/')
}

impl<'a> Lexer<'a> {
    fn err(&self, line: u32, col: u32, message: impl Into<String>) -> Error {
        Error::InvalidArgument(Detail {
            message: message.into(),
            node: None,
            pos: Some(TextPos { line, col }),
        })
    }

    fn bump(&mut self) -> Option<u8> {
        let c = *self.src.get(self.i)?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if c & 0xc0 != 0x80 {
            self.col += 1;
        }
        Some(c)
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.i).copied()
    }

    fn name(&mut self) -> String {
        let start = self.i;
        while self.peek().is_some_and(is_name_char) {
            self.bump();
        }
        String::from_utf8_lossy(&self.src[start..self.i]).into_owned()
    }

    fn tokens(mut self) -> Result<Vec<(Tok, TextPos)>> {
        let mut out = Vec::new();
        loop {
            while let Some(c) = self.peek() {
                if c.is_ascii_whitespace() {
                    self.bump();
                } else if c == b'/' && self.src.get(self.i + 1) == Some(&b'/') {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.bump();
                    }
                } else {
                    break;
                }
            }
            let (line, col) = (self.line, self.col);
            let pos = TextPos { line, col };
            let Some(c) = self.peek() else {
                out.push((Tok::Eof, pos));
                return Ok(out);
            };
            let tok = match c {
                b'%' => {
                    self.bump();
                    let name = self.name();
                    if name.is_empty() {
                        return Err(self.err(line, col, "expected a value name after '%'"));
                    }
                    let index = if self.peek() == Some(b'#') {
                        self.bump();
                        let start = self.i;
                        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                            self.bump();
                        }
                        let digits = std::str::from_utf8(&self.src[start..self.i]).unwrap_or("");
                        Some(digits.parse::<u32>().map_err(|_| {
                            self.err(line, col, "expected a result index after '#'")
                        })?)
                    } else {
                        None
                    };
                    Tok::Value(name, index)
                }
                b'@' => {
                    self.bump();
                    Tok::Global(self.name())
                }
                b'"' => {
                    self.bump();
                    let mut s = Vec::new();
                    loop {
                        match self.bump() {
                            None | Some(b'\n') => {
                                return Err(self.err(line, col, "unterminated string"));
                            }
                            Some(b'"') => break,
                            Some(b'\\') => match self.bump() {
                                Some(b'n') => s.push(b'\n'),
                                Some(b't') => s.push(b'\t'),
                                Some(b'"') => s.push(b'"'),
                                Some(b'\\') => s.push(b'\\'),
                                Some(b'x') => {
                                    let hex = [self.bump(), self.bump()];
                                    let v = match hex {
                                        [Some(a), Some(b)] => std::str::from_utf8(&[a, b])
                                            .ok()
                                            .and_then(|h| u8::from_str_radix(h, 16).ok()),
                                        _ => None,
                                    };
                                    s.push(v.ok_or_else(|| {
                                        self.err(self.line, self.col, "bad \\x escape")
                                    })?);
                                }
                                _ => {
                                    return Err(self.err(
                                        self.line,
                                        self.col,
                                        "unknown escape in string",
                                    ));
                                }
                            },
                            Some(c) => s.push(c),
                        }
                    }
                    Tok::Str(s)
                }
                b'0'..=b'9' | b'-' | b'+' => self.number(line, col)?,
                c if c.is_ascii_alphabetic() || c == b'_' => Tok::Ident(self.name()),
                b'(' | b')' | b'{' | b'}' | b'[' | b']' | b',' | b':' | b'=' | b'?' | b'*' => {
                    self.bump();
                    Tok::Punct(c as char)
                }
                _ => {
                    let ch = std::str::from_utf8(&self.src[self.i..])
                        .ok()
                        .and_then(|s| s.chars().next())
                        .unwrap_or('?');
                    return Err(self.err(line, col, format!("unexpected character '{ch}'")));
                }
            };
            out.push((tok, pos));
        }
    }

    fn number(&mut self, line: u32, col: u32) -> Result<Tok> {
        let start = self.i;
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.bump();
        }
        if self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            let word = self.name();
            let sign = if self.src[start] == b'-' { -1.0 } else { 1.0 };
            return match word.as_str() {
                "inf" => Ok(Tok::Float(sign * f64::INFINITY)),
                _ => Err(self.err(line, col, format!("expected a number, got '{word}'"))),
            };
        }
        if self.peek() == Some(b'0') && matches!(self.src.get(self.i + 1), Some(b'x' | b'X')) {
            self.bump();
            self.bump();
            let hs = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                self.bump();
            }
            let text = std::str::from_utf8(&self.src[hs..self.i]).unwrap_or("");
            return u64::from_str_radix(text, 16)
                .map(|v| Tok::Int(i128::from(v)))
                .map_err(|_| self.err(line, col, "bad hexadecimal number"));
        }
        let mut is_float = false;
        while let Some(c) = self.peek() {
            if c.is_ascii_digit() {
                self.bump();
            } else if c == b'.' || c == b'e' || c == b'E' {
                is_float = true;
                self.bump();
                if (c == b'e' || c == b'E') && matches!(self.peek(), Some(b'-' | b'+')) {
                    self.bump();
                }
            } else {
                break;
            }
        }
        let text = std::str::from_utf8(&self.src[start..self.i]).unwrap_or("");
        if is_float {
            text.parse::<f64>()
                .map(Tok::Float)
                .map_err(|_| self.err(line, col, format!("bad number '{text}'")))
        } else {
            text.parse::<i128>()
                .map(Tok::Int)
                .map_err(|_| self.err(line, col, format!("bad number '{text}'")))
        }
    }
}

// --------------------------------------------------------------- parser --

/// Parses a graph in the text format. `file` names the source in creation
/// sites of nodes written without `loc(...)` and in nothing else.
pub fn parse(src: &str, file: &str) -> Result<Graph> {
    let toks = Lexer {
        src: src.as_bytes(),
        i: 0,
        line: 1,
        col: 1,
    }
    .tokens()?;
    let mut p = Parser {
        toks,
        at: 0,
        file: Arc::from(file),
    };
    let g = p.graph(0)?;
    if *p.peek() != Tok::Eof {
        return Err(p.expected("end of file"));
    }
    crate::verify::verify(&g)?;
    Ok(g)
}

/// Deepest nesting of regions the parser accepts (the parser recurses once
/// per level).
pub const MAX_REGION_DEPTH: usize = 64;

struct Parser {
    toks: Vec<(Tok, TextPos)>,
    at: usize,
    file: Arc<str>,
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.at.min(self.toks.len() - 1)].0
    }

    fn pos(&self) -> TextPos {
        self.toks[self.at.min(self.toks.len() - 1)].1
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.at < self.toks.len() - 1 {
            self.at += 1;
        }
        t
    }

    fn err_at(&self, pos: TextPos, message: impl Into<String>) -> Error {
        error_at(pos, message)
    }

    fn expected(&self, what: &str) -> Error {
        self.err_at(
            self.pos(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }

    fn punct(&mut self, c: char) -> Result<()> {
        if *self.peek() == Tok::Punct(c) {
            self.next();
            Ok(())
        } else {
            Err(self.expected(&format!("'{c}'")))
        }
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if *self.peek() == Tok::Punct(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn keyword(&mut self, k: &str) -> Result<()> {
        if *self.peek() == Tok::Ident(k.into()) {
            self.next();
            Ok(())
        } else {
            Err(self.expected(&format!("'{k}'")))
        }
    }

    fn int(&mut self) -> Result<i128> {
        match self.peek() {
            Tok::Int(i) => {
                let i = *i;
                self.next();
                Ok(i)
            }
            Tok::Value(..)
            | Tok::Global(_)
            | Tok::Ident(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Punct(_)
            | Tok::Eof => Err(self.expected("an integer")),
        }
    }

    /// The next token's word, when it is one; else an error saying `what`
    /// was expected.
    fn ident(&mut self, what: &str) -> Result<String> {
        match self.peek() {
            Tok::Ident(s) => {
                let s = s.clone();
                self.next();
                Ok(s)
            }
            Tok::Value(..)
            | Tok::Global(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Punct(_)
            | Tok::Eof => Err(self.expected(what)),
        }
    }

    /// The next token's bytes, when it is a quoted string; else an error
    /// saying `what` was expected.
    fn quoted(&mut self, what: &str) -> Result<Vec<u8>> {
        match self.peek() {
            Tok::Str(s) => {
                let s = s.clone();
                self.next();
                Ok(s)
            }
            Tok::Value(..)
            | Tok::Global(_)
            | Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Punct(_)
            | Tok::Eof => Err(self.expected(what)),
        }
    }

    fn usize(&mut self) -> Result<usize> {
        let pos = self.pos();
        let i = self.int()?;
        usize::try_from(i)
            .map_err(|_| self.err_at(pos, format!("{i} is not a valid size or index")))
    }

    /// `graph @name { nodes... return ... }`; `depth` counts the regions
    /// it is nested in.
    fn graph(&mut self, depth: usize) -> Result<Graph> {
        let start = self.pos();
        if depth > MAX_REGION_DEPTH {
            return Err(self.err_at(
                start,
                format!("regions nest deeper than {MAX_REGION_DEPTH} levels"),
            ));
        }
        self.keyword("graph")?;
        let name = match self.next() {
            Tok::Global(n) if !n.is_empty() => n,
            Tok::Global(_) if matches!(self.peek(), Tok::Str(_)) => {
                let pos = self.pos();
                let s = self.quoted("a graph name")?;
                String::from_utf8(s)
                    .map_err(|_| self.err_at(pos, "the graph name is not valid UTF-8"))?
            }
            Tok::Value(..)
            | Tok::Global(_)
            | Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Punct(_)
            | Tok::Eof => {
                return Err(self.err_at(
                    self.toks[self.at.saturating_sub(1)].1,
                    "expected '@name' after 'graph'",
                ));
            }
        };
        self.punct('{')?;
        let mut g = Graph::new(name);
        let mut values: std::collections::HashMap<String, Vec<ValueId>> = Default::default();
        loop {
            match self.peek().clone() {
                Tok::Value(name, None) => self.node(&mut g, &mut values, name, depth)?,
                Tok::Ident(k) if k == "return" => {
                    self.next();
                    self.returns(&mut g, &values)?;
                    self.punct('}')?;
                    return Ok(g);
                }
                Tok::Value(..)
                | Tok::Global(_)
                | Tok::Ident(_)
                | Tok::Int(_)
                | Tok::Float(_)
                | Tok::Str(_)
                | Tok::Punct(_)
                | Tok::Eof => return Err(self.expected("a node ('%name = ...') or 'return'")),
            }
        }
    }

    fn value_ref(
        &mut self,
        values: &std::collections::HashMap<String, Vec<ValueId>>,
    ) -> Result<ValueId> {
        let pos = self.pos();
        match self.next() {
            Tok::Value(name, idx) => {
                let vs = values
                    .get(&name)
                    .ok_or_else(|| self.err_at(pos, format!("use of undefined value '%{name}'")))?;
                match (idx, vs.len()) {
                    (None, 1) => Ok(vs[0]),
                    (None, n) => Err(self.err_at(
                        pos,
                        format!("'%{name}' has {n} results; name one as '%{name}#i'"),
                    )),
                    (Some(i), n) => vs.get(i as usize).copied().ok_or_else(|| {
                        self.err_at(
                            pos,
                            format!("'%{name}' has {n} result(s); there is no result #{i}"),
                        )
                    }),
                }
            }
            t @ (Tok::Global(_)
            | Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Str(_)
            | Tok::Punct(_)
            | Tok::Eof) => {
                Err(self.err_at(pos, format!("expected a value, found {}", t.describe())))
            }
        }
    }

    fn returns(
        &mut self,
        g: &mut Graph,
        values: &std::collections::HashMap<String, Vec<ValueId>>,
    ) -> Result<()> {
        if *self.peek() == Tok::Punct('}') {
            return Ok(());
        }
        loop {
            let v = self.value_ref(values)?;
            self.keyword("as")?;
            let pos = self.pos();
            let name = match self.next() {
                Tok::Str(s) => String::from_utf8(s)
                    .map_err(|_| self.err_at(pos, "output name is not UTF-8"))?,
                Tok::Ident(s) => s,
                t @ (Tok::Value(..)
                | Tok::Global(_)
                | Tok::Int(_)
                | Tok::Float(_)
                | Tok::Punct(_)
                | Tok::Eof) => {
                    return Err(self.err_at(
                        pos,
                        format!("expected an output name, found {}", t.describe()),
                    ));
                }
            };
            g.add_output(v, name).map_err(|e| with_pos(e, pos))?;
            if !self.eat_punct(',') {
                return Ok(());
            }
        }
    }

    fn node(
        &mut self,
        g: &mut Graph,
        values: &mut std::collections::HashMap<String, Vec<ValueId>>,
        name: String,
        depth: usize,
    ) -> Result<()> {
        let start = self.pos();
        self.next();
        if values.contains_key(&name) {
            return Err(self.err_at(start, format!("value '%{name}' is defined twice")));
        }
        self.punct('=')?;
        let op_pos = self.pos();
        let op_name = self.ident("an op name")?;
        let mut inputs = Vec::new();
        let mut effect = Effect::Pure;
        let mut result_types = None;
        let mut region_site = None;
        let op = match op_name.as_str() {
            "parameter" => {
                let index = self.usize()?;
                self.punct(':')?;
                result_types = Some(vec![self.ty()?]);
                Op::Parameter { index }
            }
            "constant" => {
                let lit_pos = self.pos();
                let scalars = self.literal_elems()?;
                self.punct(':')?;
                let ty = self.ty()?;
                let dims = ty.shape.as_known().ok_or_else(|| {
                    self.err_at(
                        lit_pos,
                        format!("a constant needs a static shape, got {ty}"),
                    )
                })?;
                let lit = match scalars {
                    LitElems::Strings(s) if ty.dtype == DType::String => {
                        Literal::from_strings(&dims, s)
                    }
                    LitElems::Scalars(v) if ty.dtype != DType::String => {
                        Literal::from_scalars(ty.dtype, &dims, &v)
                    }
                    LitElems::Strings(_) | LitElems::Scalars(_) => Err(Error::invalid(format!(
                        "literal elements do not match type {ty}"
                    ))),
                }
                .map_err(|e| with_pos(e, lit_pos))?;
                Op::Constant(lit)
            }
            k if CallbackKind::from_name(k).is_some() => {
                let kind =
                    CallbackKind::from_name(k).ok_or_else(|| self.expected("a callback kind"))?;
                let tpos = self.pos();
                let target = String::from_utf8(self.quoted("the callback's name in quotes")?)
                    .map_err(|_| self.err_at(tpos, "callback name is not UTF-8"))?;
                inputs = self.operands(values)?;
                if *self.peek() == Tok::Ident("stateful".into()) {
                    self.next();
                    effect = Effect::Stateful;
                }
                self.punct(':')?;
                result_types = Some(self.type_list()?);
                Op::Callback(CallbackOp { kind, target })
            }
            "while" | "case" | "custom_vjp" => {
                inputs = self.operands(values)?;
                let attrs = if *self.peek() == Tok::Punct('{') {
                    self.attrs()?
                } else {
                    Vec::new()
                };
                self.punct(':')?;
                result_types = Some(self.type_list()?);
                let site = if *self.peek() == Tok::Ident("loc".into()) {
                    self.loc()?
                } else {
                    self.here(start)
                };
                region_site = Some(site);
                self.punct('{')?;
                let mut regions = Vec::new();
                while !self.eat_punct('}') {
                    regions.push(Region::new(self.graph(depth + 1)?));
                }
                if op_name == "custom_vjp" {
                    let [body, vjp]: [Region; 2] = regions.try_into().map_err(|r: Vec<_>| {
                        self.err_at(
                            op_pos,
                            format!(
                                "custom_vjp takes two regions (body, gradient), not {}",
                                r.len()
                            ),
                        )
                    })?;
                    let blank = Op::CustomVjp {
                        inputs: 0,
                        body,
                        vjp,
                    };
                    attrs::read_into(blank, op_pos, &attrs)?
                } else if !attrs.is_empty() {
                    return Err(self.err_at(op_pos, format!("{op_name} takes no attributes")));
                } else if op_name == "case" {
                    if regions.is_empty() {
                        return Err(self.err_at(op_pos, "case needs at least one branch"));
                    }
                    Op::Case { branches: regions }
                } else {
                    let [cond, body]: [Region; 2] = regions.try_into().map_err(|r: Vec<_>| {
                        self.err_at(
                            op_pos,
                            format!("while takes two regions (condition, body), not {}", r.len()),
                        )
                    })?;
                    Op::While { cond, body }
                }
            }
            _ => {
                inputs = self.operands(values)?;
                let attrs = if *self.peek() == Tok::Punct('{') {
                    self.attrs()?
                } else {
                    Vec::new()
                };
                self.punct(':')?;
                let ty = self.ty()?;
                let op = attrs::read(&op_name, op_pos, &attrs, &ty)?;
                result_types = Some(vec![ty]);
                op
            }
        };
        let site = match region_site {
            Some(site) => site,
            None if *self.peek() == Tok::Ident("loc".into()) => self.loc()?,
            None => self.here(start),
        };
        let id = g
            .add_node(NewNode {
                op,
                inputs,
                name: Some(name.clone()),
                site,
                effect,
                result_types,
            })
            .map_err(|e| with_pos(e, start))?;
        values.insert(name, g.node(id).results.clone());
        Ok(())
    }

    fn here(&self, pos: TextPos) -> Site {
        Site {
            file: self.file.clone(),
            line: pos.line,
            col: pos.col,
        }
    }

    fn loc(&mut self) -> Result<Site> {
        self.keyword("loc")?;
        self.punct('(')?;
        let pos = self.pos();
        let file = String::from_utf8(self.quoted("a quoted file name")?)
            .map_err(|_| self.err_at(pos, "file name is not UTF-8"))?;
        self.punct(':')?;
        let line = u32::try_from(self.int()?).map_err(|_| self.err_at(pos, "bad line number"))?;
        self.punct(':')?;
        let col = u32::try_from(self.int()?).map_err(|_| self.err_at(pos, "bad column number"))?;
        self.punct(')')?;
        Ok(Site {
            file: Arc::from(file),
            line,
            col,
        })
    }

    fn operands(
        &mut self,
        values: &std::collections::HashMap<String, Vec<ValueId>>,
    ) -> Result<Vec<ValueId>> {
        self.punct('(')?;
        let mut out = Vec::new();
        while !self.eat_punct(')') {
            if !out.is_empty() {
                self.punct(',')?;
            }
            out.push(self.value_ref(values)?);
        }
        Ok(out)
    }

    /// `(t, t, ...)`.
    fn type_list(&mut self) -> Result<Vec<TensorType>> {
        self.punct('(')?;
        let mut tys = Vec::new();
        while !self.eat_punct(')') {
            if !tys.is_empty() {
                self.punct(',')?;
            }
            tys.push(self.ty()?);
        }
        Ok(tys)
    }

    fn ty(&mut self) -> Result<TensorType> {
        let pos = self.pos();
        let name = self.ident("a type like f32[2,3]")?;
        let dtype = DType::from_name(&name)
            .ok_or_else(|| self.err_at(pos, format!("unknown dtype '{name}'")))?;
        let shape = self.shape()?;
        Ok(TensorType::new(dtype, shape))
    }

    fn shape(&mut self) -> Result<Shape> {
        self.punct('[')?;
        if self.eat_punct('*') {
            self.punct(']')?;
            return Ok(Shape::Unranked);
        }
        let mut dims = Vec::new();
        while !self.eat_punct(']') {
            if !dims.is_empty() {
                self.punct(',')?;
            }
            if self.eat_punct('?') {
                dims.push(None);
            } else {
                dims.push(Some(self.usize()?));
            }
        }
        Ok(Shape::Ranked(dims))
    }

    fn attrs(&mut self) -> Result<Vec<(String, AttrVal, TextPos)>> {
        self.punct('{')?;
        let mut out = Vec::new();
        while !self.eat_punct('}') {
            if !out.is_empty() {
                self.punct(',')?;
            }
            let pos = self.pos();
            let key = self.ident("an attribute name")?;
            self.punct('=')?;
            let vpos = self.pos();
            let val = match self.next() {
                Tok::Int(i) => AttrVal::Int(
                    i64::try_from(i).map_err(|_| self.err_at(vpos, "attribute out of range"))?,
                ),
                Tok::Ident(b) if b == "true" || b == "false" => AttrVal::Bool(b == "true"),
                Tok::Ident(w) => AttrVal::Word(w),
                Tok::Punct('[') => {
                    if self.eat_punct('*') {
                        self.punct(']')?;
                        AttrVal::Star
                    } else {
                        let mut items = Vec::new();
                        while !self.eat_punct(']') {
                            if !items.is_empty() {
                                self.punct(',')?;
                            }
                            if self.eat_punct('?') {
                                items.push(None);
                            } else {
                                let p = self.pos();
                                let i = self.int()?;
                                items.push(Some(
                                    i64::try_from(i)
                                        .map_err(|_| self.err_at(p, "attribute out of range"))?,
                                ));
                            }
                        }
                        AttrVal::List(items)
                    }
                }
                t @ (Tok::Value(..)
                | Tok::Global(_)
                | Tok::Float(_)
                | Tok::Str(_)
                | Tok::Punct(_)
                | Tok::Eof) => {
                    return Err(self.err_at(
                        vpos,
                        format!("expected an attribute value, found {}", t.describe()),
                    ));
                }
            };
            out.push((key, val, pos));
        }
        Ok(out)
    }

    fn literal_elems(&mut self) -> Result<LitElems> {
        if self.eat_punct('[') {
            let mut scalars = Vec::new();
            let mut strings = Vec::new();
            while !self.eat_punct(']') {
                if !(scalars.is_empty() && strings.is_empty()) {
                    self.punct(',')?;
                }
                match self.peek() {
                    Tok::Str(s) => {
                        strings.push(s.clone());
                        self.next();
                    }
                    Tok::Value(..)
                    | Tok::Global(_)
                    | Tok::Ident(_)
                    | Tok::Int(_)
                    | Tok::Float(_)
                    | Tok::Punct(_)
                    | Tok::Eof => scalars.push(self.scalar()?),
                }
            }
            if !strings.is_empty() && !scalars.is_empty() {
                return Err(self.expected("elements of one kind"));
            }
            return Ok(if strings.is_empty() {
                LitElems::Scalars(scalars)
            } else {
                LitElems::Strings(strings)
            });
        }
        if let Tok::Str(s) = self.peek() {
            let s = s.clone();
            self.next();
            return Ok(LitElems::Strings(vec![s]));
        }
        Ok(LitElems::Scalars(vec![self.scalar()?]))
    }

    fn scalar(&mut self) -> Result<Scalar> {
        self.scalar_in(true)
    }

    /// A literal element; a complex `(re, im)` only when `complex` (its
    /// parts are real: the grammar has no nesting, and the parser no
    /// recursion an input could deepen).
    fn scalar_in(&mut self, complex: bool) -> Result<Scalar> {
        let pos = self.pos();
        match self.next() {
            Tok::Int(i) => Ok(Scalar::Int(i)),
            Tok::Float(f) => Ok(Scalar::Float(f, None)),
            Tok::Ident(s) => match s.as_str() {
                "true" => Ok(Scalar::Bool(true)),
                "false" => Ok(Scalar::Bool(false)),
                "inf" => Ok(Scalar::Float(f64::INFINITY, None)),
                "nan" => {
                    if self.eat_punct('(') {
                        let at = self.pos();
                        let bits = u64::try_from(self.int()?).map_err(|_| {
                            self.err_at(at, "a NaN's bits are a number in [0, 2^64)")
                        })?;
                        self.punct(')')?;
                        Ok(Scalar::Float(f64::NAN, Some(bits)))
                    } else {
                        Ok(Scalar::Float(f64::NAN, None))
                    }
                }
                _ => Err(self.err_at(pos, format!("expected a literal, found '{s}'"))),
            },
            Tok::Punct('(') if complex => {
                let re = self.real()?;
                self.punct(',')?;
                let im = self.real()?;
                self.punct(')')?;
                Ok(Scalar::Complex(re, im))
            }
            t @ (Tok::Value(..) | Tok::Global(_) | Tok::Str(_) | Tok::Punct(_) | Tok::Eof) => {
                Err(self.err_at(pos, format!("expected a literal, found {}", t.describe())))
            }
        }
    }

    fn real(&mut self) -> Result<f64> {
        let pos = self.pos();
        match self.scalar_in(false)? {
            Scalar::Int(i) => Ok(i as f64),
            Scalar::Float(_, Some(bits)) => crate::literal::nan_from_bits(bits).ok_or_else(|| {
                self.err_at(
                    pos,
                    format!("nan(0x{bits:x}) is not the bit pattern of a NaN"),
                )
            }),
            Scalar::Float(f, None) => Ok(f),
            Scalar::Bool(_) | Scalar::Complex(..) => {
                Err(self.err_at(pos, "expected a real number"))
            }
        }
    }
}

enum LitElems {
    Scalars(Vec<Scalar>),
    Strings(Vec<Vec<u8>>),
}

fn with_pos(e: Error, pos: TextPos) -> Error {
    match e {
        Error::InvalidArgument(mut d) => {
            d.pos.get_or_insert(pos);
            Error::InvalidArgument(d)
        }
        other @ (Error::OutOfRange(_)
        | Error::ResourceExhausted(_)
        | Error::Unimplemented(_)
        | Error::Unknown(_)
        | Error::Internal(_)
        | Error::NotFound(_)
        | Error::FailedPrecondition(_)
        | Error::JitIncompatible { .. }) => other,
    }
}

/// An invalid-argument error at `pos`.
fn error_at(pos: TextPos, message: impl Into<String>) -> Error {
    Error::InvalidArgument(Detail {
        message: message.into(),
        node: None,
        pos: Some(pos),
    })
}

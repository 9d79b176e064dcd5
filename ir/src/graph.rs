//! The graph: SSA nodes in topological order, typed values, named outputs.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::infer::infer;
use crate::{CallbackRef, Detail, Error, NodeRef, Op, Result, Site, TensorType};

macro_rules! index_type {
    ($(#[$m:meta])* $name:ident, $prefix:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            /// The index as `usize`.
            pub fn index(self) -> usize { self.0 as usize }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, concat!($prefix, "{}"), self.0) }
        }
    };
}

index_type!(
    /// A node in a [`Graph`].
    NodeId,
    "n"
);
index_type!(
    /// A value (one result of one node) in a [`Graph`].
    ValueId,
    "v"
);

/// Whether a node may be merged, moved or removed by the optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// No side effects: may be merged (CSE), removed when unused, folded.
    Pure,
    /// Side effects: never merged or removed; runs once per call, in order.
    Stateful,
}

/// One operation applied to operand values, producing result values.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The operation and its attributes.
    pub op: Op,
    /// Operand values.
    pub inputs: Vec<ValueId>,
    /// Result values (one for every op but callbacks).
    pub results: Vec<ValueId>,
    /// Unique name within the graph.
    pub name: String,
    /// Where the node was created.
    pub site: Site,
    /// Pure or stateful.
    pub effect: Effect,
}

/// What defines a value, and its type.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueInfo {
    /// The defining node.
    pub node: NodeId,
    /// Which of the node's results.
    pub index: u32,
    /// The value's type.
    pub ty: TensorType,
}

/// A named result of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The value returned.
    pub value: ValueId,
    /// Its name (used for file names by the CLI).
    pub name: String,
}

/// Everything needed to add a node, for [`Graph::add_node`].
#[derive(Clone, Debug)]
pub struct NewNode {
    /// The operation.
    pub op: Op,
    /// Operand values.
    pub inputs: Vec<ValueId>,
    /// A name; a fresh one derived from the op is made when `None`.
    pub name: Option<String>,
    /// Where the node was created.
    pub site: Site,
    /// Pure or stateful.
    pub effect: Effect,
    /// Declared result types (parameters and callbacks); inferred when `None`.
    pub result_types: Option<Vec<TensorType>>,
}

impl NewNode {
    /// A pure node with inferred types and a generated name.
    pub fn new(op: Op, inputs: Vec<ValueId>, site: Site) -> Self {
        NewNode {
            op,
            inputs,
            name: None,
            site,
            effect: Effect::Pure,
            result_types: None,
        }
    }
}

/// A tensor program in SSA form. Nodes are stored in topological order;
/// callables of callback nodes are bound by name and not part of equality.
#[derive(Clone, Default)]
pub struct Graph {
    /// The graph's name.
    pub name: String,
    nodes: Vec<Node>,
    values: Vec<ValueInfo>,
    outputs: Vec<Output>,
    names: rustc_hash::FxHashSet<String>,
    name_counters: rustc_hash::FxHashMap<String, usize>,
    bindings: HashMap<String, CallbackRef>,
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.nodes == other.nodes
            && self.values == other.values
            && self.outputs == other.outputs
    }
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::text::print(self))
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The nodes, in topological order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// Ids of all nodes in order.
    pub fn node_ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + use<> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Number of values.
    pub fn num_values(&self) -> usize {
        self.values.len()
    }

    /// What defines `v`, and its type.
    pub fn value(&self, v: ValueId) -> &ValueInfo {
        &self.values[v.index()]
    }

    /// The type of `v`.
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v.index()].ty
    }

    /// The node defining `v`.
    pub fn producer(&self, v: ValueId) -> &Node {
        self.node(self.values[v.index()].node)
    }

    /// The graph's named results.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// The parameter values, ordered by parameter index.
    pub fn params(&self) -> Vec<ValueId> {
        let mut ps: Vec<(usize, ValueId)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                if let Op::Parameter { index } = n.op {
                    Some((index, n.results[0]))
                } else {
                    None
                }
            })
            .collect();
        ps.sort();
        ps.into_iter().map(|(_, v)| v).collect()
    }

    /// A reference to a node for error messages.
    pub fn node_ref(&self, id: NodeId) -> NodeRef {
        let n = self.node(id);
        NodeRef {
            name: n.name.clone(),
            op: n.op.name(),
            site: n.site.clone(),
        }
    }

    /// A name not yet used in the graph, derived from `base` (`add`,
    /// `add_1`, `add_2`, ...).
    pub fn fresh_name(&mut self, base: &str) -> String {
        if !self.names.contains(base) {
            return base.to_string();
        }
        let counter = self.name_counters.entry(base.to_string()).or_insert(0);
        loop {
            *counter += 1;
            let candidate = format!("{base}_{counter}");
            if !self.names.contains(&candidate) {
                return candidate;
            }
        }
    }

    /// True when a node is named `name`.
    pub fn has_name(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Adds a node after checking its operands and inferring (or taking the
    /// declared) result types. Errors name the op, the node and the site.
    pub fn add_node(&mut self, new: NewNode) -> Result<NodeId> {
        let op_name = new.op.name();
        let name = match new.name {
            Some(n) => n,
            None => {
                let base = match &new.op {
                    Op::Callback(c) => c.target.clone(),
                    Op::Parameter { .. }
                    | Op::Constant(_)
                    | Op::Iota { .. }
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
                    | Op::CustomVjp { .. } => op_name.clone(),
                };
                self.fresh_name(&base)
            }
        };
        let node_ref = NodeRef {
            name: name.clone(),
            op: op_name,
            site: new.site.clone(),
        };
        let fail = |message: String| {
            Error::InvalidArgument(Detail {
                message,
                node: Some(node_ref.clone()),
                pos: None,
            })
        };
        if self.names.contains(&name) {
            return Err(fail(format!("a node named '{name}' already exists")));
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
        {
            return Err(fail(format!(
                "'{name}' is not a valid node name (letters, digits, _ . - /)"
            )));
        }
        if let Some(bad) = new.inputs.iter().find(|v| v.index() >= self.values.len()) {
            return Err(fail(format!("operand {bad} does not exist")));
        }
        // Callbacks are stateful as declared; control flow is stateful when
        // its regions are; nothing else may be.
        let effect = if matches!(new.op, Op::Callback(_)) {
            new.effect
        } else if !new.op.regions().is_empty() {
            new.op.region_effect()
        } else if new.effect == Effect::Stateful {
            return Err(fail("only callbacks may be stateful".into()));
        } else {
            Effect::Pure
        };
        let types = match (&new.op, new.result_types) {
            (Op::Parameter { .. }, Some(t)) if t.len() == 1 && new.inputs.is_empty() => t,
            (Op::Callback(_), Some(t)) => t,
            (Op::Parameter { .. } | Op::Callback(_), _) => {
                return Err(fail("needs declared result types".into()));
            }
            (op, declared) => {
                let ins: Vec<&TensorType> = new
                    .inputs
                    .iter()
                    .map(|v| &self.values[v.index()].ty)
                    .collect();
                let inferred = infer(op, &ins).map_err(fail)?;
                if let Some(d) = declared
                    && d != inferred
                {
                    return Err(fail(format!(
                        "declared result type {} does not match the inferred {}",
                        types_str(&d),
                        types_str(&inferred)
                    )));
                }
                inferred
            }
        };
        for t in &types {
            if let Some(dims) = t.shape.as_known() {
                let bytes = dims
                    .iter()
                    .try_fold(t.dtype.size().max(1), |acc, d| acc.checked_mul(*d))
                    .filter(|b| *b <= isize::MAX as usize);
                if bytes.is_none() {
                    return Err(fail(format!(
                        "type {t} is too large: its size overflows the address space"
                    )));
                }
            }
        }
        let id = NodeId(self.nodes.len() as u32);
        let results = types
            .into_iter()
            .enumerate()
            .map(|(i, ty)| {
                self.values.push(ValueInfo {
                    node: id,
                    index: i as u32,
                    ty,
                });
                ValueId(self.values.len() as u32 - 1)
            })
            .collect();
        self.names.insert(name.clone());
        self.nodes.push(Node {
            op: new.op,
            inputs: new.inputs,
            results,
            name,
            site: new.site,
            effect,
        });
        Ok(id)
    }

    /// Adds a pure single-result node with an inferred type.
    pub fn add(&mut self, op: Op, inputs: &[ValueId], site: Site) -> Result<ValueId> {
        let id = self.add_node(NewNode::new(op, inputs.to_vec(), site))?;
        Ok(self.nodes[id.index()].results[0])
    }

    /// Adds parameter number `index` of type `ty`.
    pub fn add_parameter(
        &mut self,
        index: usize,
        ty: TensorType,
        name: Option<String>,
        site: Site,
    ) -> Result<ValueId> {
        let id = self.add_node(NewNode {
            op: Op::Parameter { index },
            inputs: vec![],
            name,
            site,
            effect: Effect::Pure,
            result_types: Some(vec![ty]),
        })?;
        Ok(self.nodes[id.index()].results[0])
    }

    /// Appends a named result.
    pub fn add_output(&mut self, value: ValueId, name: impl Into<String>) -> Result<()> {
        let name = name.into();
        if value.index() >= self.values.len() {
            return Err(Error::invalid(format!(
                "output '{name}' refers to a value {value} that does not exist"
            )));
        }
        if self.outputs.iter().any(|o| o.name == name) {
            return Err(Error::invalid(format!("two outputs are named '{name}'")));
        }
        self.outputs.push(Output { value, name });
        Ok(())
    }

    /// Binds the callable of callback target `name`, here and in every
    /// region (loop body, branch) that calls it.
    pub fn bind(&mut self, name: impl Into<String>, callable: CallbackRef) {
        let name = name.into();
        for node in &mut self.nodes {
            for region in node.op.regions_mut() {
                if region.graph().calls(&name) {
                    region.graph_mut().bind(name.clone(), callable.clone());
                }
            }
        }
        self.bindings.insert(name, callable);
    }

    /// Adds `other`'s callback bindings to this graph's (what copying
    /// `other`'s nodes in needs).
    pub(crate) fn bindings_from(&mut self, other: &Graph) {
        for (k, v) in &other.bindings {
            self.bindings.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// True when a callback node here or in a region calls target `name`.
    pub fn calls(&self, name: &str) -> bool {
        self.nodes.iter().any(|n| {
            if let Op::Callback(c) = &n.op {
                c.target == name
            } else {
                // Any other op calls `name` only through its regions.
                n.op.regions().iter().any(|r| r.graph().calls(name))
            }
        })
    }

    /// The regions of this graph's nodes (not of regions nested in them),
    /// for changing. A region's parameter and output types must stay as
    /// they are.
    pub fn regions_mut(&mut self) -> impl Iterator<Item = &mut crate::Region> {
        self.nodes.iter_mut().flat_map(|n| n.op.regions_mut())
    }

    /// The body of every `while` in this graph (not in its regions).
    pub fn while_bodies_mut(&mut self) -> impl Iterator<Item = &mut crate::Region> {
        self.nodes.iter_mut().filter_map(|n| {
            let Op::While { body, .. } = &mut n.op else {
                return None;
            };
            Some(body)
        })
    }

    /// Every graph in this one, itself first, then each region's (depth
    /// first, in node order).
    pub fn all_graphs(&self) -> Vec<&Graph> {
        let mut out = vec![self];
        for n in &self.nodes {
            for r in n.op.regions() {
                out.extend(r.graph().all_graphs());
            }
        }
        out
    }

    /// The callable bound to callback target `name`.
    pub fn binding(&self, name: &str) -> Option<&CallbackRef> {
        self.bindings.get(name)
    }

    /// Every binding.
    pub fn bindings(&self) -> &HashMap<String, CallbackRef> {
        &self.bindings
    }

    /// Declares the shape of a callback result that has no users yet (what
    /// `set_shape` does right after the callback is created).
    pub fn refine_callback_shape(&mut self, v: ValueId, shape: crate::Shape) -> Result<()> {
        let info = &self.values[v.index()];
        let node = &self.nodes[info.node.index()];
        let custom = if let Op::CustomVjp { body, vjp, .. } = &node.op {
            let k = node.results.iter().position(|r| *r == v).unwrap_or(0);
            Some((k, node.inputs.len(), body.graph().outputs()[k].value, {
                // The gradient region reads this result (parameter
                // operands + k) and its cotangent: only callbacks may read
                // them, whose declared results do not depend on their
                // operands' shapes.
                let g = vjp.graph();
                let params = g.params();
                let ys = node.results.len();
                let ct = (node.results.iter().take(k))
                    .filter(|r| crate::autodiff::is_differentiable(self.ty(**r).dtype))
                    .count();
                let has_ct = crate::autodiff::is_differentiable(self.ty(v).dtype);
                let mine = [
                    params.get(node.inputs.len() + k),
                    params.get(node.inputs.len() + ys + ct).filter(|_| has_ct),
                ];
                mine.iter().flatten().all(|p| {
                    g.nodes()
                        .iter()
                        .filter(|n| n.inputs.contains(p))
                        .all(|n| matches!(n.op, Op::Callback(_)))
                })
            }))
        } else {
            None
        };
        let through_custom = matches!(custom, Some((_, _, _, true)));
        if !matches!(node.op, Op::Callback(_)) && !through_custom {
            return Err(Error::invalid(
                "set_shape applies to callback results only (and to a custom gradient's result that is one); other values have inferred shapes",
            ));
        }
        if !info.ty.shape.compatible(&shape)
            || (info.ty.shape.rank().is_some() && info.ty.shape.rank() != shape.rank())
        {
            return Err(Error::invalid(format!(
                "shape {shape} contradicts the declared {}",
                info.ty.shape
            )));
        }
        if self.nodes.iter().any(|n| n.inputs.contains(&v)) {
            return Err(Error::invalid(
                "set_shape must be called before the value is used",
            ));
        }
        if let Some((k, operands, inner, true)) = custom {
            let node_id = self.values[v.index()].node;
            let ys = self.nodes[node_id.index()].results.len();
            let ct = (self.nodes[node_id.index()].results.iter().take(k))
                .filter(|r| crate::autodiff::is_differentiable(self.ty(**r).dtype))
                .count();
            let op = &mut self.nodes[node_id.index()].op;
            if let Op::CustomVjp { body, vjp, .. } = op {
                body.graph_mut()
                    .refine_callback_shape(inner, shape.clone())?;
                let g = vjp.graph_mut();
                let params = g.params();
                let has_ct = crate::autodiff::is_differentiable(self.values[v.index()].ty.dtype);
                for p in [
                    params.get(operands + k),
                    params.get(operands + ys + ct).filter(|_| has_ct),
                ]
                .into_iter()
                .flatten()
                {
                    g.values[p.index()].ty.shape = shape.clone();
                }
            }
        }
        self.values[v.index()].ty.shape = shape;
        Ok(())
    }

    /// Replaces every use of `from` (operands and outputs) with `to`.
    pub fn replace_all_uses(&mut self, from: ValueId, to: ValueId) {
        for n in &mut self.nodes {
            for i in &mut n.inputs {
                if *i == from {
                    *i = to;
                }
            }
        }
        for o in &mut self.outputs {
            if o.value == from {
                o.value = to;
            }
        }
    }

    /// Replaces node `id`'s op (same results, no operands) — used by constant
    /// folding to turn a node into a `constant` in place.
    pub fn replace_with_constant(&mut self, id: NodeId, lit: crate::Literal) -> Result<()> {
        let node = &self.nodes[id.index()];
        if node.results.len() != 1 || self.values[node.results[0].index()].ty != lit.ty() {
            return Err(Error::internal(format!(
                "constant {} does not fit node '{}'",
                lit.ty(),
                node.name
            )));
        }
        let node = &mut self.nodes[id.index()];
        node.op = Op::Constant(lit);
        node.inputs.clear();
        node.effect = Effect::Pure;
        Ok(())
    }

    /// Keeps the nodes with `keep[i] == true` and renumbers nodes and values.
    /// The caller guarantees no kept node or output uses a removed value.
    pub fn retain_nodes(&mut self, keep: &[bool]) {
        let mut value_map = vec![ValueId(u32::MAX); self.values.len()];
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut values = Vec::with_capacity(self.values.len());
        for (old, mut node) in std::mem::take(&mut self.nodes).into_iter().enumerate() {
            if !keep[old] {
                self.names.remove(&node.name);
                continue;
            }
            let id = NodeId(nodes.len() as u32);
            for r in &mut node.results {
                let mut info = self.values[r.index()].clone();
                info.node = id;
                values.push(info);
                let new = ValueId(values.len() as u32 - 1);
                value_map[r.index()] = new;
                *r = new;
            }
            for i in &mut node.inputs {
                *i = value_map[i.index()];
            }
            nodes.push(node);
        }
        for o in &mut self.outputs {
            o.value = value_map[o.value.index()];
        }
        self.nodes = nodes;
        self.values = values;
        let targets: HashSet<&str> = self
            .nodes
            .iter()
            .filter_map(|n| {
                if let Op::Callback(c) = &n.op {
                    Some(c.target.as_str())
                } else {
                    None
                }
            })
            .collect();
        self.bindings.retain(|k, _| targets.contains(k.as_str()));
    }

    /// Number of uses of every value (operands and outputs).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.values.len()];
        for n in &self.nodes {
            for i in &n.inputs {
                counts[i.index()] += 1;
            }
        }
        for o in &self.outputs {
            counts[o.value.index()] += 1;
        }
        counts
    }
}

pub(crate) fn types_str(ts: &[TensorType]) -> String {
    let parts: Vec<String> = ts.iter().map(|t| t.to_string()).collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("({})", parts.join(", "))
    }
}

/// What [`Graph::rewrite`] does with one node: `None` to copy it (result
/// types re-inferred from its new operands), or the values that replace its
/// results, added to the new graph by the hook.
pub type Rewritten = Option<Vec<ValueId>>;

impl Graph {
    /// The same program rebuilt node by node into a new graph, every result
    /// type re-inferred from the new operands (parameters and callbacks keep
    /// their declared types; a [`crate::DynamicOp`] whose operands now have
    /// known ranks becomes ordinary ops). `hook` sees each node with its operands in the
    /// new graph and may replace it by adding other nodes; what it returns
    /// replaces the node's results. Bindings, names and outputs are kept.
    pub fn rewrite(
        &self,
        mut hook: impl FnMut(&mut Graph, &Node, &[ValueId]) -> Result<Rewritten>,
    ) -> Result<Graph> {
        let mut g = Graph::new(self.name.clone());
        g.bindings = self.bindings.clone();
        let mut map: Vec<Option<ValueId>> = vec![None; self.values.len()];
        for node in &self.nodes {
            let inputs = node
                .inputs
                .iter()
                .map(|v| map[v.index()].ok_or_else(|| Error::internal("operand not rewritten")))
                .collect::<Result<Vec<_>>>()?;
            let results = match hook(&mut g, node, &inputs)? {
                Some(values) => {
                    if values.len() != node.results.len() {
                        return Err(Error::internal(format!(
                            "node '{}' was rewritten into {} value(s), not {}",
                            node.name,
                            values.len(),
                            node.results.len()
                        )));
                    }
                    values
                }
                None if let Op::Dynamic(d) = &node.op => {
                    vec![crate::builder::expand(&mut g, d, &inputs, &node.site)?]
                }
                None => {
                    let declared = node.op.has_declared_types().then(|| {
                        node.results
                            .iter()
                            .map(|r| self.values[r.index()].ty.clone())
                            .collect()
                    });
                    let ins: Vec<TensorType> = inputs.iter().map(|v| g.ty(*v).clone()).collect();
                    // (A dynamic op expanded earlier may have taken the
                    // name: its ops are named after their kind, `div`.)
                    let name = match g.has_name(&node.name) {
                        true => g.fresh_name(&node.name),
                        false => node.name.clone(),
                    };
                    let id = g.add_node(NewNode {
                        op: node.op.with_operand_types(&ins)?,
                        inputs,
                        name: Some(name),
                        site: node.site.clone(),
                        effect: node.effect,
                        result_types: declared,
                    })?;
                    g.nodes[id.index()].results.clone()
                }
            };
            for (old, new) in node.results.iter().zip(results) {
                map[old.index()] = Some(new);
            }
        }
        for o in &self.outputs {
            let v = map[o.value.index()].ok_or_else(|| Error::internal("output not rewritten"))?;
            g.add_output(v, o.name.clone())?;
        }
        Ok(g)
    }

    /// A new graph named `name` holding a part of this one: `params[i]`
    /// becomes its parameter `i` (same type, named and sited after the
    /// value's producer), then every node `keep` selects is copied in
    /// program order, reading the copies of its operands, and `outputs`
    /// (values of this graph) become its results. Bindings are kept. A
    /// selected node reading a value that is neither a parameter nor
    /// selected is an internal error. How a program is cut in two at a
    /// callback (the Rust API's staged functions).
    pub fn extract(
        &self,
        name: impl Into<String>,
        params: &[ValueId],
        keep: impl Fn(NodeId, &Node) -> bool,
        outputs: &[(ValueId, String)],
    ) -> Result<Graph> {
        let mut g = Graph::new(name);
        g.bindings = self.bindings.clone();
        let mut map: Vec<Option<ValueId>> = vec![None; self.values.len()];
        for (i, v) in params.iter().enumerate() {
            let producer = &self.nodes[self.values[v.index()].node.index()];
            let p = g.add_parameter(
                i,
                self.values[v.index()].ty.clone(),
                Some(format!("{}.in{i}", producer.name)),
                producer.site.clone(),
            )?;
            map[v.index()] = Some(p);
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if !keep(NodeId(i as u32), node) {
                continue;
            }
            let inputs = (node.inputs.iter())
                .map(|v| {
                    map[v.index()].ok_or_else(|| {
                        Error::internal(format!(
                            "extracting '{}': an operand of '{}' is not in the part",
                            self.name, node.name
                        ))
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let declared = node.op.has_declared_types().then(|| {
                (node.results.iter())
                    .map(|r| self.values[r.index()].ty.clone())
                    .collect()
            });
            let id = g.add_node(NewNode {
                op: node.op.clone(),
                inputs,
                name: Some(node.name.clone()),
                site: node.site.clone(),
                effect: node.effect,
                result_types: declared,
            })?;
            for (old, new) in node.results.iter().zip(g.nodes[id.index()].results.clone()) {
                map[old.index()] = Some(new);
            }
        }
        for (v, name) in outputs {
            let nv = map[v.index()]
                .ok_or_else(|| Error::internal(format!("output '{name}' is not in the part")))?;
            g.add_output(nv, name.clone())?;
        }
        Ok(g)
    }

    /// The same program with parameters of `types` (which must fit the
    /// declared parameter types), every other type re-inferred: how a graph
    /// traced with unknown dims is specialized to concrete input shapes.
    pub fn specialize(&self, types: &[TensorType]) -> Result<Graph> {
        let params = self.params();
        if params.len() != types.len() {
            return Err(Error::invalid(format!(
                "graph '{}' takes {} input(s), but {} were given",
                self.name,
                params.len(),
                types.len()
            )));
        }
        // Already of those types: nothing to re-infer.
        if params.iter().zip(types).all(|(p, t)| self.ty(*p) == t) {
            return Ok(self.clone());
        }
        self.rewrite(|g, node, _| {
            let Op::Parameter { index } = node.op else {
                return Ok(None);
            };
            let want = &self.values[node.results[0].index()].ty;
            let t = types
                .get(index)
                .ok_or_else(|| Error::invalid(format!("no type was given for input {index}")))?;
            let fits = want.dtype == t.dtype
                && want.shape.compatible(&t.shape)
                && (want.shape.rank().is_none() || want.shape.rank() == t.shape.rank());
            if !fits {
                return Err(Error::invalid(format!(
                    "input {index} must be {want}, got {t}"
                )));
            }
            let v =
                g.add_parameter(index, t.clone(), Some(node.name.clone()), node.site.clone())?;
            Ok(Some(vec![v]))
        })
    }
}

"""torch.export.ExportedProgram -> graphport.ExportedProgram.

The reverse of to_torch: the graph and its metadata carry over, torch's FakeTensors and
SymInts become graphport's meta tensors and SymInts over a graphport shape environment, and
a ShapeContract is built from what torch knows about the input sizes (the symbols in the
placeholders' shapes and the program's range constraints). A program that came from
to_torch carries graphport's own contract (names, refusal reasons) and gets it back.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.export as texport
import torch.export.graph_signature as tsig
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import signature as gsig
from ..capture.inputs import input_paths
from ..errors import UnsupportedFeatureError
from ..program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from ..shapes.contract import ComputedValue, InputDimension, Relation, ShapeContract, SymbolFact, size_symbol
from ..shapes.env import ShapeEnv, SymbolInfo
from ..shapes.expr import ValueRange
from ..shapes.node import SymNode
from .symbols import SymbolMap, range_from_torch
from .to_torch import CONTRACT_META_KEY, KEYWORDS_META_KEY
from ..graph_code import keyword_safe


def from_torch(tep: texport.ExportedProgram) -> ExportedProgram:
    """The same program as a graphport.ExportedProgram, checked by graphport's verifier: saves
    without pickle and runs with graphport's input checks."""
    sig = _signature(tep.graph_signature)
    user_inputs = [s.arg.name for s in sig.input_specs if s.kind is gsig.InputKind.USER_INPUT]
    placeholders = {n.name: n for n in tep.graph.nodes if n.op == "placeholder"}
    symbols = SymbolMap()
    call_graph = [_call_entry(e) for e in tep.module_call_graph]
    if tep.graph_module.meta.get(KEYWORDS_META_KEY) is True and call_graph[0].signature is not None:
        call_graph[0].signature.keywords_by_name = True
    paths = _input_paths(call_graph[0].signature, len(user_inputs)) or user_inputs
    contract = _contract(tep, [placeholders[name].meta.get("val") for name in user_inputs], paths, symbols)
    env = ShapeEnv()
    if contract is not None:
        _declare(env, contract, tep)
    graph_module = _convert_module(tep.graph_module, _Values(env, symbols))
    _functionalize_fresh_in_place(graph_module)
    return ExportedProgram(
        graph_module=graph_module, graph_signature=sig, state_dict=dict(tep.state_dict),
        module_call_graph=call_graph, example_inputs=tep.example_inputs, constants=dict(tep.constants),
        input_paths=paths, shape_contract=contract, shape_env=env if contract is not None else None)


# -- the shape contract ---------------------------------------------------------------------------

def _contract(tep: texport.ExportedProgram, user_vals: list, paths: list[str],
              symbols: SymbolMap) -> ShapeContract | None:
    dims = []
    for i, val in enumerate(user_vals):
        if isinstance(val, torch.Tensor):
            dims += [(i, d, symbols.from_torch(s.node.expr)) for d, s in enumerate(val.shape)
                     if isinstance(s, torch.SymInt)]
    computed = _computed_symbols(tep.graph_module)
    if not dims and not computed:
        return None
    carried = tep.graph_module.meta.get(CONTRACT_META_KEY)
    if carried is not None:
        contract = ShapeContract.from_json(carried)
        if contract.dims == dims and {f.source.node for f in contract.symbols.values()
                                      if isinstance(f.source, ComputedValue)} <= set(computed.values()):
            return contract
    ranges = {symbols.from_torch(k): range_from_torch(v) for k, v in tep.range_constraints.items()
              if isinstance(k, sympy.Symbol)}
    shape_env = _torch_shape_env(user_vals)
    facts: dict[sympy.Symbol, SymbolFact] = {}
    for i, d, expr in sorted(dims, key=lambda t: not t[2].is_Symbol):   # a symbol's own dimension first
        for sym in sorted(expr.free_symbols, key=lambda s: s.name):
            if sym in facts:
                continue
            source = _solve(expr, sym, i, d)
            # torch keeps no Dim names: the symbol is named by the input dimension it is read from
            facts[sym] = SymbolFact(sym, f"{paths[i]}.size({d})", ranges.get(sym) or _torch_range(shape_env, sym),
                                    source)
    for theirs, node in computed.items():
        sym = size_symbol(theirs.name)
        facts[sym] = SymbolFact(sym, sym.name, ranges.get(sym) or _torch_range(shape_env, sym), ComputedValue(node))
    return ShapeContract(facts, dims, _relations(shape_env, facts, symbols))


def _relations(shape_env, facts: dict, symbols: SymbolMap) -> list[Relation]:
    """torch's guards on the input sizes (divisibility, equalities, ...): its module() checks
    them on every call, so graphport's does too."""
    if shape_env is None:
        return []
    names = {sym.name for sym in facts}
    out = []
    for guard in shape_env.guards:
        free = guard.expr.free_symbols
        if free and {s.name for s in free} <= names:
            rel = symbols.from_torch(guard.expr)
            if rel is not sympy.true:
                out.append(Relation(rel))
    return out


def _solve(expr: sympy.Expr, sym: sympy.Symbol, index: int, dim: int) -> InputDimension:
    """Where `sym` is read from: a dimension that is `coeff * sym + offset`."""
    poly = sympy.Poly(expr, sym) if expr.is_polynomial(sym) else None
    if poly is None or poly.degree() != 1 or len(expr.free_symbols) != 1:
        raise UnsupportedFeatureError(
            f"input {index} has size {expr} at dimension {dim}: graphport reads each size symbol from one "
            f"dimension of the form a*{sym} + b", fix="export the program with that dimension static or as its own Dim")
    coeff, offset = (int(c) for c in poly.all_coeffs())
    return InputDimension(index, dim, coeff, offset)


def _computed_symbols(gm: fx.GraphModule) -> dict[sympy.Symbol, str]:
    """Data-dependent symbols -> the node that computes each (torch's meta["unbacked_bindings"])."""
    out = {}
    for module in gm.modules():
        if isinstance(module, fx.GraphModule):
            for node in module.graph.nodes:
                for sym in (node.meta.get("unbacked_bindings") or {}):
                    out[sym] = node.name
    return out


def _torch_shape_env(user_vals: list):
    for val in user_vals:
        for s in (val.shape if isinstance(val, torch.Tensor) else []):
            if isinstance(s, torch.SymInt):
                return s.node.shape_env
    return None


def _torch_range(shape_env, sym: sympy.Symbol) -> ValueRange:
    theirs = {s.name: r for s, r in (shape_env.var_to_range.items() if shape_env is not None else [])}
    return range_from_torch(theirs[sym.name]) if sym.name in theirs else ValueRange(0, sympy.oo)


def _declare(env: ShapeEnv, contract: ShapeContract, tep: texport.ExportedProgram) -> None:
    """graphport's shape environment for the converted values: each input symbol with a hint
    (its size in the example inputs, else a size in its range)."""
    flat = tree_flatten(tep.example_inputs)[0] if tep.example_inputs is not None else None
    for sym, fact in contract.symbols.items():
        if not isinstance(fact.source, InputDimension):
            continue
        src = fact.source
        hint = None
        if flat is not None and src.index < len(flat) and isinstance(flat[src.index], torch.Tensor):
            hint = (int(flat[src.index].shape[src.dim]) - src.offset) // src.coeff
        if hint is None or not fact.range.contains(hint):
            hint = int(min(max(fact.range.lower, 2), fact.range.upper))
        env.add_symbol(SymbolInfo(sym, hint, fact.range, fact.name, (src.index, src.dim),
                                  source_affine=(src.coeff, src.offset)))


# -- values ---------------------------------------------------------------------------------------

class _Values:
    """Rebuilds torch's FakeTensors and SymInts as graphport's meta tensors and SymInts."""

    def __init__(self, env: ShapeEnv, symbols: SymbolMap):
        self.env, self.symbols = env, symbols
        self._syms: dict = {}

    def convert(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            sizes = [self._sym(s) for s in value.shape]
            strides = [self._sym(s) for s in value.stride()]
            return torch.empty_strided(sizes, strides, dtype=value.dtype, device="meta")
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self._sym(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.convert(v) for v in value)
        if isinstance(value, tsig.CustomObjArgument):
            return gsig.CustomObjArgument(value.name, value.class_fqn)
        return value

    def _sym(self, value):
        if not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return value
        key = (type(value), value.node.expr)
        if key not in self._syms:
            expr = self.symbols.from_torch(value.node.expr)
            pytype = int if isinstance(value, torch.SymInt) else float if isinstance(value, torch.SymFloat) else bool
            constant = expr.is_Number or expr in (sympy.true, sympy.false)
            self._syms[key] = pytype(expr) if constant else type(value)(SymNode(expr, self.env, pytype))
        return self._syms[key]


def _convert_module(gm: fx.GraphModule, values: _Values) -> fx.GraphModule:
    """A copy of `gm` and of every GraphModule it reaches by get_attr, with graphport values
    and the metadata keys graphport's IR requires on every call."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    root = torch.nn.Module()
    for node in gm.graph.nodes:
        new = graph.node_copy(node, lambda n: env[n])
        if new.name != node.name and node.op == "placeholder":
            new.name = node.name   # fx avoids builtins (`input` -> `input_1`); programs keep the argument's name
        env[node] = new
        new.meta.pop("unbacked_bindings", None)
        if "val" in node.meta:
            new.meta["val"] = values.convert(node.meta["val"])
        if node.op == "call_function":
            new.meta.setdefault("stack_trace", None)
            new.meta.setdefault("nn_module_stack", {})
        if node.op == "get_attr":
            attr = getattr(gm, node.target)
            root.register_module(node.target, _convert_module(attr, values)
                                 if isinstance(attr, fx.GraphModule) else attr)
    return fx.GraphModule(root, keyword_safe(graph), class_name="GraphModule")


def _functionalize_fresh_in_place(gm: fx.GraphModule) -> None:
    """torch.export leaves in-place ops on tensors made in the graph (`detach_` after
    `lift_fresh_copy` of a constant). When nothing reads the mutated tensor afterwards, the
    functional variant computes the same values; graphport's IR requires it."""
    for module in gm.modules():
        if not isinstance(module, fx.GraphModule):
            continue
        order = {n: i for i, n in enumerate(module.graph.nodes)}
        for node in list(module.graph.nodes):
            target = node.target
            if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) \
                    or not target._schema.is_mutable:
                continue
            name = target._schema.name.split("::")[-1]
            functional = getattr(getattr(torch.ops.aten, name.rstrip("_"), None), target._overloadname, None)
            mutated = node.args[0] if node.args else None
            later = [u for u in getattr(mutated, "users", []) if order[u] > order[node]]
            if not name.endswith("_") or functional is None or not isinstance(mutated, fx.Node) \
                    or mutated.op == "placeholder" or later:
                raise UnsupportedFeatureError(
                    f"node {node.name} ({target}) mutates {getattr(mutated, 'name', mutated)} in place, which a "
                    "graphport program cannot state", fix="export the program with graphport.export instead")
            node.target = functional
        module.recompile()


# -- signature and call graph ---------------------------------------------------------------------

def _argument(arg) -> gsig.ArgumentSpec:
    if isinstance(arg, tsig.ConstantArgument):
        return gsig.ConstantArgument(arg.name, arg.value)
    if isinstance(arg, tsig.CustomObjArgument):
        return gsig.CustomObjArgument(arg.name, arg.class_fqn)
    if isinstance(arg, tsig.TokenArgument):
        return gsig.TokenArgument(arg.name)
    kind = getattr(gsig, type(arg).__name__, None)
    if kind is None:
        raise UnsupportedFeatureError(f"the program has a {type(arg).__name__} ({arg.name}), which graphport "
                                      "programs do not have", fix="export the program without it")
    return kind(arg.name)


# torch's joint forward-backward programs: converted from their forward program instead
_JOINT_OUTPUT_KINDS = frozenset({"LOSS_OUTPUT", "GRADIENT_TO_PARAMETER", "GRADIENT_TO_USER_INPUT"})


def _kind(enum_type, kind, what: str):
    if kind.name in _JOINT_OUTPUT_KINDS:
        raise UnsupportedFeatureError(
            f"the program has a {what} of kind {kind.name}: it is a joint forward-backward program",
            fix="convert the forward program (before _export_forward_backward), then make the joint program with "
                "graphport.experimental._export_forward_backward")
    if kind.name not in enum_type.__members__:
        raise UnsupportedFeatureError(f"the program has a {what} of kind {kind.name}, which graphport programs "
                                      "do not have", fix="export the program for inference, without it")
    return enum_type[kind.name]


def _signature(sig: tsig.ExportGraphSignature) -> gsig.ExportGraphSignature:
    return gsig.ExportGraphSignature(
        [gsig.InputSpec(_kind(gsig.InputKind, s.kind, "input"), _argument(s.arg), s.target, s.persistent)
         for s in sig.input_specs],
        [gsig.OutputSpec(_kind(gsig.OutputKind, s.kind, "output"), _argument(s.arg), s.target)
         for s in sig.output_specs])


def _call_entry(entry) -> ModuleCallEntry:
    sig = entry.signature
    if sig is None:
        return ModuleCallEntry(entry.fqn)
    return ModuleCallEntry(entry.fqn, ModuleCallSignature(
        [_argument(a) for a in sig.inputs], [_argument(a) for a in sig.outputs], sig.in_spec, sig.out_spec,
        _positional_names(sig)))


def _positional_names(sig) -> list[str] | None:
    """graphport names the positional arguments only; torch adds the keyword arguments' names."""
    if sig.forward_arg_names is None or sig.in_spec is None:
        return sig.forward_arg_names
    args, _ = tree_unflatten([None] * sig.in_spec.num_leaves, sig.in_spec)
    return list(sig.forward_arg_names[:len(args)])


def _input_paths(sig: ModuleCallSignature | None, count: int) -> list[str]:
    """Printable path of every flat user input (`kwargs['input_ids']`), from the input spec."""
    if sig is None or sig.in_spec is None or sig.in_spec.num_leaves != count or sig.forward_arg_names is None:
        return []
    args, kwargs = tree_unflatten([object()] * count, sig.in_spec)
    return input_paths(args, kwargs, list(sig.forward_arg_names))

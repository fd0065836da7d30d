"""graphport.ExportedProgram -> torch.export.ExportedProgram.

The graph, signature, state, constants and call graph carry over as they are (graphport's IR
is torch.export's IR). What differs is the values in `meta["val"]`: ours are meta tensors and
SymInts over graphport's shape environment, torch's passes want FakeTensors and SymInts over
*its* ShapeEnv. So we build one torch ShapeEnv whose symbols are ours (same names, ranges
narrowed to the sizes the capture holds for, example values as hints), rebuild every value on
it, and leave everything else to torch's own constructor and verifier.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import sympy
import torch
import torch.export as texport
import torch.export.exported_program as tprogram
import torch.export.graph_signature as tsig
import torch.fx as fx
from torch._dynamo.source import TensorProperty, TensorPropertySource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import CallMethodKey, ShapeEnv, ValueRangesSLoc, free_unbacked_symbols
from torch.utils._pytree import SequenceKey, keystr, tree_flatten, tree_map, tree_unflatten
from torch.utils._sympy.functions import FloorDiv, PythonMod
from torch._export.verifier import TrainingIRVerifier, Verifier
from torch._guards import GuardSource, ShapeGuard, Source
from torch._library.fake_class_registry import maybe_to_fake_obj

from .. import signature as gsig
from ..errors import UnsupportedFeatureError
from ..program import ExportedProgram, ModuleCallEntry
from ..pytree import flatten_with_paths
from ..shapes.contract import ComputedValue, InputDimension, ShapeContract, SymbolFact
from ..shapes.expr import INF, ValueRange
from ..shapes.symbols import name_number
from .symbols import SymbolMap, range_to_torch, torch_size_symbol
from .training_ir import drop_unserializable_meta, to_training_ir
from ..graph_code import keyword_safe, keyword_safe_module

CONTRACT_META_KEY = "graphport_shape_contract"   # graph_module.meta: our contract, for from_torch
KEYWORDS_META_KEY = "graphport_keywords_by_name"  # graph_module.meta: keyword arguments may come in any order
_VERIFIERS = {"TRAINING": TrainingIRVerifier, "ATEN": Verifier}


def to_torch(ep: ExportedProgram, dialect: str = "TRAINING") -> texport.ExportedProgram:
    """The same program as a torch.export.ExportedProgram, for torch's passes and backends
    (run_decompositions, module(), unflatten, torch.export.save, torch.onnx.export,
    AOTInductor, ExecuTorch, OpenVINO, torchao's quantizers, ...).

    `dialect="TRAINING"` (the default) gives what torch.export 2.13's default export gives:
    its training IR, with the operators it keeps there (`batch_norm`, `flatten`; see
    training_ir.py), so consumers that match operator patterns see the same program as from
    torch.export. `dialect="ATEN"` keeps graphport's functional operators as they are (the
    verifier then checks the program is functional).

    Each dynamic dimension keeps its symbol and gets the range the program is valid for
    (graphport's range, raised to the smallest size the capture holds for). What torch's
    range constraints cannot state (derived dimensions, divisibility, relations between
    sizes) becomes the program's guards, which torch's `module()` checks on every call, as
    it does for the guards of its own exports."""
    contract = ep.shape_contract
    shape_env = ShapeEnv(tracked_fakes=[], allow_dynamic_output_shape_ops=True)
    fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True, export=True)
    symbols = SymbolMap()
    paths = _input_paths(ep) if contract is not None else []
    if contract is not None:
        _declare_symbols(ep, contract, shape_env, symbols, paths)
    values = _Values(shape_env, fake_mode, symbols, _program_device(ep))
    if dialect not in _VERIFIERS:
        raise ValueError(f"dialect must be one of {sorted(_VERIFIERS)}, not {dialect!r}")
    root, graph = _convert_graph(ep.graph_module, values, _root_module_entry(ep.graph_module))
    for g in [graph] + [m.graph for m in root.modules() if isinstance(m, fx.GraphModule)]:
        drop_unserializable_meta(g)
        if dialect == "TRAINING":
            to_training_ir(g)
    _fake_objects(ep, graph, fake_mode)
    if contract is not None:
        _bind_computed_symbols(graph, root, contract, symbols)
        _add_input_guards(shape_env, contract, symbols, paths)
    tep = texport.ExportedProgram(
        root=root, graph=graph, graph_signature=_signature(ep.graph_signature),
        state_dict=_own_storage(ep.state_dict), range_constraints=_range_constraints(ep, contract, symbols),
        module_call_graph=[_call_entry(e) for e in ep.module_call_graph],
        example_inputs=tree_map(_own_storage_one, ep.example_inputs), constants=_own_storage(ep.constants), verifiers=[_VERIFIERS[dialect]])
    keyword_safe_module(tep.graph_module)   # torch rebuilt it with fx's code, which a keyword-named op breaks
    if contract is not None:
        tep.graph_module.meta[CONTRACT_META_KEY] = contract.to_json()
    if ep.call_spec.keywords_by_name:
        tep.graph_module.meta[KEYWORDS_META_KEY] = True
    return tep


def _own_storage(tensors: dict) -> dict:
    """Each tensor on a storage of its own. A program loaded by gp.load holds its weights and
    example inputs as slices of one memory-mapped file; torch.export.save writes a tensor's
    whole storage and its loader reads that back as the tensor's dtype, which fails for a
    slice of a byte buffer. Other tensors are passed as they are, uncopied."""
    return {name: _own_storage_one(value) for name, value in tensors.items()}


def _own_storage_one(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.device.type != "meta" and (
            value.storage_offset() != 0 or value.untyped_storage().nbytes() != value.nbytes):
        copy = value.detach().clone()
        return torch.nn.Parameter(copy, value.requires_grad) if isinstance(value, torch.nn.Parameter) else copy
    return value


# -- symbols --------------------------------------------------------------------------------------

def valid_range(fact: SymbolFact) -> ValueRange:
    """The sizes the program computes the right answer for: graphport refuses the others at
    call time with a reason; torch's module() refuses what is outside the range."""
    if fact.valid_from is None or fact.valid_from <= fact.range.lower:
        return fact.range
    return ValueRange(fact.valid_from, fact.range.upper)


def _declare_symbols(ep: ExportedProgram, contract: ShapeContract, shape_env: ShapeEnv, symbols: SymbolMap,
                     paths: list[str]) -> None:
    """Enter each contract symbol in torch's ShapeEnv under its own name. ShapeEnv.create_symbol
    would name it after a hash of its source; torch reads the tables filled here (value, range,
    source) and nothing else about an input symbol."""
    flat_examples = tree_flatten(ep.example_inputs)[0] if ep.example_inputs is not None else None
    computed = []
    for sym, fact in contract.symbols.items():
        if isinstance(fact.source, ComputedValue):
            computed.append(fact)
            continue
        src = fact.source
        source = (_InputSource(paths[src.index]) if src.dim is None   # a dynamic int: the input itself
                  else TensorPropertySource(_InputSource(paths[src.index]), TensorProperty.SIZE, src.dim))
        theirs = torch_size_symbol(sym.name)
        shape_env.add_backed_var_to_val(theirs, _hint(fact, src, flat_examples))
        shape_env.var_to_range[theirs] = range_to_torch(valid_range(fact))
        shape_env.var_to_range_sloc[theirs] = ValueRangesSLoc(shape_env._get_sloc(), shape_env._get_sloc())
        shape_env.var_to_sources[theirs] = [source]
        shape_env.source_to_var[source.name] = theirs
        shape_env.symbol_guard_counter[theirs] = 0
        symbols.bind(sym, theirs)
    for fact in sorted(computed, key=lambda f: name_number(f.symbol)):
        shape_env.unbacked_symint_counter = max(shape_env.unbacked_symint_counter, name_number(fact.symbol))
        theirs = shape_env.create_unbacked_symint().node.expr
        shape_env.var_to_range[theirs] = range_to_torch(fact.range)
        symbols.bind(fact.symbol, theirs)
    # bound below, by the node that computes each (meta["unbacked_bindings"])
    shape_env.pending_fresh_unbacked_symbols.clear()


def _hint(fact: SymbolFact, src: InputDimension, flat_examples: list | None) -> int:
    """The symbol's value in the example inputs; without them, a size inside its valid range."""
    if flat_examples is not None and src.index < len(flat_examples) and src.dim is None:
        return flat_examples[src.index]
    if flat_examples is not None and src.index < len(flat_examples) and isinstance(flat_examples[src.index],
                                                                                  torch.Tensor):
        value = (int(flat_examples[src.index].shape[src.dim]) - src.offset) // src.coeff
        if valid_range(fact).contains(value):
            return value
    r = valid_range(fact)
    return int(min(max(r.lower, 2), r.upper))


def _range_constraints(ep: ExportedProgram, contract: ShapeContract | None, symbols: SymbolMap) -> dict:
    if contract is None:
        return {}
    out = {}
    for key, r in ep.range_constraints.items():
        fact = contract.symbols.get(key)
        out[symbols.to_torch(key)] = range_to_torch(valid_range(fact) if fact is not None else r)
    return out


def _input_paths(ep: ExportedProgram) -> list[str]:
    """How torch's module() names each flat user input in its guards: `L['x']`, `L['kw'][0]`."""
    sig = ep.call_spec
    count = sum(s.kind is gsig.InputKind.USER_INPUT for s in ep.graph_signature.input_specs)
    # empty tensors stand for the leaves: a registered container's unflatten may run tensor
    # ops on them (transformers' DynamicCache does); flattening gives the leaves back in order
    args, kwargs = tree_unflatten([torch.empty(0) for _ in range(count)], sig.in_spec)
    bound = {**dict(zip(sig.forward_arg_names or [], args)), **kwargs}
    if len(bound) != len(args) + len(kwargs):
        raise UnsupportedFeatureError("the program's positional inputs have no names, so torch.export's module() "
                                      "cannot check their sizes", fix="export the program again with graphport.export")
    return ["L" + keystr(path) for path, _ in flatten_with_paths(bound)[0]]


@dataclasses.dataclass(frozen=True)
class _InputSource(Source):
    """A flat user input, named as torch's module() names it in guard code."""
    path: str

    @property
    def _name_template(self) -> str:
        return self.path

    @functools.cached_property
    def guard_source(self) -> GuardSource:
        return GuardSource.LOCAL


def _add_input_guards(shape_env: ShapeEnv, contract: ShapeContract, symbols: SymbolMap, paths: list[str]) -> None:
    """The contract as guards on the input sizes: each symbol's valid range and form, each
    dimension's expression, each relation. torch turns its ShapeEnv's guards into the checks
    its module() runs on every call (and keeps them through its passes); its range
    constraints alone state neither derived dimensions nor divisibility nor relations."""
    by_dim: dict[tuple[int, int], sympy.Symbol] = {}

    def size(index: int, dim: int) -> sympy.Symbol:
        if (index, dim) not in by_dim:
            sym = torch_size_symbol(f"s_input{index}_dim{dim}")
            shape_env.var_to_sources[sym] = [TensorPropertySource(_InputSource(paths[index]), TensorProperty.SIZE, dim)]
            by_dim[index, dim] = sym
        return by_dim[index, dim]

    value: dict[sympy.Symbol, sympy.Basic] = {}
    guards: list[sympy.Basic] = []
    for sym, fact in contract.symbols.items():
        if not isinstance(fact.source, InputDimension):
            continue
        src, theirs = fact.source, symbols.to_torch_symbols[sym]
        if src.dim is None:
            value[theirs] = theirs
        elif (src.coeff, src.offset) == (1, 0):
            by_dim[src.index, src.dim] = value[theirs] = theirs
        else:
            dim = size(src.index, src.dim)
            value[theirs] = FloorDiv(dim - src.offset, src.coeff)
            guards.append(sympy.Eq(PythonMod(dim - src.offset, src.coeff), 0))
        r = valid_range(fact)
        # unevaluated: torch's size symbols are positive, so sympy would drop `s >= 1` as true
        guards.append(sympy.Ge(value[theirs], int(r.lower), evaluate=False))
        if r.upper != INF:
            guards.append(sympy.Le(value[theirs], int(r.upper), evaluate=False))
    for index, dim, expr in contract.dims:
        theirs = symbols.to_torch(expr)
        if by_dim.get((index, dim)) is not theirs:
            guards.append(sympy.Eq(size(index, dim), theirs.xreplace(value)))
    guards += [symbols.to_torch(r.rel).xreplace(value) for r in contract.relations]
    shape_env.guards += [ShapeGuard(g, shape_env._get_sloc(), False) for g in guards if g is not sympy.true]


# -- values ---------------------------------------------------------------------------------------

def _program_device(ep: ExportedProgram) -> torch.device:
    """graphport's values live on the meta device; the program runs where its tensors are."""
    examples = tree_flatten(ep.example_inputs)[0] if ep.example_inputs is not None else []
    for t in [*ep.state_dict.values(), *ep.constants.values(), *examples]:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return t.device
    return torch.device("cpu")


class _Values:
    """Rebuilds graphport values (meta tensors, SymInts over our env) as torch FakeTensors and
    SymInts over one torch ShapeEnv. Conversions are cached by expression."""

    def __init__(self, shape_env: ShapeEnv, fake_mode: FakeTensorMode, symbols: SymbolMap, device: torch.device):
        self.shape_env, self.fake_mode, self.symbols, self.device = shape_env, fake_mode, symbols, device
        self._syms: dict = {}

    def convert(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self._sym(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.convert(v) for v in value)
        if isinstance(value, gsig.CustomObjArgument):
            return tsig.CustomObjArgument(name=value.name, class_fqn=value.class_fqn)   # its fake: _fake_objects
        return value

    def _sym(self, value):
        key = (type(value), value.node.expr)
        if key not in self._syms:
            expr = self.symbols.to_torch(value.node.expr)
            if isinstance(value, torch.SymBool):
                out = bool(expr) if expr in (sympy.true, sympy.false) else self.shape_env.create_symboolnode(expr)
            elif isinstance(value, torch.SymFloat):
                out = self.shape_env.create_symfloatnode(expr, hint=self._hint(expr, float))
            else:
                out = self.shape_env.create_symintnode(expr, hint=self._hint(expr, int))
            self._syms[key] = out
        return self._syms[key]

    def _hint(self, expr: sympy.Basic, kind: type):
        if free_unbacked_symbols(expr):
            return None
        value = expr.xreplace(self.shape_env.backed_var_to_val)
        return kind(value) if value.is_number else None

    def _size(self, s):
        return self._sym(s) if isinstance(s, torch.SymInt) else s

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        sizes = [self._size(s) for s in t.shape]
        strides = [self._size(s) for s in t.stride()]
        device = self.device if t.device.type == "meta" else t.device
        # a meta tensor wrapped as fake: the same FakeTensor the mode would make, without a dispatch
        meta = torch.empty_strided(sizes, strides, dtype=t.dtype, device="meta")
        out = self.fake_mode.fake_tensor_converter.from_meta_and_device(self.fake_mode, meta, device)
        return out.requires_grad_(t.requires_grad) if t.requires_grad and t.dtype.is_floating_point else out


def _root_module_entry(gm: fx.GraphModule) -> dict:
    """The root module's nn_module_stack entry, which torch writes on every call node (its
    unflatten reads it) and graphport leaves out for code run directly in the root forward."""
    for node in gm.graph.nodes:
        for key, entry in (node.meta.get("nn_module_stack") or {}).items():
            if entry[0] == "":
                return {key: entry}
    return {}


def _convert_graph(gm: fx.GraphModule, values: _Values, root_entry: dict) -> tuple[torch.nn.Module, fx.Graph]:
    """A copy of `gm`'s graph (and, recursively, of every GraphModule it reaches by get_attr:
    control-flow branches and bodies, held by the returned root) with every meta["val"] rebuilt
    on torch's side."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    root = torch.nn.Module()
    for node in gm.graph.nodes:
        new = graph.node_copy(node, lambda n: env[n])
        if new.name != node.name and node.op == "placeholder":
            new.name = node.name   # fx avoids builtins (`input` -> `input_1`); programs keep the argument's name
        env[node] = new
        if "val" in node.meta:
            new.meta["val"] = values.convert(node.meta["val"])
        if node.op == "call_function" and not new.meta.get("nn_module_stack") and root_entry:
            new.meta["nn_module_stack"] = dict(root_entry)
        if node.op == "get_attr":
            attr = getattr(gm, node.target)
            root.register_module(node.target, fx.GraphModule(*_convert_graph(attr, values, root_entry))
                                 if isinstance(attr, fx.GraphModule) else attr)
    return root, keyword_safe(graph)


def _bind_computed_symbols(graph: fx.Graph, root: torch.nn.Module, contract: ShapeContract,
                           symbols: SymbolMap) -> None:
    """torch finds where a data-dependent symbol comes from in meta["unbacked_bindings"] of the
    node computing it: a path into that node's value."""
    graphs = [graph] + [m.graph for m in root.modules() if isinstance(m, fx.GraphModule)]
    nodes = {n.name: n for g in graphs for n in g.nodes}
    for fact in contract.symbols.values():
        if not isinstance(fact.source, ComputedValue):
            continue
        theirs = symbols.to_torch_symbols[fact.symbol]
        node = nodes.get(fact.source.node)
        path = None if node is None else _path_to(node.meta.get("val"), theirs, ())
        if path is None:
            raise UnsupportedFeatureError(
                f"the data-dependent size {fact.symbol} ({fact.name}) is not found in the value of node "
                f"{fact.source.node!r} that should compute it", fix="export the program again with graphport.export")
        node.meta.setdefault("unbacked_bindings", {})[theirs] = path


def _path_to(value: Any, sym: sympy.Symbol, path: tuple) -> tuple | None:
    if isinstance(value, torch.SymInt) and value.node.expr == sym:
        return path
    if isinstance(value, torch.Tensor):
        for i, s in enumerate(value.shape):
            if isinstance(s, torch.SymInt) and s.node.expr == sym:
                return (*path, CallMethodKey("size"), SequenceKey(i))
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _path_to(v, sym, (*path, SequenceKey(i)))
            if found is not None:
                return found
    return None


def _fake_objects(ep: ExportedProgram, graph: fx.Graph, fake_mode: FakeTensorMode) -> None:
    """Each custom object's placeholder carries torch's fake of the object (made from the
    object by its registered fake class), as torch.export's placeholders do: torch's passes
    call its methods for the metadata of call_torchbind."""
    targets = ep.graph_signature.inputs_to_lifted_custom_objs
    for node in graph.nodes:
        if node.op == "placeholder" and node.name in targets:
            node.meta["val"] = tsig.CustomObjArgument(
                name=node.name, class_fqn=node.meta["val"].class_fqn,
                fake_val=maybe_to_fake_obj(fake_mode, ep.constants[targets[node.name]]))


# -- signature and call graph ---------------------------------------------------------------------

def argument_to_torch(arg: gsig.ArgumentSpec):
    if isinstance(arg, gsig.ConstantArgument):
        return tsig.ConstantArgument(name=arg.name, value=arg.value)
    if isinstance(arg, gsig.CustomObjArgument):
        return tsig.CustomObjArgument(name=arg.name, class_fqn=arg.class_fqn)
    return getattr(tsig, type(arg).__name__)(name=arg.name)


def _signature(sig: gsig.ExportGraphSignature) -> tsig.ExportGraphSignature:
    return tsig.ExportGraphSignature(
        input_specs=[tsig.InputSpec(kind=tsig.InputKind[s.kind.name], arg=argument_to_torch(s.arg), target=s.target,
                                    persistent=s.persistent) for s in sig.input_specs],
        output_specs=[tsig.OutputSpec(kind=tsig.OutputKind[s.kind.name], arg=argument_to_torch(s.arg),
                                      target=s.target) for s in sig.output_specs])


def _call_entry(entry: ModuleCallEntry) -> tprogram.ModuleCallEntry:
    sig = entry.signature
    if sig is None:
        return tprogram.ModuleCallEntry(fqn=entry.fqn)
    return tprogram.ModuleCallEntry(fqn=entry.fqn, signature=tprogram.ModuleCallSignature(
        inputs=[argument_to_torch(a) for a in sig.inputs], outputs=[argument_to_torch(a) for a in sig.outputs],
        in_spec=sig.in_spec, out_spec=sig.out_spec, forward_arg_names=_torch_arg_names(sig)))


def _torch_arg_names(sig) -> list[str] | None:
    """torch names the positional arguments and then the keyword arguments; graphport only the former."""
    if sig.forward_arg_names is None or sig.in_spec is None:
        return sig.forward_arg_names
    args, kwargs = tree_unflatten([None] * sig.in_spec.num_leaves, sig.in_spec)
    return list(sig.forward_arg_names[:len(args)]) + [k for k in kwargs if k not in sig.forward_arg_names[:len(args)]]

"""The whole ExportedProgram as one JSON document (graphport.json), and back.

Top-level keys, in the order they are written: format, version, custom_ops, shape_env,
graph, signature, state_dict, constants, range_constraints, shape_contract,
module_call_graph, input_paths, input_aliases, shape_report, example_inputs,
extra_files, dialect (only for a lowered program; api.save adds weight_checksums, last).
schema.json is the format's JSON Schema; load validates the document against it before
anything here reads it. The document is the ExportedProgram record's fields but those its
definition marks transient (verifiers are written as the dialect's name); range_constraints
is derived from shape_contract, written for older readers and not read back.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .. import _torch
from ..errors import ArtifactError, GraphportError, short as _short
from ..program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                         SymBoolArgument, SymFloatArgument, SymIntArgument, TensorArgument, TokenArgument)
from ..passes.verifier import CoreATenVerifier, TrainingIRVerifier, Verifier
from .check import assumptions_kept, check_graph
from .coherence import check_coherence
from .graph_json import graph_from_json, graph_to_json
from .state import TensorBinder, TensorTable
from .targets import custom_namespace, lookup_operator, qualified_name
from .treespec import treespec_from_json, treespec_to_json
from .values import Decoder, dtype_name, encode

if TYPE_CHECKING:   # a static program's load does not import the shape algebra (sympy): it is imported
    from ..shapes.contract import ShapeContract   # where a program has symbols
    from ..shapes.env import ShapeEnv

FORMAT = "graphport"
VERSION = (1, 3)
pytree = _torch.pytree

_ARGUMENTS = {"tensor": TensorArgument, "symint": SymIntArgument, "symfloat": SymFloatArgument,
              "symbool": SymBoolArgument, "token": TokenArgument}
_ARGUMENT_NAMES = {v: k for k, v in _ARGUMENTS.items()}
# The program's operator level (`ep.dialect`, and whether lowered to the Core ATen opset); absent: as exported.
_DIALECTS = {"TRAINING": TrainingIRVerifier, "ATEN": Verifier, "CORE_ATEN": CoreATenVerifier}
_DIALECT_NAMES = {v: k for k, v in _DIALECTS.items()}


# -- saving ---------------------------------------------------------------------------------

def program_to_json(ep: ExportedProgram, table: TensorTable, extra_names: list[str],
                    with_examples: bool = True) -> dict:
    from .symbolic import env_to_json, expr_to_json, range_to_json, symbol_table
    env = ep.shape_env
    doc: dict[str, Any] = {
        "format": FORMAT, "version": list(VERSION),
        "custom_ops": _custom_ops(ep.graph_module),
        "shape_env": env_to_json(env) if env is not None else None,
        "graph": graph_to_json(ep.graph_module),
        "signature": {"inputs": [_input_spec(s) for s in ep.graph_signature.input_specs],
                      "outputs": [_output_spec(s) for s in ep.graph_signature.output_specs]},
        "state_dict": {k: table.describe(v, k, f"state_dict['{k}']") for k, v in ep.state_dict.items()},
        "constants": {k: table.describe(v, f"constants/{k}", f"constant {k}") for k, v in ep.constants.items()},
        # derived from shape_contract (as ep.range_constraints is) and written for readers of every
        # 1.x, which require the key; this reader derives it again and does not read it
        "range_constraints": [[expr_to_json(k, symbol_table(env)), range_to_json(v)]
                              for k, v in ep.range_constraints.items()],
        "shape_contract": ep.shape_contract.to_json() if ep.shape_contract is not None else None,
        "module_call_graph": [_call_entry(e) for e in ep.module_call_graph],
        "input_paths": list(ep.input_paths),
        "input_aliases": [[int(k), int(v)] for k, v in ep.input_aliases.items()],
        "shape_report": list(ep.shape_report),
        "example_inputs": _examples(ep.example_inputs, table) if with_examples and ep.example_inputs else None,
        "extra_files": extra_names,
    }
    if ep.verifier is not TrainingIRVerifier:   # written only for a lowered program: exported ones stay unchanged
        doc["dialect"] = _DIALECT_NAMES[ep.verifier]
    return doc


def _custom_ops(gm) -> list[str]:
    found = set()
    for module in gm.modules():
        if hasattr(module, "graph"):
            for n in module.graph.nodes:
                if n.op == "call_function" and custom_namespace(n.target) is not None:
                    found.add(qualified_name(n.target))
    return sorted(found)


def _argument(arg) -> dict:
    if isinstance(arg, ConstantArgument):
        return {"kind": "constant", "name": arg.name, "value": encode(arg.value, f"the constant input {arg.name}")}
    return {"kind": _ARGUMENT_NAMES[type(arg)], "name": arg.name}


def _input_spec(s: InputSpec) -> dict:
    return {"kind": s.kind.name, "arg": _argument(s.arg), "target": s.target, "persistent": s.persistent}


def _output_spec(s: OutputSpec) -> dict:
    return {"kind": s.kind.name, "arg": _argument(s.arg), "target": s.target}


def _call_entry(e: ModuleCallEntry) -> dict:
    sig = e.signature
    entry = {"fqn": e.fqn, "signature": None if sig is None else {
        "inputs": [_argument(a) for a in sig.inputs], "outputs": [_argument(a) for a in sig.outputs],
        "in_spec": treespec_to_json(sig.in_spec) if sig.in_spec is not None else None,
        "out_spec": treespec_to_json(sig.out_spec) if sig.out_spec is not None else None,
        "forward_arg_names": sig.forward_arg_names}}
    if sig is not None and sig.keywords_by_name:   # written only where set: absent means "keep the order"
        entry["signature"]["keywords_by_name"] = True
    if sig is not None and sig.state_writes:   # a preserved call's buffer writes: only where it makes some
        entry["signature"]["state_writes"] = dict(sig.state_writes)
    if e.alias_of is not None:   # written only where set, so archives without shared modules are unchanged
        entry["alias_of"] = e.alias_of
    return entry


def _examples(examples, table: TensorTable) -> dict:
    leaves, spec = pytree.tree_flatten(examples)
    return {"spec": treespec_to_json(spec),
            "leaves": [{"tensor": table.describe(leaf, f"example_inputs/{i}", f"example input {i}")}
                       if isinstance(leaf, torch.Tensor) else {"value": encode(leaf, f"example input {i}")}
                       for i, leaf in enumerate(leaves)]}


# -- loading --------------------------------------------------------------------------------

def check_version(doc: Any) -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ArtifactError("graphport.json does not describe a graphport program (no format: graphport)")
    version = doc.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(type(v) is int for v in version)):
        raise ArtifactError(f"graphport.json has a malformed version {_short(version)}")
    if version[0] != VERSION[0]:
        raise ArtifactError(
            f"the archive is format version {version[0]}.{version[1]}, and this graphport reads format version "
            f"{VERSION[0]}.x (it writes {VERSION[0]}.{VERSION[1]})",
            fix="load it with a graphport release that reads format version "
                f"{version[0]}.x, or save the program again with this one")


def program_from_json(doc: dict, binder: TensorBinder, weights: dict[str, torch.Tensor] | None) -> ExportedProgram:
    """The program, owning the shape environment its symbolic values share (None: static)."""
    check_version(doc)
    for name in _list(doc, "custom_ops"):   # every custom op named up front, before the graph
        if not isinstance(name, str):
            _fail("custom_ops")
        lookup_operator(name, f"(custom op list) {name}")
    env = _env_from_json(doc["shape_env"]) if doc.get("shape_env") is not None else None
    # decoding values and checking the program ask questions about sizes, answered as if they
    # were >= 2 where no one needed it: the assumptions are the ones the archive records
    with assumptions_kept(env):
        return _program(doc, env, binder, weights)


def _program(doc: dict, env: ShapeEnv | None, binder: TensorBinder,
             weights: dict[str, torch.Tensor] | None) -> ExportedProgram:
    gm = graph_from_json(doc.get("graph"), env)
    signature = _signature(doc.get("signature"))
    state_dict, constants = _state(doc, binder, weights)
    contract = _contract_from_json(doc["shape_contract"]) if doc.get("shape_contract") is not None else None
    _check_bindings(env, contract)
    call_graph = [_call_entry_from(e) for e in _list(doc, "module_call_graph")]
    paths = _list(doc, "input_paths")
    aliases = {}
    for pair in _list(doc, "input_aliases"):
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)):
            _fail("input_aliases")
        aliases[pair[0]] = pair[1]
    report = _list(doc, "shape_report")
    if not all(isinstance(p, str) for p in paths + report):
        _fail("input_paths or shape_report")
    examples = _examples_from(doc.get("example_inputs"), binder)
    dialect = doc.get("dialect", "TRAINING")
    if dialect not in _DIALECTS:
        _fail(f"dialect {_short(dialect)}")
    fields = dict(graph_module=gm, graph_signature=signature, state_dict=state_dict, module_call_graph=call_graph,
                  example_inputs=examples, constants=constants, input_paths=paths, input_aliases=aliases,
                  shape_contract=contract, shape_env=env, shape_report=report,
                  verifiers=[_DIALECTS[dialect]])
    check_coherence(fields)
    check_graph(gm, env)
    try:
        return ExportedProgram(**fields)
    except GraphportError as e:
        raise ArtifactError(f"the loaded program breaks the IR contract: {e.what}") from None


def _env_from_json(data: Any) -> ShapeEnv:
    from .symbolic import env_from_json
    return env_from_json(data)


def _contract_from_json(data: Any) -> ShapeContract:
    from ..shapes.contract import ShapeContract
    return ShapeContract.from_json(data)


def _check_bindings(env: ShapeEnv | None, contract: ShapeContract | None) -> None:
    """The contract's data-dependent symbols are the environment's, bound to the same nodes.
    (A node named may be gone: dead-code elimination drops a binding nothing reads.)"""
    if contract is None:
        return
    from ..shapes.contract import ComputedValue
    infos = env.unbacked.infos if env is not None else {}
    for sym, fact in contract.symbols.items():
        if isinstance(fact.source, ComputedValue) and (sym not in infos or infos[sym].node != fact.source.node):
            raise ArtifactError(f"the shape contract binds {sym} to the node {_short(fact.source.node)}, which "
                                "the program's data-dependent symbols do not")


def _fail(where: str):
    raise ArtifactError(f"graphport.json: malformed {where}")


def _list(doc: dict, key: str) -> list:
    value = doc.get(key)
    if not isinstance(value, list):
        _fail(key)
    return value


def _argument_from(data: Any):
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        _fail("signature argument")
    kind = data.get("kind")
    if kind == "constant":
        return ConstantArgument(data["name"], Decoder(None, context=f"input {data['name']}").decode(data.get("value")))
    if kind not in _ARGUMENTS:
        _fail(f"signature argument kind {_short(kind)}")
    return _ARGUMENTS[kind](data["name"])


def _enum(enum_type, name: Any):
    if not isinstance(name, str) or name not in enum_type.__members__:
        _fail(f"{enum_type.__name__} {_short(name)}")
    return enum_type[name]


def _optional_str(value: Any, where: str):
    if value is not None and not isinstance(value, str):
        _fail(where)
    return value


def _signature(data: Any) -> ExportGraphSignature:
    if not isinstance(data, dict) or not isinstance(data.get("inputs"), list) or not isinstance(data.get("outputs"), list):
        _fail("signature")
    inputs = []
    for s in data["inputs"]:
        if not isinstance(s, dict) or s.get("persistent") not in (None, True, False):
            _fail("input spec")
        inputs.append(InputSpec(_enum(InputKind, s.get("kind")), _argument_from(s.get("arg")),
                                _optional_str(s.get("target"), "input target"), s.get("persistent")))
    outputs = []
    for s in data["outputs"]:
        if not isinstance(s, dict):
            _fail("output spec")
        outputs.append(OutputSpec(_enum(OutputKind, s.get("kind")), _argument_from(s.get("arg")),
                                  _optional_str(s.get("target"), "output target")))
    return ExportGraphSignature(inputs, outputs)


def _state(doc: dict, binder: TensorBinder, weights: dict[str, torch.Tensor] | None) -> tuple[dict, dict]:
    described = {}
    for section in ("state_dict", "constants"):
        table = doc.get(section)
        if not isinstance(table, dict):
            _fail(section)
        described[section] = table
    supplied = _check_supplied(described, weights) if weights is not None else {}
    state_dict = {k: binder.make(v, f"state_dict['{k}']", supplied.get(k)) for k, v in described["state_dict"].items()}
    constants = {k: binder.make(v, f"constant {k}", supplied.get(k)) for k, v in described["constants"].items()}
    return state_dict, constants


def _check_supplied(described: dict, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights given at load, checked against the program's descriptions all at once."""
    wanted = {**described["constants"], **described["state_dict"]}
    problems = []
    missing = [k for k, d in wanted.items() if isinstance(d, dict) and d.get("key") is None and k not in weights]
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    unexpected = [k for k in weights if k not in wanted]
    if unexpected:
        problems.append(f"not in the program: {', '.join(map(str, unexpected))}")
    for k, t in weights.items():
        d = wanted.get(k)
        if not isinstance(d, dict) or k in unexpected:
            continue
        if not isinstance(t, torch.Tensor):
            problems.append(f"{k}: a {type(t).__qualname__}, not a tensor")
        elif list(t.shape) != d.get("shape") or dtype_name(t.dtype) != d.get("dtype"):
            problems.append(f"{k}: given {t.dtype} {list(t.shape)}, the program needs {d.get('dtype')} {d.get('shape')}")
    if problems:
        raise ArtifactError("the weights given to load do not fit the program:\n  " + "\n  ".join(problems),
                            fix="pass the state dict (or safetensors file) of the model the program was exported from")
    return dict(weights)


def _call_entry_from(data: Any) -> ModuleCallEntry:
    if not isinstance(data, dict) or not isinstance(data.get("fqn"), str):
        _fail("module_call_graph entry")
    alias_of = data.get("alias_of")
    if alias_of is not None and not isinstance(alias_of, str):
        _fail("module_call_graph alias_of")
    sig = data.get("signature")
    if sig is None:
        return ModuleCallEntry(data["fqn"], alias_of=alias_of)
    if not isinstance(sig, dict) or not isinstance(sig.get("inputs"), list) or not isinstance(sig.get("outputs"), list):
        _fail("module call signature")
    names = sig.get("forward_arg_names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        _fail("forward_arg_names")
    writes = sig.get("state_writes", {})
    if not isinstance(writes, dict) or not all(isinstance(v, str) for v in writes.values()):
        _fail("state_writes")
    return ModuleCallEntry(data["fqn"], ModuleCallSignature(
        [_argument_from(a) for a in sig["inputs"]], [_argument_from(a) for a in sig["outputs"]],
        treespec_from_json(sig["in_spec"]) if sig.get("in_spec") is not None else None,
        treespec_from_json(sig["out_spec"]) if sig.get("out_spec") is not None else None, names,
        sig.get("keywords_by_name") is True, state_writes=dict(writes)), alias_of)


def _examples_from(data: Any, binder: TensorBinder):
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("leaves"), list):
        _fail("example_inputs")
    leaves = []
    for i, leaf in enumerate(data["leaves"]):
        if isinstance(leaf, dict) and set(leaf) == {"tensor"}:
            leaves.append(binder.make(leaf["tensor"], f"example input {i}"))
        elif isinstance(leaf, dict) and set(leaf) == {"value"}:
            leaves.append(Decoder(None, context=f"example input {i}").decode(leaf["value"]))
        else:
            _fail("example input")
    spec = treespec_from_json(data.get("spec"))
    if spec.num_leaves != len(leaves):
        _fail("example_inputs (its structure and its leaves disagree)")
    examples = pytree.tree_unflatten(leaves, spec)
    if not (isinstance(examples, tuple) and len(examples) == 2 and isinstance(examples[0], tuple)
            and isinstance(examples[1], dict)):
        _fail("example_inputs (expected (args, kwargs))")
    return examples

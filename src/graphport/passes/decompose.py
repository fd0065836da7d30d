"""`ExportedProgram.run_decompositions`: lower a program to the Core ATen opset, or by a
table of the user's.

The program's graph is captured again node by node under a policy built from the table
(`capture/replay.py`), so decompositions run as any composite does during capture: on
tracers with the program's symbolic sizes, made functional as they are recorded, with
each new node inheriting the metadata of the node it came from. The signature, the
state, the shape contract (so `range_constraints` and the checks of every call) carry
over unchanged; that is sound only if the decompositions need no shape fact the program
was not exported with, which `_no_new_shape_facts` checks.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..capture.replay import ReplayInputs, replay
from ..errors import UnsupportedFeatureError
from ..ops.decompositions import DecompositionTable, TablePolicy, default_decompositions
from ..program import ExportedProgram, ModuleCallEntry
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputSpec, SymBoolArgument,
                         SymFloatArgument, SymIntArgument, TensorArgument)
from .._gc import cycle_collection_paused
from .metadata import finish_metadata
from .verifier import verify

pytree = _torch.pytree
_SYMBOLIC_ARGUMENTS = {torch.SymInt: SymIntArgument, torch.SymFloat: SymFloatArgument, torch.SymBool: SymBoolArgument}


@cycle_collection_paused()
def run_decompositions(ep: ExportedProgram, decomp_table: dict[Any, Callable] | None = None,
                       decompose_custom_triton_ops: bool = False) -> ExportedProgram:
    """A new program computing what `ep` does, with the operators of `decomp_table`
    expanded (None: the Core ATen table; `{}`: nothing). `ep` is left untouched.

    `decompose_custom_triton_ops` is accepted for torch.export's signature: graphport
    captures no triton kernels, so there is nothing it would change."""
    table = default_decompositions() if decomp_table is None else decomp_table
    table = table.materialize() if isinstance(table, DecompositionTable) else dict(table)
    env = _shape_env(ep.graph)
    named = frozenset(arg.name for entry in ep.module_call_graph if entry.signature is not None
                      for arg in entry.signature.inputs + entry.signature.outputs
                      if not isinstance(arg, ConstantArgument))
    with _no_new_shape_facts(env):
        replayed = replay(ep.graph_module, TablePolicy(table), _replay_inputs(ep, env, named))
    graph = replayed.graph_module.graph
    input_specs = list(ep.graph_signature.input_specs)
    first_user = next((i for i, s in enumerate(input_specs) if s.kind is InputKind.USER_INPUT), len(input_specs))
    input_specs[first_user:first_user] = [InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), target)
                                          for name, target in replayed.new_constants.items()]
    out_values = next(n for n in graph.nodes if n.op == "output").args[0]
    output_specs = [OutputSpec(spec.kind, _argument(value), spec.target)
                    for spec, value in zip(ep.graph_signature.output_specs, out_values)]
    lowered = ExportedProgram(
        replayed.graph_module, ExportGraphSignature(input_specs, output_specs), dict(ep.state_dict),
        dict(ep.range_constraints), [_renamed(e, replayed.renamed) for e in ep.module_call_graph],
        ep.example_inputs, {**ep.constants, **replayed.constant_values}, list(ep.input_paths),
        dict(ep.input_aliases), ep.shape_contract, list(ep.shape_report))
    verify(lowered, dialect="core_aten" if decomp_table is None else "default")
    finish_metadata(lowered.graph_module)
    return lowered


def _renamed(entry: ModuleCallEntry, renamed: dict[str, Any]) -> ModuleCallEntry:
    """A preserved call's signature naming the lowered program's nodes: a value the lowering
    computes another way has another node (`linear` becomes `addmm`), or is now a constant."""
    if entry.signature is None:
        return ModuleCallEntry(entry.fqn, None, entry.alias_of)

    def arg(a):
        if isinstance(a, ConstantArgument) or a.name not in renamed:
            return a
        now = renamed[a.name]
        return dataclasses.replace(a, name=now) if isinstance(now, str) else ConstantArgument(a.name, now)
    signature = dataclasses.replace(entry.signature, inputs=[arg(a) for a in entry.signature.inputs],
                                    outputs=[arg(a) for a in entry.signature.outputs])
    return ModuleCallEntry(entry.fqn, signature, entry.alias_of)


def _replay_inputs(ep: ExportedProgram, env, named: frozenset[str]) -> ReplayInputs:
    sig = ep.graph_signature
    devices: dict[str, torch.device] = {}
    constants: dict[str, torch.Tensor] = {}
    targets: dict[str, str] = {}
    for spec in sig.input_specs:
        if spec.kind is InputKind.PARAMETER:
            devices[spec.arg.name] = ep.state_dict[spec.target].device
        elif spec.kind is InputKind.BUFFER:
            devices[spec.arg.name] = ep.state_dict.get(spec.target, ep.constants.get(spec.target)).device
        elif spec.kind is InputKind.CONSTANT_TENSOR:
            constants[spec.arg.name] = ep.constants[spec.target]
            targets[spec.arg.name] = spec.target
    users = [s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
    if ep.example_inputs is not None:
        leaves = pytree.tree_leaves(ep.example_inputs)
        devices.update({name: leaf.device for name, leaf in zip(users, leaves) if isinstance(leaf, torch.Tensor)})
    return ReplayInputs(devices, constants, targets, users, env, named)


def _shape_env(graph: fx.Graph):
    """The shape environment of the program's symbolic sizes, or None for a static program.
    Every node is looked at, not only the inputs: a program with static inputs still has
    symbolic sizes when it reads data (`.item()`, `nonzero`), and its replay needs them."""
    for node in graph.nodes:
        for val in pytree.tree_leaves(node.meta.get("val")):
            sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
            for size in sizes:
                if isinstance(size, (torch.SymInt, torch.SymFloat, torch.SymBool)) and hasattr(size.node, "env"):
                    return size.node.env
    return None


@contextlib.contextmanager
def _no_new_shape_facts(env):
    """The lowered program keeps the original's shape contract, so its decompositions must
    not need a fact about sizes beyond the capture's: a new guard, or an assumption that a
    size is larger than the capture assumed. The environment is restored either way, so
    the original program is left as it was."""
    if env is None:
        yield
        return
    guards, replacements = list(env.guards), dict(env.replacements)
    assumed, sites = dict(env.assumed_min), dict(env.assumption_sites)
    try:
        yield
        known = {g.rel for g in guards}
        new = [g for g in env.guards[len(guards):] if g.rel not in known]
        grown = [(sym, least) for sym, least in env.assumed_min.items() if least > assumed.get(sym, 0)]
        if new:
            raise UnsupportedFeatureError(
                f"a decomposition needs the sizes to satisfy {new[0].rel}, which the program was not exported "
                "with, so its shape checks would no longer cover it", location=new[0].location,
                fix="keep that operator whole: delete it from the decomposition table "
                    "(table = graphport.default_decompositions(); del table[op])")
        if grown:
            sym, least = grown[0]
            raise UnsupportedFeatureError(
                f"a decomposition assumes {env.symbols[sym].dim_name} >= {least}, which the program was not "
                "proven for", location=env.assumption_sites.get(sym),
                fix="keep that operator whole (delete it from the decomposition table), or export with "
                    f"Dim min={least}")
    finally:
        env.guards[:] = guards
        env.replacements = replacements
        env.assumed_min.clear()
        env.assumed_min.update(assumed)
        env.assumption_sites.clear()
        env.assumption_sites.update(sites)
        env._simplified.clear()


def _argument(value: Any):
    if isinstance(value, fx.Node):
        return _SYMBOLIC_ARGUMENTS.get(type(value.meta.get("val")), TensorArgument)(value.name)
    return ConstantArgument("", value)

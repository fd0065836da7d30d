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
import logging
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.fx as fx

from .. import _torch, progress
from ..capture.replay import ReplayInputs, replay
from ..errors import UnsupportedFeatureError
from ..ops.decompositions import DecompositionTable, TablePolicy, default_decompositions
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                         SymBoolArgument, SymFloatArgument, SymIntArgument, TensorArgument, TokenArgument)
from .lowering_sizes import LoweredValidity, lowered_validity
from .verifier import CoreATenVerifier, Verifier

if TYPE_CHECKING:   # passes take a program and return ep.replace(...): they sit below program.py
    from ..program import ExportedProgram, ModuleCallEntry

log = logging.getLogger("graphport.passes")

pytree = _torch.pytree
_SYMBOLIC_ARGUMENTS = {torch.SymInt: SymIntArgument, torch.SymFloat: SymFloatArgument, torch.SymBool: SymBoolArgument}


def run_decompositions(ep: ExportedProgram, decomp_table: dict[Any, Callable] | None = None,
                       decompose_custom_triton_ops: bool = False) -> ExportedProgram:
    """A new program computing what `ep` does, with the operators of `decomp_table`
    expanded (None: the Core ATen table; `{}`: nothing). `ep` is left untouched.

    `decompose_custom_triton_ops` is accepted for torch.export's signature: graphport
    captures no triton kernels, so there is nothing it would change."""
    table = default_decompositions() if decomp_table is None else decomp_table
    table = table.materialize() if isinstance(table, DecompositionTable) else dict(table)
    if log.isEnabledFor(logging.INFO):
        _log_chosen(ep, table)
    start = time.perf_counter()
    progress.report("run_decompositions", 0, 3)
    # the lowering reasons about sizes in a fork of the program's environment, which the
    # lowered program then owns: the program given is never changed
    env = ep.shape_env.fork(with_facts=True) if ep.shape_env is not None else None
    named = frozenset(arg.name for entry in ep.module_call_graph if entry.signature is not None
                      for arg in entry.signature.inputs + entry.signature.outputs
                      if not isinstance(arg, ConstantArgument))
    policy = TablePolicy(table)

    def lower_again(program: fx.GraphModule, pinned_env) -> tuple:
        again = replay(program, policy, _replay_inputs(ep, pinned_env, named))
        return again.graph_module.graph, again.constant_values

    def validity(assumed: list) -> LoweredValidity:
        return lowered_validity(ep, env, assumed, replayed.graph_module.graph, replayed.constant_values,
                                lower_again)

    with _no_new_shape_facts(env, ep.shape_env, _traced_again(ep.graph, env) and validity) as proven:
        replayed = replay(ep.graph_module, policy, _replay_inputs(ep, env, named))
        progress.report("run_decompositions", 1, 3)
    progress.report("run_decompositions", 2, 3)
    graph = replayed.graph_module.graph
    input_specs = list(ep.graph_signature.input_specs)
    first_user = next((i for i, s in enumerate(input_specs) if s.kind is InputKind.USER_INPUT), len(input_specs))
    input_specs[first_user:first_user] = [InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), target)
                                          for name, target in replayed.new_constants.items()]
    out_values = next(n for n in graph.nodes if n.op == "output").args[0]
    token_outputs = 0 if replayed.tokens is None else 1
    output_specs = [OutputSpec(spec.kind, _argument(value), spec.target)
                    for spec, value in zip(ep.graph_signature.output_specs, out_values[token_outputs:])]
    if replayed.tokens is not None:   # effectful calls chained by a token (capture/effects.py), as torch lowers them
        input_specs.insert(0, InputSpec(InputKind.TOKEN, TokenArgument(replayed.tokens[0]), None))
        output_specs.insert(0, OutputSpec(OutputKind.TOKEN, TokenArgument(replayed.tokens[1]), None))
    contract, report = _narrowed(ep, env, proven.valid_from)
    lowered = ep.replace(
        graph_module=replayed.graph_module, graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict=dict(ep.state_dict), module_call_graph=[_renamed(e, replayed.renamed) for e in ep.module_call_graph],
        constants={**ep.constants, **replayed.constant_values}, input_paths=list(ep.input_paths),
        input_aliases=dict(ep.input_aliases), shape_contract=contract, shape_env=env, shape_report=report,
        verifiers=[CoreATenVerifier if decomp_table is None else Verifier])
    progress.report("run_decompositions", 3, 3)
    log.info("run_decompositions: %d nodes -> %d nodes in %.3f s", len(ep.graph.nodes), len(graph.nodes),
             time.perf_counter() - start)
    return lowered


def _log_chosen(ep: ExportedProgram, table: dict) -> None:
    """Each operator of the program the table decomposes, with the decomposition chosen."""
    counts: dict = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target in table:
            counts[node.target] = counts.get(node.target, 0) + 1
    for op, count in counts.items():
        fn = table[op]
        if getattr(fn, "__self__", None) is op:   # OpOverload.decompose: the kernel registered with torch
            chosen = "torch's registered decomposition"
        else:
            chosen = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        log.info("decomposing %s (%d node%s) with %s", op, count, "s" if count > 1 else "", chosen)


def _renamed(entry: ModuleCallEntry, renamed: dict[str, Any]) -> ModuleCallEntry:
    """A preserved call's signature naming the lowered program's nodes: a value the lowering
    computes another way has another node (`linear` becomes `addmm`), or is now a constant."""
    if entry.signature is None:
        return dataclasses.replace(entry)

    def arg(a):
        if isinstance(a, ConstantArgument) or a.name not in renamed:
            return a
        now = renamed[a.name]
        return dataclasses.replace(a, name=now) if isinstance(now, str) else ConstantArgument(a.name, now)
    writes = {target: renamed.get(name, name) for target, name in entry.signature.state_writes.items()}
    signature = dataclasses.replace(entry.signature, inputs=[arg(a) for a in entry.signature.inputs],
                                    outputs=[arg(a) for a in entry.signature.outputs],
                                    state_writes={t: n for t, n in writes.items() if isinstance(n, str)})
    return dataclasses.replace(entry, signature=signature)


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
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            constants[spec.arg.name] = ep.constants[spec.target]
            targets[spec.arg.name] = spec.target
    users = [s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
    if ep.example_inputs is not None:
        leaves = pytree.tree_leaves(ep.example_inputs)
        devices.update({name: leaf.device for name, leaf in zip(users, leaves) if isinstance(leaf, torch.Tensor)})
    return ReplayInputs(devices, constants, targets, users, env, named, effect_tokens=True)


def _traced_again(graph: fx.Graph, env) -> bool:
    """Whether the lowering can be traced again at pinned sizes: not yet for control flow
    or data-dependent sizes, whose lowering keeps the capture's assumption levels instead."""
    return env is not None and not env.unbacked.infos and not any(n.op == "get_attr" for n in graph.nodes)


@contextlib.contextmanager
def _no_new_shape_facts(env, original, prove: Callable[[list], LoweredValidity] | bool) -> Iterator[LoweredValidity]:
    """The lowered program keeps the original's shape contract, so its decompositions must
    not need a fact about sizes beyond the capture's: no new guard; and a decision that
    holds only for sizes larger than the capture assumed (a layout or emptiness question
    answered as for large sizes) is proven at the smaller sizes the program accepts
    (`prove(grown)`, see passes/lowering_sizes.py). Decisions at the capture's own level
    are not traced again: they are as proven as the capture's (the same small sizes were
    traced for the program; not for the decompositions' own choices). Without a proof
    (`prove` False), no decision may assume more than the capture did. `env` is the
    lowering's fork of the `original` program's environment, compared with it here; the
    original is not changed. Yields what the proof found, filled in on exit."""
    proven = LoweredValidity({}, [])
    yield proven
    if env is None:
        return
    known = {g.rel for g in original.guards}
    new = [g for g in env.guards[len(original.guards):] if g.rel not in known]
    if new:
        raise UnsupportedFeatureError(
            f"a decomposition needs the sizes to satisfy {new[0].rel}, which the program was not exported "
            "with, so its shape checks would no longer cover it", location=new[0].location,
            fix="keep that operator whole: delete it from the decomposition table "
                "(table = graphport.default_decompositions(); del table[op])")
    # what capture proved operator by operator it assumed too: lowering may assume as much
    grown = [(sym, least) for sym, least in env.assumed_min.items()
             if least > max(original.assumed_min.get(sym, 0), env.proven_min.get(sym, 0))]
    if not prove and grown:
        sym, least = grown[0]
        raise UnsupportedFeatureError(
            f"a decomposition assumes {env.symbols[sym].dim_name} >= {least}, which the program was not "
            "proven for (a lowering with control flow or data-dependent sizes is not traced again at small "
            "sizes)", location=env.assumption_sites.get(sym),
            fix="keep that operator whole (delete it from the decomposition table), or export with "
                f"Dim min={least}")
    if prove and grown:
        found = prove(sorted(grown, key=lambda item: str(item[0])))
        if found.exclusions:
            together = ", ".join(f"{env.symbols[s].dim_name} = {v}" for s, v in found.exclusions[0].items())
            raise UnsupportedFeatureError(
                f"the lowered program computes something else when {together} together, sizes the program "
                "accepts", location=env.assumption_sites.get(next(iter(found.exclusions[0]))),
                fix="keep the operators involved whole (delete them from the decomposition table), or narrow "
                    "those Dims' ranges")
        proven.valid_from.update(found.valid_from)


def _narrowed(ep: ExportedProgram, env, valid_from: dict) -> tuple:
    """The lowered program's shape contract and report: the original's, refusing at call
    time the sizes where the lowered graph was not proven (a warning says so now)."""
    if not valid_from:
        return ep.shape_contract, list(ep.shape_report)
    symbols = dict(ep.shape_contract.symbols)
    report = list(ep.shape_report)
    for sym, (least, reason) in valid_from.items():
        fact = symbols[sym]
        symbols[sym] = dataclasses.replace(fact, valid_from=max(least, fact.valid_from or 0),
                                           assumed_at=env.assumption_sites.get(sym), reason=reason)
        note = f"{fact.name} < {least} is refused at call time by the lowered program: {reason}"
        report.append(note)
        warnings.warn(f"graphport: {note}", stacklevel=3)
    return dataclasses.replace(ep.shape_contract, symbols=symbols), report


def _argument(value: Any):
    if isinstance(value, fx.Node):
        return _SYMBOLIC_ARGUMENTS.get(type(value.meta.get("val")), TensorArgument)(value.name)
    return ConstantArgument("", value)

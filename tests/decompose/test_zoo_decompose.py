"""run_decompositions() on the model zoo: what torch.export's gives, op for op, and eager's values.

For each model, static and dynamic: graphport's Core ATen program matches eager on the
example inputs and (dynamic) on a second shape; the original program is left untouched;
the signature, range constraints and shape checks carry over; and the operator multiset
is torch.export's run_decompositions' one. Two things are set aside in that comparison:
calls whose results nothing uses (torch's lowering drops them; graphport keeps every call
the program made, since one may raise in eager), and the nodes torch's default capture
makes that graphport's never does (`_assert_tensor_metadata` for `.to()`, `alias` for
`detach`), and `sym_size` reads.
"""
from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench/ helpers live at the repo root

from bench import measure, zoo  # noqa: E402
from bench.harness import OK  # noqa: E402

# Default suite: the smallest model, static and dynamic (the others take seconds each in torch).
FAST = {("mlp", "static"), ("mlp", "dynamic")}
# torch.export's own run_decompositions fails on these (a view over its attention layout):
# graphport's is compared with eager only.
TORCH_FAILS = {"gpt2"}


def _params() -> list:
    return [pytest.param(name, kind, id=f"{name}-{kind}", marks=[] if (name, kind) in FAST else [pytest.mark.slow])
            for name, entry in zoo.MODELS.items() if not entry.meta for kind in ("static", "dynamic")]


# Nodes torch's default capture makes and graphport's never does, and size reads (graphport
# reads each size symbol once; torch reads sizes where it uses them).
_NOT_COMPARED = {"aten._assert_tensor_metadata.default", "aten.alias.default", "aten.sym_size.int"}


def operators(ep) -> Counter:
    """The operators whose results are used (directly or through others), by name."""
    live, used = set(), set()
    for node in reversed(ep.graph.nodes):
        if node.op == "output" or node in used:
            live.add(node)
            used.update(node.all_input_nodes)
    return Counter(str(n.target) for n in live
                   if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                   and str(n.target) not in _NOT_COMPARED)


@pytest.mark.parametrize("name,kind", _params())
def test_run_decompositions_matches_torch_and_eager(name: str, kind: str) -> None:
    dynamic = kind == "dynamic"
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = gp.export(built.module, args, kwargs,
                       dynamic_shapes=measure.dynamic_spec(built, "graphport") if dynamic else None)
    before = ep.graph_module.print_readable(print_output=False)
    core = ep.run_decompositions()
    assert ep.graph_module.print_readable(print_output=False) == before, "the original program changed"
    gp.verify(core, dialect="core_aten")
    assert [(s.kind, s.target) for s in core.graph_signature.output_specs] == \
           [(s.kind, s.target) for s in ep.graph_signature.output_specs]
    assert core.graph_signature.input_specs == ep.graph_signature.input_specs
    assert core.range_constraints == ep.range_constraints and core.shape_contract is ep.shape_contract
    outcome = measure.check_against_eager(core, built, [built.example_inputs()]
                                          + ([built.other_inputs()] if dynamic else []))
    assert outcome.status == OK, f"{outcome.error_type}: {outcome.message}"
    if name in TORCH_FAILS:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.export.export(built.module, args, kwargs,
                                     dynamic_shapes=measure.dynamic_spec(built, "torch") if dynamic else None)
        their_core = theirs.run_decompositions()
    ours, their = operators(core), operators(their_core)
    assert ours == their, f"graphport only: {dict(ours - their)}; torch only: {dict(their - ours)}"

"""run_decompositions() on PyTorch's ExportDB cases: every case graphport exports lowers to
a program the Core ATen dialect accepts, computing what eager computes (outputs and input
mutations, on the example inputs and at a second in-range shape); where torch.export also
exports the case, the lowered operators are torch's lowered operators.

The comparison with torch (slow: torch's export and lowering take about a second per case)
sets aside what the zoo comparison sets aside (tests/decompose/test_zoo_decompose.py): calls
whose results nothing uses, nodes torch's capture makes and graphport's never does, size
reads; and it reads torch's `auto_functionalized_v2` as the `auto_functionalized` form
graphport writes.
"""
from __future__ import annotations

import copy
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench/ helpers live at the repo root

from bench import exportdb, harness  # noqa: E402
from bench.harness import OK  # noqa: E402

CASES = exportdb.all_cases()
_NOT_COMPARED = {"aten._assert_tensor_metadata.default", "aten.alias.default", "aten.sym_size.int",
                 "<built-in function getitem>"}


def _export(case, exporter):
    """The case exported by graphport or torch.export, or None when the exporter refuses it."""
    model = copy.deepcopy(case.model)
    args, kwargs = harness.clone_inputs((case.example_args, case.example_kwargs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if exporter == "graphport":
                return gp.export(model, args, kwargs, dynamic_shapes=harness.to_graphport_spec(case.dynamic_shapes))
            return torch.export.export(model, args, kwargs, dynamic_shapes=case.dynamic_shapes)
        except gp.GraphportError as exc:
            if isinstance(exc, gp.InternalError):
                raise
            return None
        except Exception:
            if exporter == "graphport":
                raise
            return None


def live_operators(program) -> Counter:
    """Operators whose results are used, in the graph and in the subgraphs it calls."""
    return _live(program.graph_module)


def _live(graph_module) -> Counter:
    live = set()
    for node in reversed(graph_module.graph.nodes):
        if node.op == "output" or node in live:
            live.add(node)
            live.update(node.all_input_nodes)
    found = Counter(str(n.target).replace("auto_functionalized_v2", "auto_functionalized")
                    for n in live if n.op == "call_function")
    for node in live:
        if node.op == "get_attr":
            found += _live(getattr(graph_module, node.target))
    return Counter({name: count for name, count in found.items() if name not in _NOT_COMPARED})


class _Lowerings(dict):
    """Case name -> (program, its lowering), each made once for both tests, on first use."""

    def __missing__(self, name):
        ep = _export(CASES[name], "graphport")
        self[name] = None if ep is None else (ep, ep.run_decompositions())
        return self[name]


_LOWERED = _Lowerings()


@pytest.mark.parametrize("name", list(CASES))
def test_exportdb_case_lowers_to_core_aten_and_matches_eager(name):
    if _LOWERED[name] is None:
        pytest.skip("graphport refuses this case at export (tests/conformance/test_exportdb.py judges that)")
    ep, core = _LOWERED[name]
    gp.verify(core, dialect="core_aten")
    assert core.graph_signature.input_specs == ep.graph_signature.input_specs
    assert [(s.kind, s.target) for s in core.graph_signature.output_specs] == \
        [(s.kind, s.target) for s in ep.graph_signature.output_specs]
    case = CASES[name]
    inputs = [(case.example_args, case.example_kwargs)]
    other = exportdb.second_inputs(case)
    if other is not None:
        inputs.append(other)
    for each in inputs:
        outcome = exportdb._compare_with_eager(case, core, each)
        assert outcome.status == OK, f"{outcome.error_type}: {outcome.message}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_exportdb_case_lowers_to_torch_operators(name):
    if _LOWERED[name] is None:
        pytest.skip("graphport refuses this case at export")
    theirs = _export(CASES[name], "torch")
    if theirs is None:
        pytest.skip("torch.export refuses this case")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        their_core = theirs.run_decompositions()
    ours, their = live_operators(_LOWERED[name][1]), live_operators(their_core)
    assert ours == their, f"graphport only: {dict(ours - their)}; torch only: {dict(their - ours)}"

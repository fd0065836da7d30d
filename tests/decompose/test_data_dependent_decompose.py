"""run_decompositions on every program of the data-dependent corpus: the lowered program
keeps the data-dependent symbols (same names, same ranges), the nodes that bind them and
the checks the program states (also for the sizes of a `cond` whose branches differ); it matches eager on the corpus's inputs, refuses the inputs
that break a stated check as the source does, and its source is left as it was."""
from __future__ import annotations

import io

import pytest
import torch

import graphport as gp
from graphport.shapes.contract import ComputedValue
from tests.control_flow.corpus import CASES as CONTROL_FLOW
from tests.control_flow.test_corpus import _export as export_control_flow
from tests.data_dependent.corpus import CASES
from tests.data_dependent.test_corpus import _same

TABLES = {"core_aten": None, "empty_table": {}}


def _assertions(ep) -> list[str]:
    return sorted(n.args[1] for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default)


def _lowered(case, table):
    ep = gp.export(case.fn, case.args, dynamic_shapes=case.dynamic_shapes)
    return ep, ep.run_decompositions(table)


@pytest.mark.parametrize("table", list(TABLES), ids=list(TABLES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_lowered_matches_eager(case, table) -> None:
    ep, lowered = _lowered(case, TABLES[table])
    if table == "core_aten":
        gp.verify(lowered, dialect="core_aten")
    for args in [case.args, *case.others]:
        _same(lowered.module()(*args), case.fn(*args))
    for args in case.breaking:
        with pytest.raises(gp.errors.RuntimeCheckError) as info:
            lowered.module()(*args)
        assert "corpus.py:" in str(info.value)
    _same(ep.module()(*case.args), case.fn(*case.args))   # the source still runs


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_symbols_bindings_and_checks_are_kept(case) -> None:
    ep, lowered = _lowered(case, None)
    assert lowered.range_constraints == ep.range_constraints
    assert set(_assertions(ep)) <= set(_assertions(lowered))
    source_names = {n.name for n in ep.graph.nodes}
    names = {n.name for n in lowered.graph.nodes}
    contract = lowered.shape_contract.symbols if lowered.shape_contract is not None else {}
    for sym, fact in contract.items():
        if isinstance(fact.source, ComputedValue) and fact.source.node in source_names:
            assert fact.source.node in names, f"{sym} is bound to {fact.source.node}, not in the lowered graph"


def test_item_keeps_its_binding_name_when_lowered() -> None:
    """`item` lowers to `_local_scalar_dense`; the node keeps the name the contract gives it."""
    case = next(c for c in CASES if c.name == "constrain_as_size")
    _, lowered = _lowered(case, None)
    targets = {n.name: n.target for n in lowered.graph.nodes}
    assert targets["item"] is torch.ops.aten._local_scalar_dense.default
    assert torch.ops.aten.sym_constrain_range_for_size.default in targets.values()


@pytest.mark.parametrize("name", ["item_as_size_for_narrow_dynamic", "check_with", "unique_rows", "bincount_padded"])
def test_lowered_round_trips(name) -> None:
    case = next(c for c in CASES if c.name == name)
    _, lowered = _lowered(case, None)
    buffer = io.BytesIO()
    gp.save(lowered, buffer)
    buffer.seek(0)
    loaded = gp.load(buffer)
    for args in [case.args, *case.others]:
        _same(loaded.module()(*args), case.fn(*args))
    for args in case.breaking:
        with pytest.raises(gp.errors.RuntimeCheckError):
            loaded.module()(*args)


@pytest.mark.parametrize("table", list(TABLES), ids=list(TABLES))
@pytest.mark.parametrize("name", ["branch_dependent_size", "branch_dependent_size_dynamic",
                                  "branch_dependent_sizes_two_outputs"])
def test_cond_of_data_dependent_size_lowers(name, table) -> None:
    """A `cond` whose branches differ in size is kept whole; the size of its result is bound
    again in the lowered graph to the node that reads it."""
    case = next(c for c in CONTROL_FLOW if c.name == name)
    model, ep = export_control_flow(case)
    lowered = ep.run_decompositions(TABLES[table])
    assert lowered.range_constraints == ep.range_constraints
    for args in [case.args, *case.fresh]:
        _same(lowered.module()(*args), model(*args))

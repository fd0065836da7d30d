"""Every program of the data-dependent and control-flow corpora leaves the process and comes
back whole: it saves, loads (through a memory-mapped file and from bytes), prints the same,
saves again to the same bytes, and computes bit-identical outputs on its examples and on
the corpus's other inputs; inputs that break a stated check are refused by the loaded
program as by the original."""
from __future__ import annotations

import pytest

import graphport as gp
from tests.control_flow.corpus import CASES as CONTROL_FLOW
from tests.control_flow.test_corpus import _export as export_control_flow
from tests.data_dependent.corpus import CASES as DATA_DEPENDENT

from .helpers import round_trip


@pytest.mark.parametrize("case", DATA_DEPENDENT, ids=[c.name for c in DATA_DEPENDENT])
def test_data_dependent_program_round_trips(case, tmp_path):
    ep = gp.export(case.fn, case.args, dynamic_shapes=case.dynamic_shapes)
    loaded = round_trip(ep, tmp_path, *[(args, {}) for args in case.others])
    for args in case.breaking:
        with pytest.raises(gp.errors.RuntimeCheckError) as theirs:
            ep.module()(*args)
        with pytest.raises(gp.errors.RuntimeCheckError) as ours:
            loaded.module()(*args)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("case", CONTROL_FLOW, ids=[c.name for c in CONTROL_FLOW])
def test_control_flow_program_round_trips(case, tmp_path):
    _, ep = export_control_flow(case)
    round_trip(ep, tmp_path, *[(args, {}) for args in case.fresh])

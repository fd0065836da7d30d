"""Every program of the control-flow corpus through run_decompositions: the default table
(checked against the Core ATen dialect, subgraphs included) and the empty table, each
matching eager on inputs that take every branch and several loop trip counts."""
from __future__ import annotations

import pytest
import torch

import graphport as gp

from tests.control_flow.corpus import CASES, Case
from tests.control_flow.test_corpus import _close, _export


def _params() -> list:
    return [pytest.param(case, table, id=f"{case.name}-{name}")
            for case in CASES for name, table in (("core", None), ("empty", {}))]


@pytest.mark.parametrize("case, table", _params())
def test_lowered_program_matches_eager(case: Case, table) -> None:
    model, ep = _export(case)
    lowered = ep.run_decompositions() if table is None else ep.run_decompositions(table)
    if table is None:
        gp.verify(lowered, dialect="core_aten")
    reference = case.make().eval()
    reference.load_state_dict(model.state_dict())
    run = lowered.module()
    for inputs in [case.args, *case.fresh]:
        ours = run(*[t.clone() for t in inputs])
        expected = reference(*[t.clone() for t in inputs])
        assert _close(ours, expected), f"{case.name} differs from eager on shapes {[list(t.shape) for t in inputs]}"

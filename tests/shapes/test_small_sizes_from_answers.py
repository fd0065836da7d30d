"""Small sizes proven from the capture's own answers, without a pinned trace, and only where
every answer the capture acted on stands there; elsewhere the pinned trace still decides.
Each program is checked against eager at the small sizes of its declared range."""
from __future__ import annotations

import importlib

import pytest
import torch

import graphport as gp

export_module = importlib.import_module("graphport.export")


@pytest.fixture
def reports(monkeypatch):
    """The SmallSizeReport of each export (the program does not carry it)."""
    found = []
    original = export_module.prove_small_sizes

    def recording(*args, **kwargs):
        found.append(original(*args, **kwargs))
        return found[-1]
    monkeypatch.setattr(export_module, "prove_small_sizes", recording)
    return found


def run_or_refuse(ep, f, x):
    """The program's answer at x matches eager's, or the call is refused: never a wrong answer."""
    try:
        got = ep.module()(x)
    except gp.errors.InputGuardError:
        return "refused"
    torch.testing.assert_close(got, f(x))
    return "ran"


def more_than_one_element(x):
    return x * 2 if x.numel() > 1 else x - 1


def test_answers_that_stand_prove_a_small_size_without_a_trace(reports):
    spec = ({0: gp.Dim("a", min=1, max=16), 1: gp.Dim("b", min=1, max=16)},)
    ep = gp.export(more_than_one_element, (torch.randn(3, 4),), dynamic_shapes=spec)
    report = reports[-1]
    # "numel > 1" needed both sizes >= 2; with one of them 1 it still holds: no trace for
    # a = 1 or b = 1, while a = b = 1, where it does not hold, is traced and excluded
    assert report.proven_from_answers == 2
    assert report.traces == 1 and report.exclusions == [{s: 1 for s in report.valid}]
    for shape in [(1, 3), (3, 1), (2, 2), (16, 16), (1, 16)]:
        assert run_or_refuse(ep, more_than_one_element, torch.randn(*shape)) == "ran"
    assert run_or_refuse(ep, more_than_one_element, torch.randn(1, 1)) == "refused"


def first_dim_is_not_one(x):
    return x.sum(0) if x.shape[0] != 1 else x[0] + 1


def test_an_answer_that_changes_at_the_small_size_is_traced(reports):
    spec = ({0: gp.Dim("a", min=1, max=16)},)
    try:
        ep = gp.export(first_dim_is_not_one, (torch.randn(3, 4),), dynamic_shapes=spec)
    except gp.ConstraintViolationError as e:
        assert "a = 1" in str(e)
    else:
        assert run_or_refuse(ep, first_dim_is_not_one, torch.randn(1, 4)) in ("ran", "refused")
    assert reports[-1].proven_from_answers == 0 and reports[-1].traces == 1

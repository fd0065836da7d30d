"""The data-dependent corpus: every program exports, passes the verifier and matches eager
on its example inputs and on other data (other sizes of the data-dependent values, zero
included); programs that need a torch._check fail at export without it, naming the check."""
from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import graphport as gp

from .corpus import CASES


def _same(got, expected) -> None:
    got_leaves, expected_leaves = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves):
        if isinstance(e, torch.Tensor):
            assert g.shape == e.shape and g.dtype == e.dtype
            torch.testing.assert_close(g, e)
        else:
            assert g == e


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_eager(case) -> None:
    ep = gp.export(case.fn, case.args, dynamic_shapes=case.dynamic_shapes)
    gp.verify(ep)
    for args in [case.args, *case.others]:
        _same(ep.module()(*args), case.fn(*args))


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case", [c for c in CASES if c.unchecked is not None],
                         ids=[c.name for c in CASES if c.unchecked is not None])
def test_missing_check_is_named(case) -> None:
    with pytest.raises(gp.errors.DataDependentError) as info:
        gp.export(case.unchecked, case.args)
    message = str(info.value)
    assert "data-dependent" in message
    assert case.suggestion in message
    assert "test" in message and ".py:" in message   # the user's line


@pytest.mark.parametrize("case", [c for c in CASES if c.breaking], ids=[c.name for c in CASES if c.breaking])
def test_broken_checks_are_refused_at_run_time(case) -> None:
    """Data that breaks a check the program states is refused with the check and its line,
    never run into a wrong answer."""
    ep = gp.export(case.fn, case.args, dynamic_shapes=case.dynamic_shapes)
    for args in case.breaking:
        with pytest.raises(gp.errors.RuntimeCheckError) as info:
            ep.module()(*args)
        assert "corpus.py:" in str(info.value) and isinstance(info.value, RuntimeError)

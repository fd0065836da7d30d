"""Sizes 0 and 1 of `Dim.AUTO` and `Dim.DYNAMIC` dimensions, against eager.

Their range is torch's default, [0, inf] (or the hint's own min= / max=): as for a named Dim,
the capture assumes sizes of at least 2 and the small-size proof settles 0 and 1. Where the
proof shows the program valid there, a call at 0 or 1 answers what eager answers; where it
does not (a branch on `x.shape[0] == 1`), the call is refused with the reason and
the line that decides, and the program's range_constraints start where it is valid.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport import Dim

from . import compare_call

pytestmark = pytest.mark.filterwarnings("ignore:graphport. .* narrows Dim.(AUTO|DYNAMIC)'s range:UserWarning")

HINTS = [pytest.param(Dim.AUTO, id="auto"), pytest.param(Dim.DYNAMIC, id="dynamic")]
MAX = 40


def _sizes(seed: int, lowest: int = 0) -> list[int]:
    rng = random.Random(seed)
    return sorted({lowest, lowest + 1, 2, *(rng.randint(lowest, MAX) for _ in range(4))} - set(range(lowest)))


def _lower(ep) -> int:
    (r,) = ep.range_constraints.values()
    return int(r.lower)


class Pointwise(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x).sum(1) * x.shape[0]


class Matmul(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 5)

    def forward(self, x, y):
        return self.lin(x).softmax(-1) @ y.t()


class BranchOnOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:
            return x * 2
        return x + 1


class Broadcast(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class MaxOverRows(torch.nn.Module):
    def forward(self, x):
        return x.max(dim=0).values


@pytest.mark.parametrize("hint", HINTS)
def test_valid_at_0_and_1_accepts_them(hint):
    ep = gp.export(Pointwise(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: hint}})
    assert _lower(ep) == 0
    for n in _sizes(1):
        compare_call(Pointwise(), ep, (torch.randn(n, 3),), label=f"n = {n}")


@pytest.mark.parametrize("hint", HINTS)
def test_two_dynamic_dims_of_a_module_with_weights(hint):
    torch.manual_seed(0)
    model = Matmul()
    ep = gp.export(model, (torch.randn(4, 3), torch.randn(6, 5)), dynamic_shapes=({0: hint}, {0: hint}))
    assert all(int(r.lower) == 0 for r in ep.range_constraints.values())
    for n in _sizes(2):
        for m in (0, 1, n):
            compare_call(model, ep, (torch.randn(n, 3), torch.randn(m, 5)), exact=False, label=f"n = {n}, m = {m}")


@pytest.mark.parametrize("hint", HINTS)
def test_branch_on_size_one_is_refused_there_with_its_line(hint):
    ep = gp.export(BranchOnOne(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: hint}})
    assert _lower(ep) == 2   # what the program accepts
    for n in (1, 0):
        with pytest.raises(gp.InputGuardError) as info:
            ep.module()(torch.randn(n, 3))
        assert isinstance(info.value, AssertionError)
        message = str(info.value)
        assert f"x.shape[0] is {n}" in message and ">= 2" in message
        assert "at x_size_0 = 1" in message and "aten::mul" in message   # the true reason: another computation
        assert "test_auto_small_sizes.py" in message
        BranchOnOne()(torch.randn(n, 3))   # eager runs: the refusal claims nothing else
    for n in _sizes(3, lowest=2):
        compare_call(BranchOnOne(), ep, (torch.randn(n, 3),), label=f"n = {n}")


@pytest.mark.parametrize("hint", HINTS)
def test_broadcast_at_one_is_refused_by_the_relation_it_breaks(hint):
    """The capture relates the two dims (x + y at sizes >= 2 needs them equal): equal sizes,
    0 and 1 included, answer; a size-1 dim broadcast against another is refused, naming it."""
    ep = gp.export(Broadcast(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: hint}, {0: hint}))
    assert _lower(ep) == 0
    for n in _sizes(4):
        compare_call(Broadcast(), ep, (torch.randn(n, 3), torch.randn(n, 3)), label=f"n = {n}")
    Broadcast()(torch.randn(1, 3), torch.randn(5, 3))   # eager broadcasts
    with pytest.raises(gp.InputGuardError, match=r"y\.shape\[0\] is 5, but the program requires it to be x_size_0 = 1"):
        ep.module()(torch.randn(1, 3), torch.randn(5, 3))


@pytest.mark.parametrize("hint", HINTS)
def test_eager_failure_at_0_fails_the_same_and_1_answers(hint):
    ep = gp.export(MaxOverRows(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: hint}})
    assert _lower(ep) == 0
    with pytest.raises(IndexError):
        MaxOverRows()(torch.randn(0, 3))
    with pytest.raises(IndexError):
        ep.module()(torch.randn(0, 3))
    for n in _sizes(5):
        compare_call(MaxOverRows(), ep, (torch.randn(n, 3),), label=f"n = {n}")


@pytest.mark.parametrize("kind", ["AUTO", "DYNAMIC"])
def test_hint_bounds_are_kept(kind):
    hint = getattr(Dim, kind)(min=1, max=9)
    ep = gp.export(Pointwise(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: hint}})
    (r,) = ep.range_constraints.values()
    assert (int(r.lower), int(r.upper)) == (1, 9)
    compare_call(Pointwise(), ep, (torch.randn(1, 3),), label="n = 1")
    for n in (0, 10):
        with pytest.raises(gp.InputGuardError, match="outside the range"):
            ep.module()(torch.randn(n, 3))


def test_saved_and_loaded_program_keeps_the_reason(tmp_path):
    ep = gp.export(BranchOnOne(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim.AUTO}})
    gp.save(ep, tmp_path / "p.gport")
    loaded = gp.load(tmp_path / "p.gport")
    assert _lower(loaded) == 2
    with pytest.raises(gp.InputGuardError, match="at x_size_0 = 1"):
        loaded.module()(torch.randn(1, 3))


class TiedLengths(torch.nn.Module):
    """ids and mask, each declared with a hint of its own, tied by the matmul that pairs them
    (as attention ties input_ids and attention_mask), and a decision on the length that does
    not change the computation (as `q_length > 1` picks causal attention)."""

    def forward(self, ids, mask):
        out = torch.bmm(ids.unsqueeze(-1) * ids.unsqueeze(-2), mask.unsqueeze(-1))
        if ids.shape[1] > 1:
            return out * 2
        return out * 2


@pytest.mark.parametrize("hint", HINTS)
def test_sizes_tied_by_the_program_are_proven_together(hint):
    """Proving length 1 pins the mask's length with the ids' (the program requires them
    equal): pinned alone, the proof would trace a mask the program never accepts and refuse
    length 1 saying the program fails there, which eager does not."""
    dims = {0: hint, 1: hint}
    ep = gp.export(TiedLengths(), (torch.randn(2, 5), torch.randn(2, 5)), dynamic_shapes=(dims, dims))
    assert all(int(r.lower) == 0 for r in ep.range_constraints.values())
    for b, t in [(1, 1), (2, 1), (0, 1), (1, 0), (3, 0), (2, 2), (4, 7)]:
        compare_call(TiedLengths(), ep, (torch.randn(b, t), torch.randn(b, t)), label=f"b = {b}, t = {t}")
    with pytest.raises(gp.InputGuardError):   # the tie is kept: eager fails on such inputs too
        ep.module()(torch.randn(2, 1), torch.randn(2, 3))


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_one_token_is_answered_by_text_models_exported_with_auto(name):
    """input_ids and attention_mask, each with Dim.AUTO dims, tied by attention: one token
    (decoding) is answered as eager answers it, not refused."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench import zoo

    built = getattr(zoo, name)()
    model = built.module.eval()
    args, kwargs = built.example_inputs()
    spec = {key: {0: Dim.AUTO, 1: Dim.AUTO} for key in kwargs}
    ep = gp.export(model, args, kwargs, dynamic_shapes=spec)
    for batch, length in [(1, 1), (2, 1), (1, 5)]:
        args, kwargs = built.make_inputs(batch=batch, seq=length)
        compare_call(model, ep, args, kwargs, exact=False, label=f"batch {batch}, length {length}")

"""Sizes 0 and 1 settled operator by operator, size by size, give the verdicts tracing gives.

The small-size proof settles what it can from the recorded metadata calls (a size where
every call gives its recorded metadata is proven; one where an operator eager reaches there
rejects its arguments is refused at call time) and traces the program again only for the
rest. Here every program of the small-size corpus is exported both ways (the size-by-size
proof on, and off: every size below the capture's assumptions traced, as before) and the
two programs must agree: the same export outcome, the same ranges, the same sizes refused
at call time, each call answering as eager does at 0, 1, 2 and random sizes in range. And
a model shaped like the transformers' attention: fewer traces, the same answers.
"""
from __future__ import annotations

import logging
import random
import re

import pytest
import torch
import torch.nn as nn

import graphport as gp
import graphport.export  # noqa: F401 (the module whose proof is switched off below)
from graphport.capture.local_proofs import LocalVerdicts

from . import assert_same, clone_tree
from .small_size_programs import MAX, PROGRAMS
from .test_small_size_paths import _dims, _target, check_call

pytestmark = [
    pytest.mark.filterwarnings("ignore:graphport. .* is refused at call time:UserWarning"),
    pytest.mark.filterwarnings("ignore:graphport. .* became static:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning"),
]
PIPELINE = __import__("sys").modules["graphport.export"]


def _tracing_every_size(monkeypatch):
    """The proof as it was: no size settled operator by operator, every one traced."""
    monkeypatch.setattr(PIPELINE, "proven_by_size", lambda deferred, sessions, local: LocalVerdicts())


def _summary(p, ep, error, target):
    """What a user can observe of an export: its outcome, ranges, and each call's outcome."""
    if ep is None:
        return {"export": type(error).__name__}
    contract = ep.shape_contract
    found = {"export": "ok", "ranges": {str(k): str(v) for k, v in ep.range_constraints.items()},
             "valid_from": {f.name: f.valid_from for f in contract.symbols.values()},
             "relations": sorted(str(r.rel) for r in contract.relations)}
    random.seed(0)
    for n in sorted({0, 1, 2, 3, MAX, *random.sample(range(p.min, MAX + 1), 3)}):
        if n >= p.min:
            found[f"n={n}"] = check_call(p, target, ep, p.make(n), f"n = {n}")
    return found


def _export(p, target):
    torch.manual_seed(1)
    try:
        return gp.export(target, clone_tree(p.make(p.example)), dynamic_shapes=p.spec(_dims(p))), None
    except gp.GraphportError as e:
        return None, e


# The whole corpus is slow (two exports and a dozen calls each): by default every tenth runs.
_CORPUS = [p if i % 10 == 0 else pytest.param(p, marks=pytest.mark.slow)
           for i, p in enumerate(p for p in PROGRAMS if not p.xfail)]


@pytest.mark.parametrize("p", _CORPUS, ids=lambda p: getattr(p, "name", None))
def test_same_verdicts_as_tracing_every_size(p, monkeypatch):
    torch.manual_seed(0)
    target = _target(p)
    settled = _summary(p, *_export(p, target), target)
    with monkeypatch.context() as m:
        _tracing_every_size(m)
        traced = _summary(p, *_export(p, target), target)
    assert settled == traced


class Attention(nn.Module):
    """The shape of a transformers attention block: heads split with a view whose -1 eager
    cannot infer at batch 0 or sequence 0, and a Python decision on the sequence length
    (`q_length > 1`) made after it."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)

    def forward(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        q, k, v = (z.view(b, t, -1, 4).transpose(1, 2) for z in self.qkv(x).chunk(3, dim=-1))
        causal = t > 1 and mask is None
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :] > 0,
                                                             is_causal=causal)
        return self.out(y.transpose(1, 2).reshape(b, t, 16))


class DecidesFirst(nn.Module):
    """A decision that flips at size 0, then an operator that fails there: eager at 0 takes
    the other branch, so the operator's failure says nothing about size 0."""

    def forward(self, x):
        if x.shape[0] > 0:
            return x.view(x.shape[0], -1, 2).sum(1)
        return x.new_zeros(0, 2)


def _traces(caplog) -> int:
    found = [int(m.group(1)) for r in caplog.records
             if (m := re.search(r"traced the program (\d+) times", r.getMessage()))]
    assert found, "graphport.shapes reports the number of traces at DEBUG"
    return found[-1]


def _inputs(b, t):
    return torch.randn(b, t, 16), torch.ones(b, t, dtype=torch.long)


def test_attention_sizes_settled_with_fewer_traces(caplog, monkeypatch):
    torch.manual_seed(0)
    model = Attention().eval()
    spec = ({0: gp.Dim("b", max=32), 1: gp.Dim("t", max=32)},) * 2
    caplog.set_level(logging.DEBUG, logger="graphport.shapes")
    ep = gp.export(model, _inputs(2, 8), dynamic_shapes=spec)
    settled = _traces(caplog)
    with monkeypatch.context() as m:
        _tracing_every_size(m)
        baseline = gp.export(model, _inputs(2, 8), dynamic_shapes=spec)
    assert _traces(caplog) > settled
    assert {str(k): str(v) for k, v in ep.range_constraints.items()} == \
        {str(k): str(v) for k, v in baseline.range_constraints.items()}
    random.seed(1)
    sizes = [(0, 3), (3, 0), (1, 1), (1, 5), (5, 1), (2, 2)] + [(random.randint(0, 32), random.randint(0, 32))
                                                                for _ in range(6)]
    for b, t in sizes:
        args = _inputs(b, t)
        try:
            with torch.no_grad():
                want = model(*args)
        except RuntimeError:
            want = None
        for program in (ep, baseline):
            if want is None:   # eager fails: the program refuses the call, naming the size
                with pytest.raises(gp.InputGuardError, match="fails there"):
                    program.module()(*args)
            else:
                assert_same(program.module()(*args), want, exact=False, what=f"b={b}, t={t}", rtol=1e-4)


def test_failure_after_a_decision_flipping_there_is_not_claimed(caplog):
    caplog.set_level(logging.DEBUG, logger="graphport.shapes")
    x = torch.randn(4, 6)
    with pytest.raises(gp.ConstraintViolationError):   # at 0 eager returns zeros(0, 2): another program
        gp.export(DecidesFirst(), (x,), dynamic_shapes=({0: gp.Dim("n", max=16)},))
    assert _traces(caplog) >= 2   # size 0 traced: the operator's failure there settled nothing

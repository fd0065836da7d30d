"""Work the operator-by-operator proof of small sizes reuses (capture/pinned_metadata.py,
capture/local_proofs.py) gives what working it out afresh gives:

- a session's meta cache, kept between outcomes, brings each cached answer's own assumptions
  and guards into the outcome that uses it (and no one else's);
- a re-trace at a pinned size takes over the capture's outcomes only for calls that are the
  capture's at that size in every property of their description (operator, kind, layouts,
  dtype, device, requires_grad, the other arguments) and whose recorded metadata agrees;
- the size descriptions' memo tells a SymInt from a SymFloat of one expression.

Each program is also checked against eager at sizes 0, 1 and above."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import sympy
import torch

import graphport as gp
from graphport.capture import local_proofs, pinned_metadata
from graphport.capture.local_proofs import MetadataCall, TensorLayout
from graphport.capture.pinned_metadata import Outcome, TakenOver, _SessionCache
from graphport.shapes.env import Guard, ShapeEnv
from graphport.shapes.expr import ValueRange
from graphport.shapes.node import SymNode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ lives at the repo root

pytestmark = pytest.mark.filterwarnings("ignore:graphport:UserWarning")   # notes on refused small sizes


def _env_with(*names):
    env = ShapeEnv()
    return env, [env.create_symbol(4, ValueRange(0, 8), name, (0, i)) for i, name in enumerate(names)]


# -- the session's meta cache -----------------------------------------------------------------

def test_a_cached_answer_brings_its_own_assumptions_and_guards_and_no_one_elses():
    env, (n, m) = _env_with("n", "m")
    cache = _SessionCache(env)
    x = torch.empty(2, 3, device="meta")
    guard = Guard(sympy.Eq(n, m), None)

    def compute():
        env.assumed_min[n] = 2   # what this computation assumes, as ShapeEnv._decide records it
        env.guards.append(guard)
        return torch.empty(3, device="meta")

    env.assumed_min[m] = 2        # assumed by another computation of the same outcome, before
    cache.run("op", (x,), {}, compute)
    assert env.assumed_min == {n: 2, m: 2}
    assert env.guards == [guard]

    env.assumed_min.clear()       # the next outcome
    env.guards.clear()

    def must_not_run():
        raise AssertionError("the cached answer was not used")
    out = cache.run("op", (x,), {}, must_not_run)
    assert out.shape == (3,)
    assert env.assumed_min == {n: 2}   # its own assumption, not the other computation's
    assert env.guards == [guard]


def test_an_outer_computation_carries_what_the_cached_inner_one_assumed():
    env, (n,) = _env_with("n")
    cache = _SessionCache(env)
    x, y = torch.empty(2, device="meta"), torch.empty(4, device="meta")

    def inner():
        env.assumed_min[n] = 1
        return torch.empty(2, device="meta")
    cache.run("inner", (x,), {}, inner)
    env.assumed_min.clear()
    cache.run("outer", (y,), {}, lambda: cache.run("inner", (x,), {}, inner))   # the inner one hits
    env.assumed_min.clear()
    cache.run("outer", (y,), {}, lambda: pytest.fail("the outer answer was not cached"))
    assert env.assumed_min == {n: 1}


def test_a_session_that_records_a_guard_the_program_does_not_state_is_not_used_again(monkeypatch):
    model = Attention().eval()
    made, recorded = [], []
    original_init, original_same = pinned_metadata._Session.__init__, pinned_metadata._Session.same

    def init(self, *args):
        original_init(self, *args)
        made.append(self)

    def same(self, call, allowed):
        outcome = original_same(self, call, allowed)
        if not recorded:   # the first outcome records a guard no capture recorded
            self.env.guards.append(Guard(sympy.Eq(sympy.Symbol("unstated", integer=True), 3), None))
            self.spoiled = True
            recorded.append(self)
        return outcome
    monkeypatch.setattr(pinned_metadata._Session, "__init__", init)
    monkeypatch.setattr(pinned_metadata._Session, "same", same)
    ep = gp.export(model, (torch.randn(3, 5, 8),), dynamic_shapes=({0: gp.Dim("b", max=8)},))
    assert recorded
    again = [session for session in made if session.pins == recorded[0].pins and session is not recorded[0]]
    assert again and not any(g.rel.has(sympy.Symbol("unstated", integer=True)) for g in again[0].env.guards)
    for b in (0, 1, 2, 5):
        x = torch.randn(b, 5, 8)
        for got, expected in zip(ep.module()(x.clone()), model(x.clone())):
            torch.testing.assert_close(got, expected)


# -- a re-trace taking over the capture's outcomes ----------------------------------------------

def _layout(shape, stride, dtype=torch.float32, requires_grad=False, device="cpu"):
    size = lambda v: ("S", torch.SymInt, v) if isinstance(v, sympy.Basic) else v   # noqa: E731
    elements = sympy.Integer(1) + sum((s - 1) * t for s, t in zip(shape, stride))
    return TensorLayout(tuple(size(s) for s in shape), tuple(size(t) for t in stride), 0, size(elements), dtype,
                        torch.device(device), requires_grad)


def _call(args, kwargs=None, out=None, func=torch.ops.aten.sum.dim_IntList, kind="meta"):
    return MetadataCall(kind, func, args, kwargs or {}, out, frozenset(), None, frozenset())


def test_a_retrace_takes_over_an_outcome_only_for_the_same_call_at_its_pins():
    env, (b, s, c) = _env_with("b", "s", "c")
    one = sympy.Integer(1)
    x = _layout((b, s, 8), (8 * s, 8, 1))
    out = _layout((b, s), (s, 1))
    held = _call((x, [-1]), out=out)
    proven = Outcome(True, None, {})
    taken = TakenOver([(held, {b: one}, proven)], {s: one})   # the re-trace pins s = 1

    at_s1 = _layout((b, 1, 8), (8, 8, 1))
    same = _call((at_s1, [-1]), out=_layout((b, 1), (1, 1)))
    assert taken.outcome(same, {b: one}, set()) == proven
    # the recorded stride of a dimension of size 1 addresses nothing: it may differ
    assert taken.outcome(_call((at_s1, [-1]), out=_layout((b, 1), (1, 7))), {b: one}, set()) == proven

    differing = {
        "another dim": _call((at_s1, [0])),
        "a kwarg": _call((at_s1, [-1]), {"keepdim": True}),
        "dtype": _call((_layout((b, 1, 8), (8, 8, 1), dtype=torch.float64), [-1])),
        "requires_grad": _call((_layout((b, 1, 8), (8, 8, 1), requires_grad=True), [-1])),
        "device": _call((_layout((b, 1, 8), (8, 8, 1), device="meta"), [-1])),
        "strides": _call((_layout((b, 1, 8), (1, 8, b)), [-1])),
        "the operator": _call((at_s1, [-1]), func=torch.ops.aten.mean.dim),
        "the kind": _call((at_s1, [-1]), kind="view"),
        "a list for a tuple": _call((at_s1, (-1,))),
    }
    for what, call in differing.items():
        call.out = same.out
        assert taken.outcome(call, {b: one}, set()) is None, what
    # the same call, with other recorded metadata than the capture's there
    assert taken.outcome(_call((at_s1, [-1]), out=_layout((b, 2), (2, 1))), {b: one}, set()) is None
    assert taken.outcome(_call((at_s1, [-1]), out=_layout((b, 1), (1, 1), torch.float64)), {b: one}, set()) is None
    # other pins, or an assumption about a symbol this outcome may not assume anything about
    assert taken.outcome(same, {b: sympy.Integer(0)}, set()) is None
    assumed = TakenOver([(held, {b: one}, Outcome(True, None, {c: 2}))], {s: one})
    assert assumed.outcome(same, {b: one}, set()) is None
    assert assumed.outcome(same, {b: one}, {c}) is not None
    # an outcome that assumed something of a symbol the re-trace's session pins does not hold there
    assert assumed.outcome(same, {b: one, c: one}, {c}) is None
    # an outcome worked out with a tied size pinned too covers only sessions that pin it alike
    tied = TakenOver([(held, {b: one, c: one}, proven)], {s: one})
    assert tied.outcome(same, {b: one, c: one}, set()) == proven
    assert tied.outcome(same, {b: one}, set()) is None
    assert tied.outcome(same, {b: one, c: sympy.Integer(2)}, set()) is None


class Attention(torch.nn.Module):
    """A layer whose metadata assumes both sizes at least 2, with a Python decision on the
    sequence length (the way transformers picks a causal mask): the capture proves the batch's
    small sizes operator by operator, the re-trace at seq = 1 does again at seq = 1 for the
    combinations, taking the capture's outcomes over where they hold there. Pairs of calls
    differ in one property of their description: a dtype, a layout, a keyword."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, x):
        b, s, _ = x.shape
        scale = 2.0 if s > 1 else 2.0   # decided in Python: seq = 1 is traced again
        q, k, v = self.qkv(x).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / scale
        y = att.softmax(-1) @ v
        y = self.out(y.transpose(1, 2).reshape(b, s, 8))
        wide = y.double().sum(-1, keepdim=True).float() + y.sum(-1, keepdim=True)
        flipped = y.transpose(0, 1).contiguous().sum(-1).transpose(0, 1) + y.contiguous().sum(-1)
        return y * wide, flipped, y.int().sum(-1), y.sum(-1)


def _export_recording(monkeypatch, model, args, spec, plain: bool, kwargs=None):
    """The program, and every outcome each proof worked out or took over: by proof (in export's
    order), pins, call and symbols left open. `plain`: no cache between outcomes, nothing taken over."""
    outcomes, proofs = {}, []
    original_outcome, original_same = pinned_metadata.PinnedSessions.outcome, pinned_metadata._Session.same

    def outcome(self, call, pins, allowed):
        if not proofs or proofs[-1] is not self:
            proofs.append(self)
        found = original_outcome(self, call, pins, allowed)
        key = (len(proofs), frozenset(pins.items()), call.kind, str(call.func),
               local_proofs._hashable((call.args, call.kwargs)), frozenset(allowed))
        outcomes[key] = (found.same, found.assumed)
        return found

    def same(self, call, allowed):
        self.rec.meta_cache.entries.clear()
        return original_same(self, call, allowed)
    with monkeypatch.context() as patch:
        patch.setattr(pinned_metadata.PinnedSessions, "outcome", outcome)
        if plain:
            patch.setattr(pinned_metadata._Session, "same", same)
            patch.setattr(pinned_metadata.ProvenOutcomes, "pinned", lambda self, pins: None)
        ep = gp.export(model, args, kwargs, dynamic_shapes=spec)
    return ep, outcomes


def _taken_over(monkeypatch) -> list:
    taken = []
    original = TakenOver.outcome

    def counting(self, call, pins, allowed):
        found = original(self, call, pins, allowed)
        if found is not None:
            taken.append(call)
        return found
    monkeypatch.setattr(TakenOver, "outcome", counting)
    return taken


def test_reused_work_gives_the_program_and_the_outcomes_worked_out_afresh(monkeypatch):
    model = Attention().eval()
    spec = ({0: gp.Dim("b", max=8), 1: gp.Dim("s", max=8)},)
    args = (torch.randn(3, 5, 8),)
    plain, worked_out = _export_recording(monkeypatch, model, args, spec, plain=True)
    taken = _taken_over(monkeypatch)
    reused, outcomes = _export_recording(monkeypatch, model, args, spec, plain=False)
    assert taken, "the re-trace at s = 1 took nothing over: the test does not reach the path it checks"
    assert reused.shape_contract == plain.shape_contract
    assert str(reused.graph) == str(plain.graph)
    for key, (same, assumed) in outcomes.items():
        assert worked_out[key][0] == same, key
        if same:   # taken over: an assumption the capture needed and the re-trace may not
            assert all(assumed.get(s, 0) >= least for s, least in worked_out[key][1].items()) or \
                all(worked_out[key][1].get(s, 0) >= least for s, least in assumed.items()), key
    for b, s in itertools.product((0, 1, 2, 3), (0, 1, 2, 5)):
        x = torch.randn(b, s, 8)
        try:
            got = reused.module()(x.clone())
        except gp.InputMismatchError:
            with pytest.raises(Exception):   # refused only where eager fails too
                model(x.clone())
            continue
        for g, e in zip(got, model(x.clone())):
            torch.testing.assert_close(g, e)


@pytest.mark.parametrize("style", ["max", "auto"])
def test_a_zoo_decoder_reuses_work_and_keeps_its_contract(monkeypatch, style):
    from bench import export_ab
    model, args, kwargs, spec_for = export_ab.model_with_spec("t5", style)
    spec = spec_for(gp)
    plain, worked_out = _export_recording(monkeypatch, model, args, spec, plain=True, kwargs=kwargs)
    taken = _taken_over(monkeypatch)
    reused, outcomes = _export_recording(monkeypatch, model, args, spec, plain=False, kwargs=kwargs)
    assert taken
    assert reused.shape_contract == plain.shape_contract
    assert all(worked_out[key][0] == same for key, (same, _) in outcomes.items())


def test_calls_differing_only_in_a_python_scalars_type_are_proven_each(monkeypatch):
    """True, 1 and 1.0 are one dict key; added to a bool tensor they give three dtypes."""
    settled = []
    original = local_proofs.DeferredAssumptions.settle

    def settle(self, *args, **kwargs):
        settled.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(local_proofs.DeferredAssumptions, "settle", settle)

    def f(x):
        y = x.t()   # a layout whose sizes of 1 the pointwise metadata asks about
        return y + True, y + 1, y + 1.0
    ep = gp.export(f, (torch.zeros(3, 4, dtype=torch.bool),), dynamic_shapes=({0: gp.Dim("n", max=8)},))
    adds = [(type(c.args[1]), c.out.dtype) for c in settled[0].calls.values() if c.func == torch.ops.aten.add.Tensor]
    assert adds == [(bool, torch.bool), (int, torch.int64), (float, torch.float32)]
    for n in (0, 1, 2, 5):
        x = torch.rand(n, 4) > 0.5
        for got, expected in zip(ep.module()(x), f(x)):
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)


# -- the size descriptions' memo ---------------------------------------------------------------

def test_the_described_sizes_memo_tells_an_int_from_a_float_of_one_expression():
    env, (n,) = _env_with("n")
    memo = {}
    as_int = torch.SymInt(SymNode(2 * n, env, int))
    as_float = torch.SymFloat(SymNode(2 * n, env, float))
    assert local_proofs._describe(as_int, env, memo) == ("S", torch.SymInt, 2 * n)
    assert local_proofs._describe(as_float, env, memo) == ("S", torch.SymFloat, 2 * n)
    assert local_proofs._describe([as_int, as_float], env, memo) == [("S", torch.SymInt, 2 * n),
                                                                      ("S", torch.SymFloat, 2 * n)]


def test_the_described_sizes_memo_follows_the_envs_replacements():
    env, (n, m) = _env_with("n", "m")
    memo = {}
    size = torch.SymInt(SymNode(n + m, env, int))
    assert local_proofs._describe(size, env, memo) == ("S", torch.SymInt, n + m)
    env.replacements[m] = n   # a guard n == m, as ShapeEnv._replace records it
    assert local_proofs._describe(size, env, memo) == ("S", torch.SymInt, 2 * n)

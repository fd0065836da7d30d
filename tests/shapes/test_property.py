"""Property tests: a program exported with dynamic dims answers like eager for every
shape inside the declared ranges, and refuses every shape outside them with a
graphport error (never a wrong answer, never another exception type)."""
from __future__ import annotations

import dataclasses
from typing import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import graphport as gp

from .helpers import assert_matches_eager, assert_same_range_constraints, torch_export

# no shrinking: a failure is reported as drawn, so a failing property stays fast
SETTINGS = settings(deadline=None, max_examples=25, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

LO, HI = 2, 16    # every Dim here: Dim(name, min=2, max=16)


# ---------------------------------------------------------------------------- programs

def elementwise(x, y):
    return (x * y).sigmoid() + x.relu() - y.abs().sqrt()


def matmul(a, b):
    return (a @ b).tanh()


def cat_rows(x, y):
    z = torch.cat([x, y], dim=0)
    return z.softmax(0), z.sum(0)


def reshape_arith(x, w):
    b, s, d = x.shape
    flat = x.view(b * s, d) @ w
    return flat.view(b, s, -1).mean(1), x.reshape(x.shape[0], -1).sum(-1)


class Block(nn.Module):
    """Pre-norm attention + MLP block with a causal mask built from the dynamic seq dim."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


BLOCK = Block().eval()


@dataclasses.dataclass
class Prog:
    fn: Callable
    dims: tuple                      # names of the dims, each in [LO, HI]
    make: Callable                   # dict dim -> size  ->  args
    spec: Callable                   # (api, dim name -> Dim) -> dynamic_shapes
    example: dict
    # (dims values) -> args that break a relation the program needs (None: no relation)
    unrelated: Callable | None = None


def r(*shape):
    return torch.randn(*shape)


PROGS = {
    "elementwise": Prog(elementwise, ("b", "f"), lambda d: (r(d["b"], d["f"]), r(d["b"], d["f"])),
                        lambda D: {"x": {0: D["b"], 1: D["f"]}, "y": {0: D["b"], 1: D["f"]}},
                        {"b": 4, "f": 6},
                        lambda d: (r(d["b"], d["f"]), r(d["b"] + 1, d["f"]))),
    "matmul_shared_inner": Prog(matmul, ("m", "k", "n"), lambda d: (r(d["m"], d["k"]), r(d["k"], d["n"])),
                                lambda D: {"a": {0: D["m"], 1: D["k"]}, "b": {0: D["k"], 1: D["n"]}},
                                {"m": 3, "k": 5, "n": 4},
                                lambda d: (r(d["m"], d["k"]), r(d["k"] + 1, d["n"]))),
    "cat_dynamic_dim": Prog(cat_rows, ("a", "c", "f"), lambda d: (r(d["a"], d["f"]), r(d["c"], d["f"])),
                            lambda D: {"x": {0: D["a"], 1: D["f"]}, "y": {0: D["c"], 1: D["f"]}},
                            {"a": 3, "c": 5, "f": 4},
                            lambda d: (r(d["a"], d["f"]), r(d["c"], d["f"] + 1))),
    "reshape_symbolic": Prog(reshape_arith, ("b", "s"), lambda d: (r(d["b"], d["s"], 8), r(8, 5)),
                             lambda D: {"x": {0: D["b"], 1: D["s"]}, "w": None},
                             {"b": 3, "s": 5}),
    "transformer_block": Prog(BLOCK, ("batch", "seq"), lambda d: (r(d["batch"], d["seq"], 16),),
                              lambda D: {"x": {0: D["batch"], 1: D["seq"]}},
                              {"batch": 2, "seq": 7}),
}

_EXPORTED: dict = {}


def _dims(api, prog):
    return {n: api.Dim(n, min=LO, max=HI) for n in prog.dims}


def _exported(name):
    if name not in _EXPORTED:
        prog = PROGS[name]
        _EXPORTED[name] = gp.export(prog.fn, prog.make(prog.example), dynamic_shapes=prog.spec(_dims(gp, prog)))
    return _EXPORTED[name]


def inside(prog):
    return st.fixed_dictionaries({n: st.integers(LO, HI) for n in prog.dims})


def outside(prog):
    """All dims in range but one, which is 0, 1 or above the max."""
    return st.tuples(inside(prog), st.sampled_from(prog.dims),
                     st.one_of(st.integers(0, LO - 1), st.integers(HI + 1, 3 * HI)))


@pytest.mark.parametrize("name", sorted(PROGS))
def test_torch_export_accepts_the_spec(name):
    prog = PROGS[name]
    args = prog.make(prog.example)
    ref = torch_export(prog.fn, args, dynamic_shapes=prog.spec(_dims(torch.export, prog)))
    assert_same_range_constraints(_exported(name), ref)


@pytest.mark.parametrize("name", sorted(PROGS))
def test_inside_the_ranges_matches_eager(name):
    prog = PROGS[name]
    ep = _exported(name)
    module = ep.module()

    @SETTINGS
    @given(sizes=inside(prog))
    def check(sizes):
        torch.manual_seed(sum(sizes.values()))
        assert_matches_eager(ep, prog.fn, prog.make(sizes), what=f"at {sizes}", module=module)
    check()


@pytest.mark.parametrize("name", sorted(PROGS))
def test_outside_the_ranges_is_refused(name):
    prog = PROGS[name]
    module = _exported(name).module()

    @SETTINGS
    @given(case=outside(prog))
    def check(case):
        sizes, which, bad = case
        sizes = {**sizes, which: bad}
        try:
            out = module(*prog.make(sizes))
        except gp.GraphportError:
            return
        raise AssertionError(f"{which}={bad} is outside [{LO}, {HI}] but the program ran and returned "
                             f"{type(out).__name__}")
    check()


@pytest.mark.parametrize("name", sorted(n for n, p in PROGS.items() if p.unrelated))
def test_broken_relation_is_refused(name):
    prog = PROGS[name]
    module = _exported(name).module()

    @SETTINGS
    @given(sizes=st.fixed_dictionaries({n: st.integers(LO, HI - 1) for n in prog.dims}))
    def check(sizes):
        with pytest.raises(gp.GraphportError):
            module(*prog.unrelated(sizes))
    check()


# ---------------------------------------------------------------------------- Dim.AUTO guards

# Dim.AUTO programs whose guards are not ranges (divisibility, equalities): every size is
# either answered like eager or refused with a graphport error, and sizes that satisfy
# the guard run.
AUTO_PROGS = {
    # n = 2 makes the inferred size 1: torch.export refuses it too (guard x.size()[0] != 2)
    "unflatten_pairs": (lambda x: x.unflatten(0, (2, -1)).sum(1), lambda n: n % 2 == 0 and n != 2),
    "reshape_pairs": (lambda x: x[:, :3].reshape(-1, 2), lambda n: n % 2 == 0),
    "pad_to_multiple_of_8": (lambda x: F.pad(x, (0, 0, 0, (8 - x.shape[0] % 8) % 8)), lambda n: True),
    "view_threes": (lambda x: x.view(-1, 3) * 2, lambda n: n % 3 == 0),
}


@pytest.mark.parametrize("name", sorted(AUTO_PROGS))
def test_dim_auto_guards_hold_at_every_size(name):
    fn, runs = AUTO_PROGS[name]
    ep = gp.export(fn, (torch.randn(6, 4),), dynamic_shapes={"x": {0: gp.Dim.AUTO, 1: gp.Dim.STATIC}})
    module = ep.module()

    @SETTINGS
    @given(n=st.integers(2, 40))
    def check(n):
        x = torch.randn(n, 4)
        try:
            got = module(x.clone())
        except gp.GraphportError:
            assert not runs(n), f"size {n} satisfies the program's guards but was refused"
            return
        assert_matches_eager(ep, fn, (x,), what=f"at size {n}", module=module)
        del got
    check()


# ---------------------------------------------------------------------------- masked attention

class MaskedBlock(Block):
    def forward(self, x, keep):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        mask = keep[:, None, None, :] & torch.ones(s, s, dtype=torch.bool).tril()
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + self.proj(att.transpose(1, 2).reshape(b, s, d))


MASKED = MaskedBlock().eval()


def _masked_args(b, s, keep_s=None, keep_b=None):
    keep = torch.ones(keep_b or b, keep_s or s, dtype=torch.bool)
    keep[:, 0] = True
    keep[0, s // 2:] = False
    return torch.randn(b, s, 16), keep


def _masked_spec(api):
    b, s = api.Dim("batch", min=LO, max=HI), api.Dim("seq", min=LO, max=HI)
    return {"x": {0: b, 1: s}, "keep": {0: b, 1: s}}


@pytest.fixture(scope="module")
def masked():
    args = _masked_args(3, 6)
    ref = torch_export(MASKED, args, dynamic_shapes=_masked_spec(torch.export))
    ep = gp.export(MASKED, args, dynamic_shapes=_masked_spec(gp))
    assert_same_range_constraints(ep, ref)
    return ep


def test_masked_block_matches_eager_in_range(masked):
    module = masked.module()

    @SETTINGS
    @given(b=st.integers(LO, HI), s=st.integers(LO, HI))
    def check(b, s):
        torch.manual_seed(b * 100 + s)
        assert_matches_eager(masked, MASKED, _masked_args(b, s), what=f"at batch {b}, seq {s}", module=module)
    check()


def test_masked_block_refuses_a_mask_of_another_shape(masked):
    module = masked.module()

    @SETTINGS
    @given(b=st.integers(LO, HI), s=st.integers(LO, HI), db=st.integers(-1, 1), ds=st.integers(-1, 1))
    def check(b, s, db, ds):
        if (db, ds) == (0, 0) or not (LO <= b + db and LO <= s + ds):
            return
        with pytest.raises(gp.GraphportError):
            module(*_masked_args(b, s, keep_b=b + db, keep_s=s + ds))
    check()


# ---------------------------------------------------------------------------- sizes 0 and 1

def symbolic_float(x, y):
    """Sizes used as floats: scaled by n / 2 and by 1 / sqrt(f), computed at run time."""
    return x * (x.shape[0] / 2) + (y / y.shape[1] ** 0.5).sum(1, keepdim=True)


PROGS["symbolic_float"] = Prog(symbolic_float, ("b", "f"), lambda d: (r(d["b"], d["f"]), r(d["b"], d["f"])),
                               lambda D: {"x": {0: D["b"], 1: D["f"]}, "y": {0: D["b"], 1: D["f"]}},
                               {"b": 4, "f": 6})


@pytest.mark.parametrize("name", sorted(PROGS))
def test_sizes_zero_and_one_answer_like_eager_or_were_reported(name):
    """With every Dim declared from 0, each dim at 0 and at 1 (the others at random sizes in
    range, small ones included) answers like eager, raises where eager raises, or is refused
    at call time only where the export said so in its shape report."""
    prog = PROGS[name]
    dims = {n: gp.Dim(n, min=0, max=HI) for n in prog.dims}
    ep = gp.export(prog.fn, prog.make(prog.example), dynamic_shapes=prog.spec(dims))
    module = ep.module()

    @SETTINGS
    @given(sizes=st.fixed_dictionaries({n: st.integers(0, HI) for n in prog.dims}),
           which=st.sampled_from(prog.dims), small=st.sampled_from([0, 1]))
    def check(sizes, which, small):
        sizes = {**sizes, which: small}
        args = prog.make(sizes)
        try:
            want = prog.fn(*args)
        except Exception:
            with pytest.raises(Exception):
                module(*args)
            return
        try:
            got = module(*args)
        except gp.InputMismatchError as e:
            assert any(n in note for note in ep.shape_report for n, v in sizes.items() if v in (0, 1)), (
                f"{sizes} is inside the declared ranges and eager answers, but the call was refused without "
                f"the export reporting it: {e}")
            return
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, equal_nan=True)
    check()

"""The seed examples of issue 3 (symbolic shapes), each checked against torch.export."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import graphport as gp

from .helpers import (
    assert_matches_eager,
    assert_names_location,
    assert_same_range_constraints,
    canonical_range_constraints,
    suggested_fixes,
    torch_export,
    torch_fix_message,
)


# how a message may name dimension 0 of an input: x.shape[0], x.size(0), dim 0, dimension 0
DIM0 = re.compile(r"shape\[0\]|size\(\)\[0\]|size\(0\)|\bdim(ension)? 0\b")


# ---------------------------------------------------------------------------- (a) shared batch dim

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 8)
        self.b = nn.Linear(128, 8)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


def test_shared_batch_dim_prints_one_name_and_runs_at_other_batches():
    model = TwoHeads().eval()
    args = (torch.randn(4, 64), torch.randn(4, 128))
    batch = gp.Dim("batch", max=64)
    ep = gp.export(model, args, dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    text = str(ep)
    # one symbol for both inputs, printed with the Dim's name as the viewer and the CLI show it
    assert re.search(r'\bx: "f32\[batch, 64\]"', text), text
    assert re.search(r'\by: "f32\[batch, 128\]"', text), text
    assert "Range constraints: {batch: VR[0, 64]}" in text, text

    ref = torch_export(model, args, dynamic_shapes={"x": {0: torch.export.Dim("batch", max=64)},
                                                    "y": {0: torch.export.Dim("batch", max=64)}})
    assert_same_range_constraints(ep, ref)
    for n in (3, 7, 64):
        assert_matches_eager(ep, model, (torch.randn(n, 64), torch.randn(n, 128)), what=f"at batch {n}")


# ---------------------------------------------------------------------------- (b) derived dim

def x_plus_y_tail(x, y):
    return x + y[1:]


def _derived_spec(api):
    dimx = api.Dim("dimx", min=3, max=6)
    dimy = dimx + 1
    return {"x": {0: dimx}, "y": {0: dimy}}


@pytest.fixture(scope="module")
def derived():
    args = (torch.randn(5, 2), torch.randn(6, 2))
    return gp.export(x_plus_y_tail, args, dynamic_shapes=_derived_spec(gp)), args


def test_derived_dim_range_constraints_equal_torch_export(derived):
    ep, args = derived
    ref = torch_export(x_plus_y_tail, args, dynamic_shapes=_derived_spec(torch.export))
    # torch.export: {s77: VR[3, 6], s77 + 1: VR[4, 7]}
    import sympy
    x0 = sympy.Symbol("in0_d0")
    assert canonical_range_constraints(ref) == {x0: (3, 6), x0 + 1: (4, 7)}
    assert_same_range_constraints(ep, ref)
    assert re.fullmatch(r"\{s0: VR\[3, 6\], s0 \+ 1: VR\[4, 7\]\}", str(ep.range_constraints)), \
        str(ep.range_constraints)


@pytest.mark.parametrize("n", range(3, 7))
def test_derived_dim_matches_eager_for_every_size_in_range(derived, n):
    ep, _ = derived
    assert_matches_eager(ep, x_plus_y_tail, (torch.randn(n, 2), torch.randn(n + 1, 2)), what=f"at x {n}")


@pytest.mark.parametrize("n", [1, 2, 7, 8, 100])
def test_derived_dim_refuses_sizes_outside_range(derived, n):
    ep, _ = derived
    with pytest.raises(gp.InputMismatchError) as info:
        ep.module()(torch.randn(n, 2), torch.randn(n + 1, 2))
    msg = str(info.value)
    assert re.search(r"\bx\b", msg), msg
    assert str(n) in msg, msg
    assert DIM0.search(msg), f"the message should name dimension 0:\n{msg}"
    assert "3" in msg and "6" in msg, f"the message should give the range [3, 6]:\n{msg}"


@pytest.mark.parametrize("nx,ny", [(5, 5), (5, 7), (4, 6), (6, 6)])
def test_derived_dim_refuses_y_not_x_plus_1(derived, nx, ny):
    ep, _ = derived
    with pytest.raises(gp.InputMismatchError) as info:
        ep.module()(torch.randn(nx, 2), torch.randn(ny, 2))
    msg = str(info.value)
    assert re.search(r"\by\b", msg), msg
    assert str(ny) in msg and str(nx + 1) in msg, f"expected {nx + 1} and actual {ny} should be named:\n{msg}"
    assert DIM0.search(msg), f"the message should name dimension 0:\n{msg}"


# ---------------------------------------------------------------------------- (c) narrowing guard

class Branchy(nn.Module):
    def forward(self, x, y):
        if x.shape[0] <= 1024:  # THE-GUARD
            return x + y
        return x - y


def _same_dim_spec(api, **bounds):
    s = api.Dim("s", **bounds)
    return {"x": {0: s}, "y": {0: s}}


def _xy(n, m=None):
    return torch.randn(n, 4), torch.randn(n if m is None else m, 4)


@pytest.fixture(scope="module")
def bounded():
    return gp.export(Branchy(), _xy(1024), dynamic_shapes=_same_dim_spec(gp, max=1024))


def test_bounded_guard_exports_like_torch_export(bounded):
    ref = torch_export(Branchy(), _xy(1024), dynamic_shapes=_same_dim_spec(torch.export, max=1024))
    assert_same_range_constraints(bounded, ref)


@pytest.mark.parametrize("n", [2, 17, 1024])
def test_bounded_guard_runs_in_range(bounded, n):
    assert_matches_eager(bounded, Branchy(), _xy(n), what=f"at {n}")


def test_bounded_guard_refuses_2048(bounded):
    with pytest.raises(gp.InputMismatchError) as info:
        bounded.module()(*_xy(2048))
    msg = str(info.value)
    assert "2048" in msg and "1024" in msg, msg
    assert re.search(r"\bx\b", msg), msg


def test_bounded_guard_refuses_mismatched_x_and_y(bounded):
    with pytest.raises(gp.InputMismatchError) as info:
        bounded.module()(*_xy(1024, 2048))
    msg = str(info.value)
    assert "2048" in msg and "1024" in msg, msg
    assert re.search(r"\by\b", msg), msg


def test_unbounded_dim_is_a_constraint_violation_naming_the_if():
    with pytest.raises(torch._dynamo.exc.UserError) as ref:
        torch_export(Branchy(), _xy(1024), dynamic_shapes=_same_dim_spec(torch.export))
    assert "s = Dim('s', max=1024)" in suggested_fixes(torch_fix_message(ref.value))

    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(Branchy(), _xy(1024), dynamic_shapes=_same_dim_spec(gp))
    msg = str(info.value)
    assert_names_location(msg, __file__, "# THE-GUARD")
    assert "s = Dim('s', max=1024)" in suggested_fixes(msg), msg


def test_suggested_fix_applied_exports_and_runs():
    spec = _same_dim_spec(gp)
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(Branchy(), _xy(1024), dynamic_shapes=spec)
    fixed = gp.refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    assert fixed["x"][0].max == fixed["y"][0].max == 1024, fixed
    ep = gp.export(Branchy(), _xy(1024), dynamic_shapes=fixed)
    for n in (5, 1024):
        assert_matches_eager(ep, Branchy(), _xy(n), what=f"at {n}")
    with pytest.raises(gp.InputMismatchError):
        ep.module()(*_xy(1025))

    # torch.export's own refinement of the same message, as the oracle
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes
    tspec = _same_dim_spec(torch.export)
    with pytest.raises(torch._dynamo.exc.UserError) as ref:
        torch_export(Branchy(), _xy(1024), dynamic_shapes=tspec)
    tfixed = refine_dynamic_shapes_from_suggested_fixes(torch_fix_message(ref.value), tspec)
    assert_same_range_constraints(ep, torch_export(Branchy(), _xy(1024), dynamic_shapes=tfixed))

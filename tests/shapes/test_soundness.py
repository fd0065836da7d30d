"""Soundness of symbolic capture: guards that contradict the user's spec are
ConstraintViolationErrors (every violation, each at its source line, with suggested
fixes); Dim.AUTO specializes or relates instead; programs torch.export accepts or refuses,
graphport accepts or refuses too; an accepted program never gives a wrong answer.
"""
from __future__ import annotations

import logging
import operator
import re
import warnings

import pytest
import torch

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

HERE = __file__


# ---------------------------------------------------------------------------- programs

def narrow_max(x):
    if x.shape[0] <= 1024:  # GUARD-narrow-max
        return x + 1
    return x - 1


def narrow_min(x):
    if x.shape[0] > 5:  # GUARD-narrow-min
        return x + 1
    return x - 1


# The same guards where the sides return different structures: no cond can join them, so a
# bounded range (where export would otherwise capture both sides as a cond) is still refused.
def narrow_max_unjoinable(x):
    if x.shape[0] <= 1024:  # GUARD-max-unjoinable
        return x + 1
    return x - 1, x


def narrow_min_unjoinable(x):
    if x.shape[0] > 5:  # GUARD-min-unjoinable
        return x + 1
    return x - 1, x


def view_fixed(x):
    return x.view(3, -1)  # GUARD-view


def reshape_fixed(x):
    return x.reshape(3, 4)  # GUARD-reshape


def int_of_size(x):
    n = int(x.shape[0])  # GUARD-int
    return x * n


def equals_eight(x):
    if x.shape[0] == 8:  # GUARD-eq8
        return x + 1
    return x


def add_xy(x, y):
    return x + y  # GUARD-tie


def add_three(x, y, z):
    return x + y + z  # GUARD-tie3


def square_plus_transpose(x):
    return x + x.transpose(0, 1)  # GUARD-transpose


def matmul(a, b):
    return a @ b  # GUARD-matmul


def is_even(x):
    if x.shape[0] % 2 == 0:  # GUARD-even
        return x + 1
    return x


def two_narrowings(x, y):
    if x.shape[0] <= 1024:  # GUARD-two-1
        x = x + 1
    if y.shape[1] > 4:  # GUARD-two-2
        y = y * 2
    return x.sum() + y.sum()


def tie_and_narrow(x, y):
    if x.shape[0] <= 1024:  # GUARD-tn-1
        x = x + 1
    return x[:, :1] + y[:, :1]  # GUARD-tn-2


def not_one(x):
    if x.shape[0] != 1:
        return x + 1
    return x


def elementwise(x):
    return x * 2


X8 = torch.randn(8, 4)


def _d(api, name="s", **kw):
    return api.Dim(name, **kw)


# name: (fn, args, spec(api), torch's suggested fixes, markers of the guard lines)
REFUSED = {
    "narrow_max": (narrow_max, (X8,), lambda api: {"x": {0: _d(api)}},
                   ["s = Dim('s', max=1024)"], ["GUARD-narrow-max"]),
    "narrow_min": (narrow_min_unjoinable, (X8,), lambda api: {"x": {0: _d(api, min=2, max=100)}},
                   ["s = Dim('s', min=6, max=100)"], ["GUARD-min-unjoinable"]),
    "narrow_min_default_min": (narrow_min, (X8,), lambda api: {"x": {0: _d(api)}},
                               ["s = Dim('s', min=6)"], ["GUARD-narrow-min"]),
    "narrow_max_below_declared_max": (narrow_max_unjoinable, (X8,), lambda api: {"x": {0: _d(api, max=2000)}},
                                      ["s = Dim('s', max=1024)"], ["GUARD-max-unjoinable"]),
    "view_fixes_dim": (view_fixed, (torch.randn(3, 4),), lambda api: {"x": {0: _d(api)}},
                       ["s = 3"], ["GUARD-view"]),
    "reshape_fixes_dim": (reshape_fixed, (torch.randn(3, 4),), lambda api: {"x": {0: _d(api)}},
                          ["s = 3"], ["GUARD-reshape"]),
    "int_of_size": (int_of_size, (torch.randn(3, 4),), lambda api: {"x": {0: _d(api)}},
                    ["s = 3"], ["GUARD-int"]),
    "equals_constant": (equals_eight, (X8,), lambda api: {"x": {0: _d(api)}},
                        ["s = 8"], ["GUARD-eq8"]),
    "tie_two_inputs": (add_xy, (X8, X8.clone()), lambda api: {"x": {0: _d(api, "a")}, "y": {0: _d(api, "b")}},
                       ["b = a"], ["GUARD-tie"]),
    "tie_three_inputs": (add_three, (X8, X8.clone(), X8.clone()),
                         lambda api: {"x": {0: _d(api, "a")}, "y": {0: _d(api, "b")}, "z": {0: _d(api, "c")}},
                         ["b = a", "c = a"], ["GUARD-tie3"]),
    "tie_two_dims_of_one_input": (square_plus_transpose, (torch.randn(4, 4),),
                                  lambda api: {"x": {0: _d(api, "a"), 1: _d(api, "b")}},
                                  ["b = a"], ["GUARD-transpose"]),
    "tie_matmul_inner_dims": (matmul, (torch.randn(3, 5), torch.randn(5, 2)),
                              lambda api: {"a": {1: _d(api, "k")}, "b": {0: _d(api, "k2")}},
                              ["k2 = k"], ["GUARD-matmul"]),
    "tie_with_static_input": (add_xy, (X8, X8.clone()), lambda api: {"x": {0: _d(api, "a")}, "y": None},
                              ["a = 8"], ["GUARD-tie"]),
    "two_narrowings": (two_narrowings, (torch.randn(3, 4), torch.randn(3, 5)),
                       lambda api: {"x": {0: _d(api, "a")}, "y": {0: _d(api, "b"), 1: _d(api, "c", min=2, max=50)}},
                       ["a = Dim('a', max=1024)", "c = Dim('c', min=5, max=50)"], ["GUARD-two-1", "GUARD-two-2"]),
    "tie_and_narrow": (tie_and_narrow, (torch.randn(3, 4), torch.randn(3, 5)),
                       lambda api: {"x": {0: _d(api, "a")}, "y": {0: _d(api, "b"), 1: _d(api, "c")}},
                       ["a = Dim('a', max=1024)", "b = a"], ["GUARD-tn-1", "GUARD-tn-2"]),
}


def _export_refused(fn, args, spec):
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(fn, args, dynamic_shapes=spec)
    return str(info.value)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_torch_export_refuses_with_these_fixes(name):
    fn, args, spec, fixes, _ = REFUSED[name]
    with pytest.raises(Exception) as info:
        torch_export(fn, args, dynamic_shapes=spec(torch.export))
    msg = torch_fix_message(info.value)
    assert "Constraints violated" in msg, msg
    assert sorted(suggested_fixes(msg)) == sorted(fixes), msg


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_constraint_violation_lists_every_guard_with_its_line_and_fixes(name):
    fn, args, spec, fixes, markers = REFUSED[name]
    msg = _export_refused(fn, args, spec(gp))
    for marker in markers:
        assert_names_location(msg, HERE, f"# {marker}")
    got = suggested_fixes(msg)
    for fix in fixes:
        if re.fullmatch(r"(\w+) = (\w+)", fix):            # "b = a": either direction is a fix
            a, b = fix.split(" = ")
            assert fix in got or f"{b} = {a}" in got, f"expected {fix!r} in the suggested fixes:\n{msg}"
        else:
            assert fix in got, f"expected {fix!r} in the suggested fixes:\n{msg}"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_suggested_fixes_refine_into_a_spec_that_exports(name):
    fn, args, spec_of, _, _ = REFUSED[name]
    spec = spec_of(gp)
    msg = _export_refused(fn, args, spec)
    fixed = gp.refine_dynamic_shapes_from_suggested_fixes(msg, spec)
    ep = gp.export(fn, args, dynamic_shapes=fixed)
    assert_matches_eager(ep, fn, args, what="after applying the suggested fixes")

    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes
    tspec = spec_of(torch.export)
    with pytest.raises(Exception) as info:
        torch_export(fn, args, dynamic_shapes=tspec)
    ref = torch_export(fn, args, dynamic_shapes=refine_dynamic_shapes_from_suggested_fixes(
        torch_fix_message(info.value), tspec))
    assert_same_range_constraints(ep, ref, small_sizes_proven="is inside its declared range" in msg)


def test_tie_error_says_the_dims_must_be_the_same():
    msg = _export_refused(add_xy, (X8, X8.clone()), {"x": {0: gp.Dim("a")}, "y": {0: gp.Dim("b")}})
    assert re.search(r"\ba\b", msg) and re.search(r"\bb\b", msg), msg
    assert "equal" in msg.lower() or "same" in msg.lower(), msg


def test_multiple_violations_are_all_in_one_message():
    msg = _export_refused(two_narrowings, (torch.randn(3, 4), torch.randn(3, 5)),
                          {"x": {0: gp.Dim("a")}, "y": {0: gp.Dim("b"), 1: gp.Dim("c", min=2, max=50)}})
    body = msg.split("Suggested fixes:")[0]
    assert re.search(r"\ba\b", body) and re.search(r"\bc\b", body), msg
    assert len(suggested_fixes(msg)) == 2, msg


# ---------------------------------------------------------------------------- Dim.AUTO

# name: (fn, example args, spec, [(inputs that run)], [inputs refused])
AUTO = {
    "narrow_min": (narrow_min, (X8,), {"x": {0: "AUTO"}}, [(torch.randn(6, 4),), (torch.randn(40, 4),)],
                   [(torch.randn(5, 4),), (torch.randn(2, 4),)]),
    "narrow_max": (narrow_max, (X8,), {"x": {0: "AUTO"}}, [(torch.randn(1024, 4),), (torch.randn(3, 4),)],
                   [(torch.randn(1025, 4),)]),
    "reshape_specializes": (reshape_fixed, (torch.randn(3, 4),), {"x": {0: "AUTO"}}, [(torch.randn(3, 4),)],
                            [(torch.randn(4, 4),)]),
    "int_specializes": (int_of_size, (torch.randn(3, 4),), {"x": {0: "AUTO"}}, [(torch.randn(3, 4),)],
                        [(torch.randn(5, 4),)]),
    "equals_constant": (equals_eight, (X8,), {"x": {0: "AUTO"}}, [(torch.randn(8, 4),)], [(torch.randn(9, 4),)]),
    "ties_relate": (add_xy, (X8, X8.clone()), {"x": {0: "AUTO"}, "y": {0: "AUTO"}},
                    [(torch.randn(5, 4), torch.randn(5, 4))], [(torch.randn(5, 4), torch.randn(6, 4))]),
    "transpose_relates": (square_plus_transpose, (torch.randn(4, 4),), {"x": {0: "AUTO", 1: "AUTO"}},
                          [(torch.randn(6, 6),)], [(torch.randn(6, 5),)]),
    "even": (is_even, (X8,), {"x": {0: "AUTO"}}, [(torch.randn(10, 4),)], [(torch.randn(7, 4),)]),
}


def _auto(api, spec):
    return {k: {d: getattr(api.Dim, v) for d, v in dims.items()} for k, dims in spec.items()}


@pytest.mark.parametrize("name", sorted(AUTO))
def test_dim_auto_specializes_or_relates_like_torch_export(name):
    fn, args, spec, ok, refused = AUTO[name]
    ref = torch_export(fn, args, dynamic_shapes=_auto(torch.export, spec))
    ep = gp.export(fn, args, dynamic_shapes=_auto(gp, spec))
    assert_same_range_constraints(ep, ref, hint_dims=True)
    for inputs in (args, *ok):
        assert_matches_eager(ep, fn, inputs)
    for inputs in refused:
        with pytest.raises(gp.InputMismatchError):
            ep.module()(*inputs)


def test_dim_auto_range_constraints_values():
    """What torch.export 2.13 records (modulo renaming), and what graphport records: the same
    narrowings, but from 0 where the program is proven valid at 0 and 1 (torch.export starts
    every Dim.AUTO range at 2); there calls at 0 and 1 answer as eager does."""
    import sympy
    s = sympy.Symbol("in0_d0")
    inf = float("inf")
    torch_ranges = {"narrow_min": {s: (6, inf)}, "narrow_max": {s: (2, 1024)}, "reshape_specializes": {},
                    "ties_relate": {s: (2, inf)}}
    ours = {**torch_ranges, "narrow_max": {s: (0, 1024)}, "ties_relate": {s: (0, inf)}}
    for name, want in torch_ranges.items():
        fn, args, spec, _, _ = AUTO[name]
        assert canonical_range_constraints(torch_export(fn, args, dynamic_shapes=_auto(torch.export, spec))) == want
        ep = gp.export(fn, args, dynamic_shapes=_auto(gp, spec))
        assert canonical_range_constraints(ep) == ours[name], name
        if ours[name] and ours[name][s][0] == 0:
            for n in (0, 1):
                assert_matches_eager(ep, fn, tuple(torch.randn(n, *a.shape[1:]) for a in args))


# ---------------------------------------------------------------------------- 0/1 example sizes

@pytest.mark.parametrize("size", [0, 1])
@pytest.mark.parametrize("bounds", [{}, {"max": 64}])
def test_example_size_0_or_1_for_a_dim_is_refused(size, bounds):
    args = (torch.randn(size, 4),)
    with pytest.raises(Exception):
        torch_export(elementwise, args, dynamic_shapes={"x": {0: torch.export.Dim("b", **bounds)}})
    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(elementwise, args, dynamic_shapes={"x": {0: gp.Dim("b", **bounds)}})
    msg = str(info.value)
    assert re.search(r"\bx\b", msg), msg
    assert re.search(r"\b2\b", msg), f"the message should suggest an example size of at least 2:\n{msg}"


@pytest.mark.parametrize("size", [0, 1])
def test_example_size_0_or_1_with_dim_auto_warns_and_specializes(size, caplog):
    args = (torch.randn(size, 4),)
    ref = torch_export(elementwise, args, dynamic_shapes={"x": {0: torch.export.Dim.AUTO}})
    assert dict(ref.range_constraints) == {}
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        ep = gp.export(elementwise, args, dynamic_shapes={"x": {0: gp.Dim.AUTO}})
    said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records
                                               if r.levelno >= logging.WARNING and "graphport" in r.name]
    assert any(re.search(r"\bx\b", s) for s in said), f"expected a warning naming input x, got {said}"
    assert dict(ep.range_constraints) == {}
    assert_matches_eager(ep, elementwise, args)
    with pytest.raises(gp.InputMismatchError):
        ep.module()(torch.randn(5, 4))


@pytest.mark.parametrize("size", [0, 1])
def test_example_size_0_or_1_with_dim_dynamic_is_refused(size):
    args = (torch.randn(size, 4),)
    with pytest.raises(Exception):
        torch_export(elementwise, args, dynamic_shapes={"x": {0: torch.export.Dim.DYNAMIC}})
    with pytest.raises(gp.GraphportError) as info:
        gp.export(elementwise, args, dynamic_shapes={"x": {0: gp.Dim.DYNAMIC}})
    assert re.search(r"\bx\b", str(info.value)), str(info.value)


# ---------------------------------------------------------------------------- never a wrong answer

def test_size_one_at_runtime_never_gives_a_wrong_answer():
    """torch.export 2.13 accepts `if x.shape[0] != 1` with Dim('s') (range [0, int_oo]) and
    then returns x + 1 for a size-1 input where eager returns x. graphport must refuse
    the export, refuse the call, or answer like eager."""
    try:
        ep = gp.export(not_one, (X8,), dynamic_shapes={"x": {0: gp.Dim("s")}})
    except gp.ConstraintViolationError:
        return
    for n in (0, 1, 2, 5):
        x = torch.randn(n, 4)
        try:
            got = ep.module()(x.clone())
        except gp.InputMismatchError:
            continue
        torch.testing.assert_close(got, not_one(x.clone()), msg=f"wrong answer at size {n}")


def test_sizes_zero_and_one_in_range_run_like_eager():
    ep = gp.export(elementwise, (X8,), dynamic_shapes={"x": {0: gp.Dim("s", max=64)}})
    for n in (0, 1, 64):
        x = torch.randn(n, 4)
        try:
            got = ep.module()(x.clone())
        except gp.InputMismatchError:
            continue
        torch.testing.assert_close(got, elementwise(x))


# ---------------------------------------------------------------------------- accepted programs

def size_arith(x):
    a = x.view(x.shape[0] * 2, 2)
    b = torch.arange(x.shape[0]) * x[:, 0]
    c = x.new_ones(x.size(1) // 2) * 3
    return a, b, c


ACCEPTED = {
    "narrow_max_declared": (narrow_max, (X8,), lambda api: {"x": {0: _d(api, max=1024)}}),
    "narrow_min_declared": (narrow_min, (X8,), lambda api: {"x": {0: _d(api, min=6)}}),
    "matmul_shared_inner": (matmul, (torch.randn(3, 5), torch.randn(5, 2)),
                            lambda api: {"a": {1: _d(api, "k")}, "b": {0: _d(api, "k")}}),
    "size_arith": (size_arith, (X8,), lambda api: {"x": {0: _d(api, max=64)}}),
    "tie_same_dim": (add_xy, (X8, X8.clone()), lambda api: {"x": {0: _d(api, "a")}, "y": {0: _d(api, "a")}}),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_like_torch_export(name):
    fn, args, spec = ACCEPTED[name]
    ref = torch_export(fn, args, dynamic_shapes=spec(torch.export))
    ep = gp.export(fn, args, dynamic_shapes=spec(gp))
    assert_same_range_constraints(ep, ref)
    assert_matches_eager(ep, fn, args)


def test_symint_arithmetic_is_recorded_in_the_graph():
    ep = gp.export(size_arith, (X8,), dynamic_shapes={"x": {0: gp.Dim("s", max=64)}})
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.sym_size.int in targets, targets
    assert operator.mul in targets, targets
    for n in (2, 17, 64):
        assert_matches_eager(ep, size_arith, (torch.randn(n, 4),), what=f"at {n}")
    text = str(ep)
    assert re.search(r'"f32\[2\*s, 2\]"', text), text
    assert re.search(r'"i64\[s\]"', text), text


def test_symint_floordiv_on_a_dynamic_dim_is_recorded():
    def halves(x):
        return x.new_zeros(x.size(1) // 2) + x.sum()
    ref = torch_export(halves, (torch.randn(3, 8),), dynamic_shapes={"x": {1: torch.export.Dim("c", min=4, max=64)}})
    assert operator.floordiv in [n.target for n in ref.graph.nodes]
    ep = gp.export(halves, (torch.randn(3, 8),), dynamic_shapes={"x": {1: gp.Dim("c", min=4, max=64)}})
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.sym_size.int in targets and operator.floordiv in targets, targets
    assert_same_range_constraints(ep, ref)
    for c in (4, 9, 64):
        assert_matches_eager(ep, halves, (torch.randn(3, c),), what=f"at {c}")


# ---------------------------------------------------------------------------- agreement corpus

def _pad_to_8(x):
    return torch.nn.functional.pad(x, (0, 0, 0, (8 - x.shape[0] % 8) % 8))


CORPUS = {
    "slice_half": lambda x: x[: x.shape[0] // 2] * 2,
    "slice_inner": lambda x: x[1:-1] + 1,
    "last_row": lambda x: x[-1] * 3,
    "unflatten_two": lambda x: x.unflatten(0, (2, -1)).sum(1),
    "reshape_pairs": lambda x: x[:, :3].reshape(-1, 2),
    "split_by_two": lambda x: torch.split(x, 2),
    "chunk_two": lambda x: x.chunk(2),
    "repeat": lambda x: x.repeat(2, 1) + 1,
    "expand_new_dim": lambda x: x[None].expand(3, -1, -1) * 2,
    "sym_max": lambda x: x.new_zeros(max(x.shape[0], 3)) + 1,
    "sym_min": lambda x: x[: min(x.shape[0], 5)] + 1,
    "times_size": lambda x: x * x.shape[0],
    "full_of_size": lambda x: torch.full((x.shape[0],), x.shape[0]),
    "mean_by_size": lambda x: x.sum(0) / x.shape[0],
    "gt_one": lambda x: x + 1 if x.shape[0] > 1 else x - 1,
    "gt_two": lambda x: x + 1 if x.shape[0] > 2 else x - 1,
    "pad_to_multiple_of_8": _pad_to_8,
    "gram": lambda x: x @ x.T,
    "stack_flip": lambda x: torch.stack([x, x.flip(0)]),
    "topk_two": lambda x: x.topk(2, dim=0).values,
    "unfold_windows": lambda x: x.unfold(0, 2, 1),
    "cumsum": lambda x: x.cumsum(0),
    "arange_outer": lambda x: torch.arange(x.shape[0])[:, None] * x,
}

SWEEP = [0, 1, 2, 3, 5, 8, 13, 64, 65]

# torch.export 2.13 refuses these although every size in the Dim's range has a sound
# answer: graphport may refuse them too, or accept them and pass the size sweep.
TORCH_OVER_REFUSES = {
    ("slice_half", "Dim"): "cannot prove the always-true guard (s // 2) <= s; suggests s = 2*_s",
    ("slice_inner", "Dim"): "its guard solver fails: Expected op to be '==', got <= for 5/2 <= s",
    ("sym_min", "Dim"): "cannot prove the always-true guard min(5, s) <= s (graphport evaluates it over 0..64)",
    ("gt_two", "Dim"): "guards on the branch `s > 2` (graphport captures both sides as a cond)",
}


# torch.export 2.13 accepts these, assuming sizes of at least 2, and its program answers
# wrong at a smaller size in the declared range; graphport traces there, sees the program
# take another path, and refuses at export naming the line.
TORCH_WRONG_AT_SMALL_SIZES = {
    ("gt_one", "Dim"): 1,   # at s = 1 eager takes the `else` branch (x - 1); torch.export's program adds 1
}


# torch.export 2.13 refuses these with a guard on a branch the spec cannot decide; graphport
# captures the branch as a cond on the size predicate (docs/control-flow-splits.md), so it
# must accept them and answer every size of the sweep as eager does.
TORCH_REFUSES_GRAPHPORT_SPLITS = {
    ("gt_two", "Dim"): "x + 1 if x.shape[0] > 2 else x - 1: s > 2 holds for some sizes of [0, 64], not all",
}


def _verdict(export, fn, spec):
    try:
        return export(fn, spec), None
    except Exception as e:  # noqa: BLE001 (which exception is checked by the caller)
        return None, e


@pytest.mark.parametrize("kind", ["Dim", "AUTO"])
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_accepts_and_refuses_like_torch_export_and_never_answers_wrong(name, kind):
    fn = CORPUS[name]
    x = torch.randn(6, 4)

    def spec(api):
        return {"x": {0: api.Dim("s", max=64) if kind == "Dim" else api.Dim.AUTO}}
    ref, ref_err = _verdict(lambda f, s: torch_export(f, (x,), dynamic_shapes=s(torch.export)), fn, spec)
    ep, err = _verdict(lambda f, s: gp.export(f, (x,), dynamic_shapes=s(gp)), fn, spec)
    if (name, kind) in TORCH_WRONG_AT_SMALL_SIZES:
        size = TORCH_WRONG_AT_SMALL_SIZES[(name, kind)]
        assert isinstance(err, gp.ConstraintViolationError) and "is inside its declared range" in str(err), err
        small = torch.randn(size, 4)
        assert not torch.equal(ref.module()(small.clone()), fn(small.clone())), "torch.export is right there now"
        return
    if ref is None and (name, kind) in TORCH_OVER_REFUSES:
        if ep is None:   # refusing like torch.export is fine; accepting is fine if sound (the sweep)
            assert isinstance(err, gp.ConstraintViolationError), f"expected a ConstraintViolationError, got {err!r}"
            return
    elif ref is None and (name, kind) in TORCH_REFUSES_GRAPHPORT_SPLITS:
        assert ep is not None, f"graphport refuses a branch it captures as a cond: {err}"
        assert any(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes), ep.graph
    elif ref is None:
        assert ep is None, f"torch.export refuses ({torch_fix_message(ref_err)}) but graphport accepts"
        assert isinstance(err, gp.ConstraintViolationError), f"expected a ConstraintViolationError, got {err!r}"
        return
    else:
        assert ep is not None, f"torch.export accepts but graphport refuses: {err}"
        assert_same_range_constraints(ep, ref, hint_dims=kind == "AUTO")
    mine, theirs = ep.module(), (ref.module() if ref is not None else None)
    for n in SWEEP:
        xn = torch.randn(n, 4)
        try:
            expected = fn(xn.clone())
        except Exception as eager_err:  # noqa: BLE001
            # eager itself fails at this size: the program must fail too, with our error or eager's
            with pytest.raises((gp.GraphportError, type(eager_err))):
                mine(xn.clone())
            continue
        try:
            got = mine(xn.clone())
        except gp.InputMismatchError:
            got = None
        if got is not None:
            assert_same_values_at(expected, got, n)
            continue
        if theirs is None:
            continue
        try:   # graphport refused: fine unless torch.export's program answers right at n >= 2
            torch_got = theirs(xn.clone())
        except Exception:  # noqa: BLE001
            continue
        if n >= 2:
            assert_same_values_at(expected, torch_got, n)
            raise AssertionError(f"graphport refuses size {n}, which torch.export's program runs correctly")


def assert_same_values_at(expected, got, n):
    from .helpers import assert_same_values
    assert_same_values(expected, got, f"outputs at size {n}")


# ---------------------------------------------------------------------------- divisibility

def test_divisibility_guard_suggests_a_derived_dim_that_refines_and_exports():
    """torch.export suggests `_s = Dim('_s', min=1, max=oo)` and `s = 2*_s` for `x.shape[0] % 2 == 0`."""
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes
    tspec = {"x": {0: torch.export.Dim("s")}}
    with pytest.raises(Exception) as ref:
        torch_export(is_even, (X8,), dynamic_shapes=tspec)
    tmsg = torch_fix_message(ref.value)
    assert suggested_fixes(tmsg) == ["_s = Dim('_s', min=1, max=oo)", "s = 2*_s"], tmsg
    torch_export(is_even, (X8,), dynamic_shapes=refine_dynamic_shapes_from_suggested_fixes(tmsg, tspec))

    spec = {"x": {0: gp.Dim("s")}}
    msg = _export_refused(is_even, (X8,), spec)
    assert_names_location(msg, HERE, "# GUARD-even")
    fixes = suggested_fixes(msg)
    assert "s = 2*_s" in fixes and any(f.startswith("_s = Dim('_s'") for f in fixes), msg
    ep = gp.export(is_even, (X8,), dynamic_shapes=gp.refine_dynamic_shapes_from_suggested_fixes(msg, spec))
    for n in (2, 6, 40):
        assert_matches_eager(ep, is_even, (torch.randn(n, 4),), what=f"at {n}")
    for n in (3, 7):
        with pytest.raises(gp.InputMismatchError):
            ep.module()(torch.randn(n, 4))

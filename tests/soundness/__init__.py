"""Soundness regressions: an exported program either refuses at export time, or answers
exactly what eager answers at every input its range constraints accept.

Shared helpers (public graphport API only):

- `run_both(fn, args, ep)`: runs eager on clones and `ep.module()` on clones; returns
  (eager_result, graphport_result), each either ("ok", outputs, mutated_args) or
  ("raised", exception).
- `check_sizes(fn, make, sizes, dynamic_shapes, ...)`: exports `fn` on `make(example)`,
  then compares against eager at every size in `sizes`. A size inside the declared range
  must never be refused at call time.
"""
from __future__ import annotations

import copy

import torch
import torch.utils._pytree as pytree

import graphport as gp


def clone_tree(tree):
    """Deep copy of an input tree, keeping one tensor passed twice as one tensor."""
    memo = {}

    def once(v):
        if isinstance(v, torch.Tensor):
            if id(v) not in memo:
                memo[id(v)] = v.detach().clone() if not v.requires_grad else v.detach().clone().requires_grad_()
            return memo[id(v)]
        return v

    return pytree.tree_map(once, tree)


def _as_bits(t: torch.Tensor) -> torch.Tensor:
    """A view of a tensor's bits that torch.equal compares exactly (NaNs included)."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype in (torch.float32, torch.int32):
        return t.contiguous().view(torch.int32)
    if t.dtype in (torch.float64, torch.int64):
        return t.contiguous().view(torch.int64)
    if t.dtype in (torch.float16, torch.bfloat16, torch.int16):
        return t.contiguous().view(torch.int16)
    return t


def assert_same(got, want, *, exact=True, what="output", atol=1e-5, rtol=1e-5):
    gl, gs = pytree.tree_flatten(got)
    wl, ws = pytree.tree_flatten(want)
    assert gs == ws, f"{what}: structure differs: {gs} vs {ws}"
    for i, (g, w) in enumerate(zip(gl, wl)):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{what}[{i}]: expected a tensor, got {type(g)}"
            assert g.shape == w.shape, f"{what}[{i}]: shape {tuple(g.shape)} != eager {tuple(w.shape)}"
            assert g.dtype == w.dtype, f"{what}[{i}]: dtype {g.dtype} != eager {w.dtype}"
            if exact:
                assert torch.equal(_as_bits(g), _as_bits(w)), f"{what}[{i}]: values differ from eager:\n{g}\nvs\n{w}"
            else:
                torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True,
                                           msg=lambda m: f"{what}[{i}]: {m}")
        else:
            assert g == w, f"{what}[{i}]: {g!r} != eager {w!r}"


def same_as_eager_under_seed(fn, ep, *args):
    """The program's outputs equal eager's (within float tolerance) when both start from the
    same random seed, on clones of the same tensor inputs: random ops draw the same numbers."""
    torch.manual_seed(0)
    want = fn(*[a.clone() for a in args])
    torch.manual_seed(0)
    got = ep.module()(*[a.clone() for a in args])
    torch.testing.assert_close(got, want)


def run_eager(fn, args, kwargs=None, seed=None):
    args, kwargs = clone_tree((args, kwargs or {}))
    if seed is not None:
        torch.manual_seed(seed)
    try:
        out = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any eager failure is the reference behaviour
        return ("raised", e)
    return ("ok", out, (args, kwargs))


def run_ep(ep, args, kwargs=None, seed=None):
    args, kwargs = clone_tree((args, kwargs or {}))
    if seed is not None:
        torch.manual_seed(seed)
    try:
        out = ep.module()(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return ("raised", e)
    return ("ok", out, (args, kwargs))


def compare_call(fn, ep, args, kwargs=None, *, exact=True, seed=None, label="", atol=1e-5, rtol=1e-5):
    """Run eager and the program on the same (cloned) inputs and compare outputs and the
    inputs after the call. If eager raises, the program must raise too."""
    e = run_eager(fn, args, kwargs, seed)
    g = run_ep(ep, args, kwargs, seed)
    if e[0] == "raised":
        assert g[0] == "raised", (
            f"{label}: eager raises {type(e[1]).__name__}: {e[1]} but the exported program "
            f"answered {g[1]!r}"
        )
        return
    if g[0] == "raised":
        raise AssertionError(
            f"{label}: eager works but the exported program raised "
            f"{type(g[1]).__name__}: {str(g[1])[:300]}"
        ) from g[1]
    assert_same(g[1], e[1], exact=exact, what=f"{label} output", atol=atol, rtol=rtol)
    assert_same(g[2], e[2], exact=exact, what=f"{label} inputs after the call", atol=atol, rtol=rtol)


def check_sizes(fn, make, example, sizes, dynamic_shapes=None, *, exact=True,
                refuse_ok=(), seed=None, kwargs=None, atol=1e-5, rtol=1e-5):
    """Export `fn` on `make(example)`; then at every size in `sizes` the program must
    answer what eager answers (or raise where eager raises).

    `refuse_ok`: exception types the export itself may raise instead (then nothing more is
    checked). Returns the ExportedProgram, or None if the export refused."""
    args = make(example)
    ex_args, ex_kwargs = clone_tree((args, kwargs or {}))
    try:
        if seed is not None:
            torch.manual_seed(seed)
        ep = gp.export(fn, ex_args, ex_kwargs or None, dynamic_shapes=dynamic_shapes)
    except tuple(refuse_ok) as e:
        assert isinstance(e, gp.GraphportError)
        return None
    for n in [example, *sizes]:
        compare_call(fn, ep, make(n), kwargs, exact=exact, seed=seed, label=f"size {n}",
                     atol=atol, rtol=rtol)
    return ep

"""Regressions for bug classes the view fuzzer (tests/fuzz, scripts/fuzz_views.py) found.

Each test exports a program with dynamic dims and compares `ep.module()` with eager at
several sizes of the declared range, 0 and 1 included where the range allows them. A size
may be refused at call time (gp.InputMismatchError) only if the export reported it in
`ep.shape_report`; a size where eager raises must not get an answer.
"""
from __future__ import annotations

import time
import warnings

import pytest
import torch

import graphport as gp
from graphport.ops import views

aten = torch.ops.aten


def _same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True)
        return
    assert isinstance(got, (tuple, list)) and len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w)


def sweep(f, make, dynamic_shapes, sizes, example=None):
    """Export f on make(example) and compare with eager on make(n) for n in sizes."""
    example = sizes[-1] if example is None else example
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = gp.export(f, make(example), dynamic_shapes=dynamic_shapes)
    for n in sizes:
        xs = make(n)
        eager_inputs = [x.clone() for x in xs]
        try:
            want = f(*eager_inputs)
        except Exception:
            with pytest.raises(Exception):
                ep.module()(*[x.clone() for x in xs])
            continue
        ours = [x.clone() for x in xs]
        try:
            got = ep.module()(*ours)
        except gp.InputMismatchError:
            assert ep.shape_report, f"size {n} refused at call time but not reported at export"
            continue
        _same(got, want)
        _same(ours, eager_inputs)   # inputs the program mutates
    return ep


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# -- 1. composite ops whose C++ kernel reads concrete sizes (take_along_dim) -----------------

def test_take_along_dim_on_dynamic_dims():
    def f(x0):
        a = torch.take_along_dim(x0, x0.argmax(dim=3, keepdim=True), dim=3)
        b = torch.take_along_dim(x0, x0.argmax(dim=0, keepdim=True), dim=0)
        c = torch.take_along_dim(x0.real if x0.is_complex() else x0, x0.argmin(dim=1, keepdim=True), 1)
        return a, b, c

    d0 = gp.Dim("d0", min=0, max=64)
    sweep(f, lambda n: (_randn(n, 5, 3, 6),), ({0: d0},), [0, 1, 2, 3, 7], example=2)


def test_take_along_dim_flat_and_broadcast_indices():
    def f(x0, i):
        return torch.take_along_dim(x0, i), torch.take_along_dim(x0, i % x0.shape[0], dim=0)

    d0 = gp.Dim("d0", min=1, max=16)
    sweep(f, lambda n: (_randn(n, 4), torch.tensor([[3, 0, 1, 2]])), ({0: d0}, None), [1, 2, 5])


def test_take_along_dim_rejecting_its_arguments_is_an_operator_error():
    def f(x0, i):
        return torch.take_along_dim(x0, i.unsqueeze(0), dim=0)

    with pytest.raises(gp.OperatorError) as info:
        gp.export(f, (_randn(3, 4), torch.zeros(1, 2, dtype=torch.long)),
                  dynamic_shapes=({0: gp.Dim("d0", min=1, max=16)}, None))
    assert "same number of dimensions" in str(info.value) and "take_along_dim(x0" in str(info.value)


# -- 2. in-place writes through views under dynamic dims ---------------------------------------

def test_write_to_base_then_read_moved_view():
    def f(x0):
        v1 = x0.movedim(-1, 0)
        x0.fill_(7.0)
        return (v1,)

    sweep(f, lambda n: (_randn(n, 3),), ({0: gp.Dim("d0", min=1, max=2)},), [1, 2])


def test_masked_fill_through_unfold_window():
    def f(x0, x1):
        v = x1.unfold(1, 1, 1)
        v.masked_fill_(v > 0, 1.5)
        return x0 + 1, v

    d = gp.Dim("d", max=8)   # no explicit minimum: sizes 0 and 1 may be refused at call time, if reported
    sweep(f, lambda n: (_randn(2), _randn(3, n)), (None, {1: d}), [0, 1, 2, 5], example=4)


# -- 3. sizes used as op arguments become graph values, never raw SymInts --------------------

def test_index_copy_with_size_derived_indices():
    def f(x0):
        v2 = x0.unsqueeze(-1)
        idx = torch.arange(v2.shape[0] // 2)
        v2.index_copy_(0, idx, v2.index_select(0, idx) * 2)
        return (v2,)

    sweep(f, lambda n: (_randn(n, 3),), ({0: gp.Dim("d0", min=0, max=16)},), [0, 1, 2, 3, 9], example=4)


# -- 4. meta kernels and writes with symbolic slice bounds -----------------------------------

def test_setitem_on_flattened_view_with_symbolic_bound():
    def f(x0):
        v1 = x0.flatten(2, 3)
        v1[:, :v1.shape[-2] - 1] = 1.5
        return x0, v1

    sweep(f, lambda n: (_randn(2, 3, n, 5),), ({2: gp.Dim("d", min=1, max=8)},), [1, 2, 6], example=4)


def test_zero_base_after_split_with_symbolic_sizes():
    def f(x0):
        v1 = x0.split([1, x0.shape[0] - 1], 0)[0]
        x0.zero_()
        return v1 + 1, x0

    sweep(f, lambda n: (_randn(n, 3),), ({0: gp.Dim("d0", min=1, max=8)},), [1, 2, 3, 6], example=4)


# -- 5. write-back never asks a symbolic tensor for its numel / storage offset -----------------

def test_write_through_as_strided_of_a_view():
    """as_strided addresses the base's storage: recorded on the base, written back there."""
    def f(x0, x1):
        v2 = x1.narrow(-3, x1.shape[-3] // 2, x1.shape[-3] - x1.shape[-3] // 2)
        v3 = v2.as_strided((v2.shape[0], v2.shape[1], v2.shape[2], v2.shape[3] - 1), v2.stride(),
                           v2.storage_offset() + v2.stride(3))
        v3[:, :-2] = v3[:, :-2].clone() * 2
        return x0, x1, v3

    d0 = gp.Dim("d0", min=1, max=64)
    sweep(f, lambda n: (_randn(6), _randn(n, 2, 2, 2)), (None, {0: d0}), [1, 2, 5, 9], example=5)


def test_write_through_as_strided_of_a_strided_slice():
    def f(x0, x1):
        v2 = x1[..., 1:100:3, :]
        v3 = v2.as_strided((v2.shape[0], v2.shape[1] // 2, v2.shape[2], v2.shape[3]), v2.stride(), v2.storage_offset())
        v3[..., :-2] = v3[..., :-2].flip(3)
        v3.mul_(3)
        return (x1, v3)

    d1 = gp.Dim("d1", min=0, max=16)
    sweep(f, lambda n: (_randn(2, 1, n, 1), _randn(2, 5, 5, 1)), ({2: d1}, None), [0, 1, 2, 7], example=5)


def test_write_through_diagonal_and_transpose_of_dynamic_input():
    def f(x0):
        d = x0.transpose(0, 1).diagonal(0, 0, 1)
        d.add_(10)
        return x0

    sweep(f, lambda n: (_randn(n, 4),), ({0: gp.Dim("d0", min=0, max=8)},), [0, 1, 2, 4, 7], example=3)


# -- 6. unbind returns every piece -----------------------------------------------------------

def test_unbind_of_unflattened_dynamic_dim():
    def f(x0):
        v1 = x0.unflatten(0, (-1, 2))
        pieces = v1.unbind(1)
        v4 = pieces[0]
        v4.mul_(2)
        return pieces, x0

    k = gp.Dim("k", min=0, max=8)
    sweep(f, lambda n: (_randn(2 * n, 3),), ({0: 2 * k},), [0, 1, 2, 5], example=3)


# -- 7. reshape copies when the strides do not allow a view ----------------------------------

def test_reshape_of_non_viewable_narrowed_tensor_copies():
    def f(x0):
        v2 = x0.narrow(1, 1, 2)
        v3 = v2.narrow(0, 1, v2.shape[0] // 2)
        r = v3.reshape(-1)
        r.add_(1)     # a copy in eager at these sizes: x0 is not written
        return r, x0

    sweep(f, lambda n: (_randn(n, 4),), ({0: gp.Dim("d0", min=4, max=10)},), [4, 5, 6, 9])


def test_reshape_of_viewable_view_writes_through():
    def f(x0):
        v = x0.narrow(1, 0, 2)[:, :1]       # strides allow a view of the column
        r = v.reshape(-1)
        r.add_(1)
        return r, x0

    sweep(f, lambda n: (_randn(n, 4),), ({0: gp.Dim("d0", max=10)},), [0, 1, 2, 9], example=5)


# -- 8. every failure is a graphport error naming the user's line with a fix ---------------------

def test_overlapping_unfold_write_is_unsupported_with_the_views_fix():
    def f(x0):
        w = x0.unfold(0, 3, 1)
        w.mul_(2)
        return x0

    with pytest.raises(gp.UnsupportedFeatureError) as info:
        gp.export(f, (_randn(6),), dynamic_shapes=({0: gp.Dim("d0", min=3, max=10)},))
    assert "fold" in info.value.fix        # the ViewWriteError's own fix
    assert "test_fuzz_regressions.py" in str(info.value) and "w.mul_(2)" in str(info.value)


def test_expanded_write_is_unsupported_with_the_views_fix():
    def f(x0):
        e = x0.unsqueeze(0).expand(3, -1)
        e.add_(1)
        return x0

    with pytest.raises(gp.UnsupportedFeatureError) as info:
        gp.export(f, (_randn(4),))
    assert "clone" in info.value.fix and "e.add_(1)" in str(info.value)


def test_broken_inverse_is_an_internal_error_at_the_users_line(monkeypatch):
    monkeypatch.setitem(views.INVERSES, aten.t.default, lambda c: c.new)   # wrong shape on purpose

    def f(x0):
        y = x0.t()
        y.add_(1)
        return x0

    with pytest.raises(gp.InternalError) as info:
        gp.export(f, (_randn(2, 3),))
    assert "y.add_(1)" in str(info.value)


# -- a size question answered by assuming sizes >= 2 is proven at the small sizes ---------------

def test_squeeze_of_dynamic_dim_at_size_one_is_refused_not_answered():
    def f(x0, x1):
        v3 = x1.squeeze(2)
        return (v3.flatten(2, 2),)   # eager raises at size 1: the squeezed tensor has 2 dims

    d0 = gp.Dim("d0", min=0, max=4)
    ep = sweep(f, lambda n: (_randn(4), _randn(6, 2, n, dtype=torch.complex64)), (None, {2: d0}),
               [0, 1, 2, 3], example=2)
    assert any("d0" in line for line in ep.shape_report)
    with pytest.raises(gp.InputMismatchError):
        ep.module()(_randn(4), _randn(6, 2, 1, dtype=torch.complex64))


# -- export always finishes ------------------------------------------------------------------

@pytest.mark.parametrize("src", [
    "v = x0.narrow(0, 1, x0.shape[0] - 1)\n    c = v.chunk(3, 0)[-1]\n    return (c.reshape(-1),)",
    "v = x0.narrow(0, x0.shape[0] // 2, x0.shape[0] // 2)\n    c = v.tensor_split(3, 0)[1]\n"
    "    return (c.reshape(c.shape[0], -1, 1),)",
    "v = x0.narrow(0, 0, 1)\n    c = v.chunk(2, 0)[0]\n    return (c.reshape(-1),)",
])
def test_narrow_chunk_reshape_export_finishes(src):
    ns = {"torch": torch}
    exec(f"def f(x0):\n    {src}\n", ns)
    t = time.time()
    try:
        sweep(ns["f"], lambda n: (_randn(n, 2, 3),), ({0: gp.Dim("d0", min=2, max=64)},), [2, 3, 9, 12], example=9)
    except gp.ConstraintViolationError:
        pass   # a spec the program's shape logic contradicts is a fine answer; looping is not
    assert time.time() - t < 20


def test_composite_reading_concrete_sizes_without_reference_specializes(monkeypatch):
    """No Python reference: the sizes the C++ kernel reads are specialized, as torch.export
    does, and the Dim that became a constant is reported at export with the line."""
    import graphport.capture.mode as mode
    monkeypatch.setattr(mode, "python_decomposition", lambda op: None)

    def f(x0):
        return torch.take_along_dim(x0, x0.argmax(dim=1, keepdim=True), dim=1)

    with pytest.raises(gp.ConstraintViolationError) as info:
        gp.export(f, (_randn(3, 4),), dynamic_shapes=({0: gp.Dim("d0", min=1, max=16)},))
    assert "d0" in str(info.value) and "take_along_dim" in str(info.value)
    ep = gp.export(f, (_randn(3, 4),))   # static: nothing to specialize
    x = _randn(3, 4, seed=1)
    torch.testing.assert_close(ep.module()(x), f(x))


def test_constant_made_from_a_size_specializes_the_dim():
    """`torch.tensor([x.shape[1] - 1])` bakes the example's size into a constant: the dim is
    fixed, and export says so (a range the constant is wrong for is never accepted)."""
    def f(x0):
        x0.index_fill_(1, torch.tensor([x0.shape[1] - 1]), 1.5)
        return (x0,)
    with pytest.raises(gp.ConstraintViolationError, match="fixes it to the constant 2"):
        gp.export(f, (torch.randn(2, 2, 1, 2),), dynamic_shapes=({1: gp.Dim("d0", min=0, max=2)},))


def test_shape_logic_that_never_settles_ends_with_an_error():
    """torch's view helper re-asks `k // k == 1` until it is settled: export must finish."""
    def f(x0):
        v = x0[:, :, ::3].unflatten(2, (-1, 1))
        return v.view(v.shape[0], v.shape[1], 1)
    with pytest.raises(gp.GraphportError):
        gp.export(f, (torch.randn(1, 4, 2),), dynamic_shapes=({2: gp.Dim("d0", min=2, max=64)},))

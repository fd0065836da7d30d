"""The view-inverse table (graphport.ops.views.INVERSES), entry by entry, against eager.

(a) Unit: for each view step, scatter_back run eagerly on real tensors must equal, bit for
    bit, `base2 = base.clone(); view(base2).copy_(new); base2`.
(b) Coverage: every ATen view overload capture can record is in the table or listed as
    deliberately not invertible.
(c) End to end: `y = x.clone(); view(y).add_(1); return y` through graphport.export, static
    and with a dynamic dim 0, compared with eager.
"""
from __future__ import annotations

import operator

import pytest
import torch

import graphport as gp
from graphport.ops.kinds import Kind, op_info
from graphport.ops.views import (INVERSES, NOT_INVERTIBLE, ViewInverseMismatch, ViewStep, ViewWriteError,
                                 replay, scatter_back)

aten = torch.ops.aten

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as integers, so NaNs and signed zeros compare exactly."""
    t = t.resolve_conj().resolve_neg()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_floating_point():
        return t.contiguous().view(_INT_OF_SIZE[t.element_size()])
    return t


def assert_bit_equal(got: torch.Tensor, want: torch.Tensor):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    assert torch.equal(bits(got), bits(want)), (got, want)


def eager_emit(op, args, kwargs):
    return op(*args, **kwargs)


def rand(shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=gen)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-100, 100, shape, generator=gen).to(dtype)


def S(op, *args, index=None, **kwargs):
    return ViewStep(op, tuple(args), kwargs, index)


# (id, base shape, base dtype, chain of steps)
CASES = [
    ("alias-none", (3, 4), torch.float32, [S(None)]),
    ("alias", (3, 4), torch.float32, [S(aten.alias.default)]),
    ("detach", (3, 4), torch.float32, [S(aten.detach.default)]),
    ("lift_fresh", (3, 4), torch.float32, [S(aten.lift_fresh.default)]),
    ("select", (3, 5), torch.float32, [S(aten.select.int, 1, 2)]),
    ("select-neg", (3, 5), torch.float32, [S(aten.select.int, -1, -1)]),
    ("select-neg-dim0", (3, 5), torch.float32, [S(aten.select.int, 0, -3)]),
    ("slice", (3, 6), torch.float32, [S(aten.slice.Tensor, 1, 1, 4)]),
    ("slice-defaults", (3, 6), torch.float32, [S(aten.slice.Tensor)]),
    ("slice-neg-start-step", (7, 3), torch.float32, [S(aten.slice.Tensor, 0, -5, None, 2)]),
    ("slice-none-neg-end-step", (3, 7), torch.float32, [S(aten.slice.Tensor, 1, None, -1, 2)]),
    ("slice-clamped", (3, 7), torch.float32, [S(aten.slice.Tensor, -1, -100, 100, 3)]),
    ("slice-kwargs", (3, 7), torch.float32, [S(aten.slice.Tensor, dim=1, start=2, step=2)]),
    ("diagonal", (4, 5), torch.float32, [S(aten.diagonal.default)]),
    ("diagonal-offset", (4, 5), torch.float32, [S(aten.diagonal.default, 1)]),
    ("diagonal-neg-offset", (4, 5), torch.float32, [S(aten.diagonal.default, -2, 0, 1)]),
    ("diagonal-dims", (3, 4, 5), torch.float32, [S(aten.diagonal.default, 1, -1, 0)]),
    ("diagonal-kwargs", (3, 4, 5), torch.float32, [S(aten.diagonal.default, offset=-1, dim1=2, dim2=1)]),
    ("as_strided", (4, 5), torch.float32, [S(aten.as_strided.default, [2, 3], [1, 4], 2)]),
    ("as_strided-no-offset", (4, 5), torch.float32, [S(aten.as_strided.default, [3, 2], [5, 2])]),
    ("permute-2", (3, 4), torch.float32, [S(aten.permute.default, [1, 0])]),
    ("permute-3", (2, 3, 4), torch.float32, [S(aten.permute.default, [2, 0, 1])]),
    ("permute-4-neg", (2, 3, 4, 5), torch.float32, [S(aten.permute.default, [-1, 0, -2, 1])]),
    ("transpose", (2, 3, 4), torch.float32, [S(aten.transpose.int, 0, 2)]),
    ("transpose-neg", (2, 3, 4), torch.float32, [S(aten.transpose.int, -1, -2)]),
    ("t", (3, 4), torch.float32, [S(aten.t.default)]),
    ("t-1d", (5,), torch.float32, [S(aten.t.default)]),
    ("unsqueeze", (3, 4), torch.float32, [S(aten.unsqueeze.default, 1)]),
    ("unsqueeze-neg", (3, 4), torch.float32, [S(aten.unsqueeze.default, -1)]),
    ("unsqueeze-0", (3, 4), torch.float32, [S(aten.unsqueeze.default, 0)]),
    ("squeeze", (3, 1, 4, 1), torch.float32, [S(aten.squeeze.default)]),
    ("squeeze-noop", (3, 4), torch.float32, [S(aten.squeeze.default)]),
    ("squeeze-dim", (3, 1, 4), torch.float32, [S(aten.squeeze.dim, 1)]),
    ("squeeze-dim-noop", (3, 1, 4), torch.float32, [S(aten.squeeze.dim, 0)]),
    ("squeeze-dim-neg", (3, 4, 1), torch.float32, [S(aten.squeeze.dim, -1)]),
    ("squeeze-dims", (1, 3, 1, 4, 1), torch.float32, [S(aten.squeeze.dims, [4, 1, -5, 3])]),
    ("squeeze-dims-empty", (3, 1), torch.float32, [S(aten.squeeze.dims, [])]),
    ("view", (4, 6), torch.float32, [S(aten.view.default, [3, 8])]),
    ("view-flat", (4, 6), torch.float32, [S(aten.view.default, [-1])]),
    ("view-split", (4, 6), torch.float32, [S(aten.view.default, [2, 2, 2, 3])]),
    ("_reshape_alias", (4, 6), torch.float32, [S(aten._reshape_alias.default, [6, 4], [4, 1])]),
    ("_unsafe_view", (4, 6), torch.float32, [S(aten._unsafe_view.default, [24])]),
    ("view.dtype-same-size", (4, 6), torch.float32, [S(aten.view.dtype, torch.int32)]),
    ("view.dtype-smaller", (4, 6), torch.float32, [S(aten.view.dtype, torch.int16)]),
    ("view.dtype-bytes", (4, 6), torch.float32, [S(aten.view.dtype, torch.uint8)]),
    ("view.dtype-larger", (4, 6), torch.int16, [S(aten.view.dtype, torch.float32)]),
    ("view.dtype-double", (4, 6), torch.float32, [S(aten.view.dtype, torch.float64)]),
    ("view.dtype-bf16", (4, 6), torch.bfloat16, [S(aten.view.dtype, torch.int16)]),
    ("view_as_real", (3, 4), torch.complex64, [S(aten.view_as_real.default)]),
    ("view_as_complex", (3, 4, 2), torch.float32, [S(aten.view_as_complex.default)]),
    ("_conj", (3, 4), torch.complex64, [S(aten._conj.default)]),
    ("_neg_view", (3, 4), torch.float32, [S(aten._neg_view.default)]),
    ("expand-same", (4, 6), torch.float32, [S(aten.expand.default, [4, 6])]),
    ("expand-new-unit-dims", (6,), torch.float32, [S(aten.expand.default, [1, 1, 6])]),
    ("expand-unit-to-unit", (4, 1), torch.float32, [S(aten.expand.default, [4, -1])]),
    ("unfold-tiles", (3, 6), torch.float32, [S(aten.unfold.default, 1, 2, 2)]),
    ("unfold-tiles-tail", (2, 7), torch.float32, [S(aten.unfold.default, 1, 3, 3)]),
    ("unfold-gaps", (8, 3), torch.float32, [S(aten.unfold.default, 0, 2, 3)]),
    ("unfold-gaps-neg-dim", (2, 3, 11), torch.float32, [S(aten.unfold.default, -1, 2, 5)]),
    ("unfold-one-window", (2, 5), torch.float32, [S(aten.unfold.default, 1, 5, 1)]),
    ("unfold-0d", (), torch.float32, [S(aten.unfold.default, 0, 1, 1)]),
    ("split-0", (3, 5), torch.float32, [S(aten.split.Tensor, 2, 1, index=0)]),
    ("split-1", (3, 5), torch.float32, [S(aten.split.Tensor, 2, 1, index=1)]),
    ("split-last", (3, 5), torch.float32, [S(aten.split.Tensor, 2, -1, index=2)]),
    ("split-default-dim", (7, 2), torch.float32, [S(aten.split.Tensor, 3, index=1)]),
    ("split_with_sizes-0", (3, 6), torch.float32, [S(aten.split_with_sizes.default, [1, 3, 2], 1, index=0)]),
    ("split_with_sizes-1", (3, 6), torch.float32, [S(aten.split_with_sizes.default, [1, 3, 2], 1, index=1)]),
    ("split_with_sizes-2", (3, 6), torch.float32,
     [S(aten.split_with_sizes.default, [1, 3, 2], dim=-1, index=2)]),
    ("unsafe_split-1", (3, 5), torch.float32, [S(aten.unsafe_split.Tensor, 2, 1, index=1)]),
    ("unsafe_split_with_sizes-1", (3, 6), torch.float32,
     [S(aten.unsafe_split_with_sizes.default, [1, 3, 2], 1, index=1)]),
    ("unbind", (3, 5), torch.float32, [S(aten.unbind.int, 0, index=1)]),
    ("unbind-neg", (3, 5), torch.float32, [S(aten.unbind.int, -1, index=4)]),
    # chains, scattered back one step at a time as capture does
    ("chain-unsqueeze-squeeze", (3, 4), torch.float32,
     [S(aten.unsqueeze.default, 0), S(aten.unsqueeze.default, -1), S(aten.squeeze.dims, [0]),
      S(aten.squeeze.default)]),
    ("chain-permute-select-view", (2, 3, 4), torch.float32,
     [S(aten.permute.default, [2, 0, 1]), S(aten.select.int, 0, -1), S(aten.view.default, [6])]),
    ("chain-transpose-slice-unfold", (4, 9), torch.float32,
     [S(aten.t.default), S(aten.slice.Tensor, 0, 1, None, 1), S(aten.unfold.default, 0, 2, 2)]),
    ("chain-real", (3, 4), torch.complex64, [S(aten.view_as_real.default), S(aten.select.int, -1, 0)]),
    ("chain-imag", (3, 4), torch.complex64, [S(aten.view_as_real.default), S(aten.select.int, -1, 1)]),
    ("chain-conj-select", (3, 4), torch.complex64, [S(aten._conj.default), S(aten.select.int, 1, 2)]),
    ("chain-dtype-split", (4, 6), torch.float32,
     [S(aten.view.dtype, torch.int16), S(aten.split.Tensor, 5, 1, index=1)]),
]


def _scatter_chain(chain, base, new):
    """What capture's assign does: values along the chain, then inverses from the end."""
    values = [base]
    for step in chain[:-1]:
        values.append(replay(step, values[-1], eager_emit))
    for step, source in zip(reversed(chain), reversed(values)):
        new = scatter_back(step, source, new, source, new, eager_emit)
    return new


def _view(chain, base):
    for step in chain:
        base = replay(step, base, eager_emit)
    return base


def _fresh_layouts(view: torch.Tensor, seed: int):
    """New values for the view: contiguous, and column-major (a layout a functional op may
    produce that need not allow `view` back)."""
    new = rand(view.shape, view.dtype, seed)
    yield new
    if view.dim() >= 2:
        yield new.mT.contiguous().mT


@pytest.mark.parametrize("name,shape,dtype,chain", CASES, ids=[c[0] for c in CASES])
def test_inverse_matches_eager_write(name, shape, dtype, chain):
    base = rand(shape, dtype, seed=1)
    view = _view(chain, base)
    assert view.data_ptr() == base.data_ptr() or view.untyped_storage().data_ptr() == \
        base.untyped_storage().data_ptr(), "the case's chain must be a view of its base"
    for new in _fresh_layouts(view, seed=2):
        want = base.clone()
        _view(chain, want).copy_(new)
        got = _scatter_chain(chain, base, new)
        assert_bit_equal(got, want)
    assert_bit_equal(base, rand(shape, dtype, seed=1))   # the inverse wrote nothing in place


REJECTED = [
    ("expand-broadcast", (1, 6), S(aten.expand.default, [4, 6]), True),
    ("expand-new-dim", (6,), S(aten.expand.default, [3, 6]), True),
    ("unfold-overlapping", (2, 6), S(aten.unfold.default, 1, 3, 1), False),
]


@pytest.mark.parametrize("name,shape,step,eager_refuses", REJECTED, ids=[c[0] for c in REJECTED])
def test_writes_without_functional_meaning_are_refused(name, shape, step, eager_refuses):
    base = rand(shape)
    view = replay(step, base, eager_emit)
    new = rand(view.shape, seed=3)
    with pytest.raises(ViewWriteError) as info:
        scatter_back(step, base, new, base, new, eager_emit)
    assert info.value.what and info.value.fix
    if eager_refuses:
        with pytest.raises(RuntimeError, match="single memory location"):
            replay(step, base.clone(), eager_emit).copy_(new)


def test_unknown_view_op_is_refused():
    base = rand((2, 3))
    with pytest.raises(ViewWriteError):
        scatter_back(S(aten.slice_inverse.default, base), base, base, base, base, eager_emit)


def test_mismatched_inverse_is_an_internal_assertion():
    """A result not shaped like the base is reported, never returned."""
    def lying_emit(op, args, kwargs):
        out = op(*args, **kwargs)
        return out[:1] if op is aten.select_scatter.default else out
    base = rand((3, 5))
    with pytest.raises(ViewInverseMismatch):
        scatter_back(S(aten.select.int, 0, 1), base, base[1], base, base[1], lying_emit)
    assert issubclass(ViewInverseMismatch, AssertionError)


def _recordable_view_ops():
    """ATen overloads whose first result aliases input 0 without writing and that capture
    records as they are (composite ones are decomposed before recording)."""
    found = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::") or not schema.returns:
            continue
        alias = schema.returns[0].alias_info
        if alias is None or alias.is_write:
            continue
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue
        try:
            op = getattr(getattr(aten, schema.name[len("aten::"):]), schema.overload_name or "default")
            info = op_info(op)
        except (AttributeError, RuntimeError):
            continue   # TorchScript-only schemas with no dispatcher entry
        if info.kind is Kind.VIEW and not info.decompose:
            found.add(op)
    return found


def test_table_covers_every_recordable_view_op():
    ops = _recordable_view_ops()
    assert len(ops) > 30
    missing = {str(op) for op in ops if op not in INVERSES and op not in NOT_INVERTIBLE}
    assert not missing, f"view ops with no inverse and no reason: {sorted(missing)}"
    assert not set(INVERSES) & set(NOT_INVERTIBLE)
    for op, reason in NOT_INVERTIBLE.items():
        assert op in ops and reason


def test_every_table_entry_has_a_unit_case():
    tested = {step.op for _, _, _, chain in CASES for step in chain}
    assert set(INVERSES) <= tested, set(INVERSES) - tested


# -- (c) end to end ------------------------------------------------------------------------

def _c(shape):
    return lambda n: rand((n, *shape), torch.complex64, seed=n)


def _f(shape, dtype=torch.float32):
    return lambda n: rand((n, *shape), dtype, seed=n)


# (id, input factory taking the size of dim 0, the write `view(y)`)
E2E = [
    ("alias", _f((5,)), lambda y: torch.ops.aten.alias(y)),
    ("detach", _f((5,)), lambda y: y.detach()),
    ("select", _f((5,)), lambda y: y[:, 1]),
    ("select-neg", _f((5,)), lambda y: y.select(1, -1)),
    ("select-dim0-neg", _f((5,)), lambda y: y[-1]),
    ("slice", _f((6,)), lambda y: y[:, 1:4]),
    ("slice-step", _f((7,)), lambda y: y[:, ::2]),
    ("slice-neg", _f((7,)), lambda y: y[:, -3:]),
    ("slice-neg-end-step", _f((7,)), lambda y: y[:, 1:-1:3]),
    ("slice-dim0", _f((4,)), lambda y: y[1:]),
    ("narrow", _f((6,)), lambda y: y.narrow(1, 2, 3)),
    ("diagonal", _f((5,)), lambda y: y.diagonal()),
    ("diagonal-offset-dims", _f((4, 5)), lambda y: y.diagonal(1, -1, 1)),
    ("as_strided", _f((6,)), lambda y: y.as_strided((2, 2), (1, 3), 1)),
    ("permute-3", _f((3, 4)), lambda y: y.permute(2, 0, 1)),
    ("permute-4", _f((3, 4, 2)), lambda y: y.permute(3, 1, 0, 2)),
    ("movedim", _f((3, 4)), lambda y: y.movedim(0, -1)),
    ("transpose", _f((3, 4)), lambda y: y.transpose(0, 2)),
    ("t", _f((4,)), lambda y: y.t()),
    ("mT", _f((3, 4)), lambda y: y.mT),
    ("unsqueeze-squeeze", _f((4,)), lambda y: y.unsqueeze(1).unsqueeze(0).squeeze(0)),
    ("squeeze-dims", _f((1, 4, 1)), lambda y: y.squeeze((1, 3))),
    ("squeeze-all", _f((1, 4, 1)), lambda y: y.squeeze()),
    ("view-flat", _f((6,)), lambda y: y.view(-1)),
    ("view", _f((6,)), lambda y: y.view(-1, 3, 2)),
    ("flatten", _f((2, 3)), lambda y: y.flatten(1)),
    ("unflatten", _f((6,)), lambda y: y.unflatten(1, (2, 3))),
    ("reshape", _f((6,)), lambda y: y.reshape(y.shape[0], 2, 3)),
    ("view.dtype-int32", _f((6,)), lambda y: y.view(torch.int32)),
    ("view.dtype-int16", _f((6,)), lambda y: y.view(torch.int16)),
    ("view.dtype-float64", _f((6,)), lambda y: y.view(torch.float64)),
    ("view_as_real", _c((4,)), lambda y: torch.view_as_real(y)),
    ("view_as_complex", _f((4, 2)), lambda y: torch.view_as_complex(y)),
    ("real", _c((4,)), lambda y: y.real),
    ("imag", _c((4,)), lambda y: y.imag),
    ("conj", _c((4,)), lambda y: y.conj()),
    ("_neg_view", _f((4,)), lambda y: torch._neg_view(y)),
    ("expand-same", _f((4,)), lambda y: y.expand_as(y)),
    ("expand-unit", _f((4,)), lambda y: y.expand(1, -1, -1)),
    ("unfold-tiles", _f((6,)), lambda y: y.unfold(1, 2, 2)),
    ("unfold-gaps", _f((7,)), lambda y: y.unfold(1, 2, 3)),
    ("split", _f((5,)), lambda y: y.split(2, dim=1)[1]),
    ("split-last", _f((5,)), lambda y: y.split(2, dim=1)[-1]),
    ("split_with_sizes", _f((6,)), lambda y: y.split([1, 3, 2], dim=1)[1]),
    ("chunk", _f((5,)), lambda y: y.chunk(2, dim=1)[1]),
    ("tensor_split", _f((7,)), lambda y: y.tensor_split(3, dim=1)[2]),
    ("unbind", _f((3,)), lambda y: y.unbind(1)[2]),
    ("split_with_sizes-dim0", _f((3,)), lambda y: y.split([1, y.shape[0] - 1])[1]),
    ("split_with_sizes-dim0-first", _f((3,)), lambda y: y.split([y.shape[0] - 1, 1])[0]),
    ("chain", _f((6,)), lambda y: y.t().unsqueeze(0)[:, 1:].unfold(1, 2, 2).select(-1, 1)),
]


def _program(view):
    def f(x):
        y = x.clone()
        view(y).add_(1)
        return y
    return f


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name,make,view", E2E, ids=[c[0] for c in E2E])
def test_write_through_view_end_to_end(name, make, view, dynamic):
    f = _program(view)
    x = make(4)
    ds = {"x": {0: gp.Dim("n", min=2)}} if dynamic else None
    ep = gp.export(f, (x,), dynamic_shapes=ds)
    for n in ([4, 2, 7] if dynamic else [4]):
        xn = make(n)
        assert_bit_equal(ep.module()(xn.clone()), f(xn.clone()))


E2E_REFUSED = [
    ("expand-broadcast", _f((1,)), lambda y: y.expand(-1, 3)),
    ("unfold-overlapping", _f((6,)), lambda y: y.unfold(1, 3, 1)),
]


@pytest.mark.parametrize("name,make,view", E2E_REFUSED, ids=[c[0] for c in E2E_REFUSED])
def test_write_through_view_without_functional_meaning_is_refused(name, make, view):
    with pytest.raises(Exception) as info:
        gp.export(_program(view), (make(4),))
    assert "fix" in str(info.value)

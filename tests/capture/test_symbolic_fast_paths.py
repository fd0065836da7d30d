"""The fast paths of a symbolic trace give what the plain computations give.

- Views in closed form (capture/view_meta.py): `unsqueeze` and `transpose` by torch's C++
  kernel, and views of tensors that are not row-major which keep the leading dimensions, on
  row-major, transposed, expanded and sliced inputs: eager's shape, strides and storage offset
  at every size in range, 0 and 1 included, and no question asked of the sizes.
- `contiguous()` on expressions (capture/pointwise_meta.py) answers as the same check made
  with SymInt arithmetic does.
- SymNode's shared pure nodes (shapes/node.py): the same expressions as computed plainly,
  one node per value, and a constant the program fixed never lands on a shared node.
"""
from __future__ import annotations

import contextlib
import itertools

import pytest
import sympy
import torch

from graphport.capture.pointwise_meta import contiguous
from graphport.capture.view_meta import view_meta
from graphport.shapes.broadcast import is_one, same_size
from graphport.shapes.env import ShapeEnv
from graphport.shapes.expr import ValueRange
from graphport.shapes.node import SymNode, symint

aten = torch.ops.aten
SIZES = (0, 1, 2, 3)


def _env(lower: int):
    env = ShapeEnv()
    return env, [env.create_symbol(4 + i, ValueRange(lower, 64), f"d{i}", (0, i)) for i in range(2)]


def _at(value, values: dict) -> int:
    return int(value.node.expr.xreplace(values)) if isinstance(value, torch.SymInt) else value


def _strided(base_shape, env, layout: str) -> tuple[torch.Tensor, callable]:
    """A symbolic meta tensor of `base_shape` (symbols or ints) in `layout`, and the function
    that makes the same layout from a real tensor of the concrete base shape."""
    sizes = [symint(s, env) if isinstance(s, sympy.Basic) else s for s in base_shape]
    if layout == "sliced":   # the middle third of a fused last dimension, at an offset
        wide = [*sizes[:-1], 3 * sizes[-1]]
        strides, step = [], 1
        for s in reversed(wide):
            strides.insert(0, step)
            step = step * s
        meta = torch.empty_strided(wide, strides, device="meta").as_strided(sizes, strides, sizes[-1])
        return meta, lambda real: torch.cat([real, real, real], -1)[..., real.shape[-1]:2 * real.shape[-1]]
    if layout == "transposed":   # the first two dimensions swapped in memory
        swapped = [sizes[1], sizes[0], *sizes[2:]]
        return torch.empty(swapped, device="meta").transpose(0, 1), \
            lambda real: real.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "expanded":   # the first dimension broadcast (stride 0)
        inner = torch.empty(sizes[1:], device="meta")
        return inner.as_strided(sizes, (0, *inner.stride()), 0), lambda real: real[:1].expand(real.shape)
    return torch.empty(sizes, device="meta"), lambda real: real


def _concrete(shape, values):
    return [int(s.xreplace(values)) if isinstance(s, sympy.Basic) else s for s in shape]


def _check(out: torch.Tensor, expected: torch.Tensor, values: dict) -> None:
    """Eager's shape, and strides and offset wherever they address elements (a dimension of
    size 1, or a tensor with no elements, addresses none)."""
    assert [_at(s, values) for s in out.shape] == list(expected.shape)
    if expected.numel() == 0:
        return
    strides = [_at(s, values) for s in out.stride()]
    assert [a for a, n in zip(strides, expected.shape) if n != 1] == \
        [b for b, n in zip(expected.stride(), expected.shape) if n != 1]
    assert _at(out.storage_offset(), values) == expected.storage_offset()


def _asked(env: ShapeEnv) -> tuple:
    return list(env.guards), dict(env.assumed_min), dict(env.replacements)


LAYOUTS = ["row-major", "transposed", "expanded", "sliced"]
KERNEL_VIEWS = [(aten.unsqueeze.default, (0,)), (aten.unsqueeze.default, (1,)), (aten.unsqueeze.default, (3,)),
                (aten.unsqueeze.default, (-2,)), (aten.transpose.int, (0, 1)), (aten.transpose.int, (0, -1)),
                (aten.transpose.int, (1, 2))]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("func,dims", KERNEL_VIEWS, ids=[f"{f.__name__}{d}" for f, d in KERNEL_VIEWS])
def test_kernel_views_are_eager_at_every_size_and_ask_nothing(layout, func, dims):
    env, (b, t) = _env(0)
    x, make = _strided((b, t, 6), env, layout)
    before = _asked(env)
    out = view_meta(func, (x, *dims), {})
    assert _asked(env) == before
    for values in (dict(zip((b, t), combo)) for combo in itertools.product(SIZES, repeat=2)):
        real = make(torch.randn(_concrete((b, t, 6), values)))
        _check(out, func(real, *dims), values)


TAIL_VIEWS = [   # (layout, base shape, view shape, lowest size): the symbols are b and t
    ("sliced", ("b", "t", 768), ("b", "t", 12, 64), 0),
    ("sliced", ("b", "t", 768), ("b", "t", -1, 64), 1),
    ("transposed", ("b", "t", 12, 64), ("b", "t", 768), 0),
    ("transposed", ("b", "t", 6), ("b", "t", 6), 0),
    ("transposed", ("b", "t", 6), ("b", "t", 2, 3), 0),
    ("expanded", ("b", "t", 64), ("b", "t", 4, 16), 0),
    ("expanded", ("b", "t", 64), ("b", "t", 4, -1), 1),
]


@pytest.mark.parametrize("layout,base,shape,lower", TAIL_VIEWS)
def test_views_keeping_leading_dimensions_are_eager_at_every_size(layout, base, shape, lower):
    env, (b, t) = _env(lower)
    named = {"b": b, "t": t}
    base_shape = tuple(named.get(s, s) for s in base)
    x, make = _strided(base_shape, env, layout)
    assert not contiguous(x) or layout == "expanded"
    view_shape = [symint(named[s], env) if s in named else s for s in shape]
    before = _asked(env)
    out = view_meta(aten.view.default, (x, view_shape), {})
    assert out is not None
    assert _asked(env) == before
    for values in (dict(zip((b, t), combo)) for combo in itertools.product(SIZES, repeat=2)):
        if min(values.values()) < lower:
            continue
        real = make(torch.randn(_concrete(base_shape, values)))
        _check(out, real.view([_at(s, values) for s in view_shape]), values)


def test_views_that_are_not_views_at_every_size_take_torchs_path():
    env, (b, t) = _env(0)
    B, T = symint(b, env), symint(t, env)
    heads = torch.empty((B, 12, T, 64), device="meta").transpose(1, 2)   # [b, t, 12, 64], heads outermost
    assert view_meta(aten.view.default, (heads.transpose(1, 2), [B, 12, T * 64]), {}) is not None  # row-major
    # merging t with the heads is a view only where t is 1 (eager raises otherwise)
    assert view_meta(aten.view.default, (heads, [B, T * 12 * 64]), {}) is None
    assert view_meta(aten.view.default, (heads, [B * T, 768]), {}) is None
    # the fused projection's slice merged with t: a view only where t is 1
    sliced, _ = _strided((b, t, 768), env, "sliced")
    assert view_meta(aten.view.default, (sliced, [B * T, 768]), {}) is None
    # a -1 where the other sizes may multiply to 0 is ambiguous there (eager raises)
    assert view_meta(aten.view.default, (sliced, [B, T, -1, 64]), {}) is None


# -- contiguous() --------------------------------------------------------------------------

def _contiguous_by_symint_arithmetic(t: torch.Tensor) -> bool:
    """The same check made with SymInt arithmetic (one node per step), as it was written."""
    def times(a, b):
        product = a * b
        return int(product.node.expr) if isinstance(product, torch.SymInt) and product.node.expr.is_Integer \
            else product
    plain, clamped = 1, 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if not is_one(size) and not same_size(stride, plain) and not same_size(stride, clamped):
            return False
        plain = times(plain, size)
        clamped = times(clamped, torch.sym_max(size, 1) if isinstance(size, torch.SymInt) else max(size, 1))
    return same_size(t.storage_offset(), 0)


@pytest.mark.parametrize("lower", [0, 1, 2])
def test_contiguous_on_expressions_answers_as_symint_arithmetic(lower):
    env, (b, t) = _env(lower)
    B, T = symint(b, env), symint(t, env)
    cases = [torch.empty((B, T, 6), device="meta"),                                  # clamped strides
             torch.empty_strided((B, T, 6), (T * 6, 6, 1), device="meta"),           # plain strides
             torch.empty_strided((B, 1, T), (T, 7, 1), device="meta"),              # a size-1 dimension
             torch.empty_strided((1, 1, T, T), (0, 0, T, 1), device="meta"),        # an expanded mask
             torch.empty((T, B, 6), device="meta").transpose(0, 1),
             torch.empty((B, T, 6), device="meta").as_strided((B, T, 2), (T * 6, 6, 1), 2),
             torch.empty((B, T, 2), device="meta").as_strided((B, T, 2), (T * 6, 2, 1), 0),
             torch.empty((T, 6), device="meta").as_strided((B, T, 6), (0, 6, 1), 0),
             torch.empty((B, 6), device="meta").as_strided((B, 1), (6, 1), 0)]
    for x in cases:
        assert contiguous(x) == _contiguous_by_symint_arithmetic(x), (x.shape, x.stride())


# -- SymNode's shared pure nodes --------------------------------------------------------------

@pytest.mark.parametrize("op", ["add", "sub", "mul", "mod"])
def test_pure_size_arithmetic_is_sympys_and_shared(op):
    env, (b, t) = _env(0)
    plain = {"add": sympy.Add, "sub": lambda x, y: x - y, "mul": sympy.Mul,
             "mod": lambda x, y: sympy.Integer(x % y) if x.is_Integer and y.is_Integer else None}[op]
    exprs = [b, t, b * t, 2 * b + 3, sympy.Integer(64), sympy.Integer(1)]
    for a, c in itertools.product(exprs, repeat=2):
        if op == "mod" and not c.is_Integer:
            continue
        x, y = SymNode(a, env, int), SymNode(c, env, int)
        node = getattr(x, op)(y)
        assert getattr(SymNode(a, env, int), op)(SymNode(c, env, int)) is node   # one node per value
        expected = plain(a, c)
        if expected is not None:
            assert sympy.expand(node.expr - expected) == 0
        assert node.hint == env.hint_of(node.expr)


def test_shared_nodes_carry_no_constant_the_program_fixed():
    env, (b, _) = _env(2)
    x = SymNode(b, env, int)
    assert x.wrap_int(3) is x.wrap_int(3) and x.wrap_int(3).constant is None
    fixed = x._fixed(4, int)
    assert fixed.constant == 4 and fixed is not x.wrap_int(4) and x.wrap_int(4).constant is None
    assert x.wrap_bool(True) is x.wrap_bool(True) and x._fixed(True, bool) is not x.wrap_bool(True)
    other = ShapeEnv()
    assert SymNode(b, other, int).wrap_int(3) is not x.wrap_int(3)   # nodes never cross environments


# -- softmax in closed form ------------------------------------------------------------------

SOFTMAXES = [(aten._softmax.default, (False,), {}), (aten._log_softmax.default, (False,), {}),
             (aten._safe_softmax.default, (), {}), (aten._safe_softmax.default, (), {"dtype": torch.float64})]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("func,rest,kwargs", SOFTMAXES, ids=["softmax", "log_softmax", "safe", "safe f64"])
def test_softmax_closed_form_is_eager_at_every_size(layout, dim, func, rest, kwargs):
    from graphport.capture.layer_meta import layer_meta
    env, (b, t) = _env(0)
    x, make = _strided((b, t, 6), env, layout)
    before = _asked(env)
    out = layer_meta(func, (x, dim, *rest), kwargs)
    assert out is not None and _asked(env) == before
    for values in (dict(zip((b, t), combo)) for combo in itertools.product(SIZES, repeat=2)):
        expected = func(make(torch.randn(_concrete((b, t, 6), values))), dim, *rest, **kwargs)
        assert out.dtype == expected.dtype
        _check(out, expected, values)


def test_softmax_closed_form_leaves_what_eager_refuses_to_torch():
    from graphport.capture.layer_meta import layer_meta
    env, (b, t) = _env(0)
    x, _ = _strided((b, t, 6), env, "row-major")
    assert layer_meta(aten._softmax.default, (x, 3, False), {}) is None   # a dimension out of range
    assert layer_meta(aten._safe_softmax.default, (x, -4), {}) is None
    half = torch.empty((symint(b, env), 6), dtype=torch.float16, device="meta")
    assert layer_meta(aten._softmax.default, (half, -1, True), {}) is None   # eager's CPU kernel refuses it


# -- exported programs that take these paths, against eager ------------------------------------

class _FusedAttention(torch.nn.Module):
    """GPT-2's attention shape logic: one fused projection sliced into q, k, v (views of a
    tensor that is not row-major), heads split with a -1 and transposed, an additive mask
    made with unsqueeze, softmax, and the heads merged back."""

    def __init__(self, width: int = 16, heads: int = 4):
        super().__init__()
        self.qkv, self.out, self.heads = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width), heads

    def forward(self, x, mask):
        b, t, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (z.view(b, t, -1, width // self.heads).transpose(1, 2) for z in (q, k, v))
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -1e4
        weights = torch.softmax(q @ k.transpose(-1, -2) * 0.5 + bias, dim=-1)
        merged = (weights @ v).transpose(1, 2).reshape(b, t, width)
        return self.out(merged), torch.log_softmax(merged, dim=1)


@pytest.mark.parametrize("least", [0, 2])
def test_exported_attention_is_eager_at_small_and_in_range_sizes(least):
    import graphport as gp
    torch.manual_seed(0)
    model = _FusedAttention().eval()
    x, mask = torch.randn(2, 5, 16), torch.ones(2, 5)
    t = gp.Dim("t", min=least, max=32)
    with pytest.warns(UserWarning, match="refused at call time") if least == 0 else contextlib.nullcontext():
        ep = gp.export(model, (x, mask), dynamic_shapes=({1: t}, {1: t}))
    run = ep.module()
    for seq in sorted({least, 1, 2, 3, 9, 32} - set(range(least))):
        x, mask = torch.randn(2, seq, 16), (torch.rand(2, seq) > 0.3).float()
        if seq == 0:   # eager's view(b, 0, -1, 4) is ambiguous and raises: the program refuses the size
            with pytest.raises(RuntimeError, match="ambiguous"):
                model(x, mask)
            with pytest.raises(AssertionError):
                run(x, mask)
            continue
        expected, got = model(x, mask), run(x, mask)
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)

"""The closed-form metadata of pointwise ops, normalization layers and linear (capture/
pointwise_meta.py, layer_meta.py) against eager: the symbolic shape and strides the closed
form gives, evaluated at concrete sizes (0, 1 and larger), must be eager's at those sizes."""
import itertools

import pytest
import sympy
import torch

from graphport.capture.layer_meta import layer_meta
from graphport.capture.pointwise_meta import pointwise_meta
from graphport.shapes.env import ShapeEnv
from graphport.shapes.expr import ValueRange
from graphport.shapes.node import symint

aten = torch.ops.aten
SIZES = (0, 1, 2, 3)


def _env(lower: int):
    env = ShapeEnv()
    syms = [env.create_symbol(4 + i, ValueRange(lower, 64), f"d{i}", (0, i)) for i in range(3)]
    return env, syms


def _meta(shape, env, dtype=torch.float32, clamp: bool = False):
    """A row-major meta tensor; `clamp`: strides as torch lays out a new tensor (max(size, 1))."""
    sizes = [symint(s, env) if isinstance(s, sympy.Basic) else s for s in shape]
    if clamp:
        return torch.empty(sizes, dtype=dtype, device="meta")
    strides, step = [], 1
    for s in reversed(sizes):
        strides.insert(0, step)
        step = step * s
    return torch.empty_strided(sizes, strides, dtype=dtype, device="meta")


def _at(value, values: dict) -> int:
    if isinstance(value, torch.SymInt):
        return int(value.node.expr.xreplace(values))
    return value


def _real(shape, values, dtype=torch.float32):
    concrete = [int(s.xreplace(values)) if isinstance(s, sympy.Basic) else s for s in shape]
    if dtype == torch.bool:
        return torch.rand(concrete) > 0.5
    return torch.randn(concrete).to(dtype)


def _check_against_eager(out_meta, eager_out, values):
    metas = out_meta if isinstance(out_meta, tuple) else (out_meta,)
    eagers = eager_out if isinstance(eager_out, tuple) else (eager_out,)
    assert len(metas) == len(eagers)
    for m, e in zip(metas, eagers):
        assert m.dtype == e.dtype
        assert [_at(s, values) for s in m.shape] == list(e.shape)
        if e.numel() > 0:   # strides of an empty tensor, or of a size-1 dimension, address nothing
            strides = [_at(s, values) for s in m.stride()]
            assert [a for a, n in zip(strides, e.shape) if n != 1] == [b for b, n in zip(e.stride(), e.shape) if n != 1]


def _points(syms, count):
    return [dict(zip(syms[:count], combo)) for combo in itertools.product(SIZES, repeat=count)]


POINTWISE = [
    ("add", lambda a, b: aten.add.Tensor(a, b), [("x", "x"), ("x", "c"), ("x", "1c"), ("x", "0d")]),
    ("mul", lambda a, b: aten.mul.Tensor(a, b), [("x", "x"), ("x", "c")]),
    ("sub alpha", lambda a, b: aten.sub.Tensor(a, b, alpha=2), [("x", "x")]),
    ("div", lambda a, b: aten.div.Tensor(a, b), [("x", "c")]),
    ("where", lambda a, b: aten.where.self(aten.gt.Scalar(a, 0), a, b), [("x", "x")]),
    ("gelu", lambda a, b: aten.gelu.default(a, approximate="tanh"), [("x", None)]),
    ("relu", lambda a, b: aten.relu.default(a), [("x", None)]),
    ("hardtanh", lambda a, b: aten.hardtanh.default(a, 0.0, 6.0), [("x", None)]),
    ("eq", lambda a, b: aten.eq.Tensor(a, b), [("x", "x")]),
    ("pow scalar", lambda a, b: aten.pow.Tensor_Scalar(a, 2), [("x", None)]),
    ("add int to float", lambda a, b: aten.add.Tensor(a, b), [("x", "xi")]),
]


def _operand(kind, syms, env, values=None):
    shape = {"x": (syms[0], 5, syms[1]), "xi": (syms[0], 5, syms[1]), "c": (syms[1],), "1c": (1, 5, syms[1]),
             "0d": ()}[kind]
    dtype = torch.int64 if kind == "xi" else torch.float32
    return shape, dtype


@pytest.mark.parametrize("lower", [0, 2])
@pytest.mark.parametrize("name,fn,cases", POINTWISE, ids=[p[0] for p in POINTWISE])
def test_pointwise_closed_form_is_eager_at_every_size(lower, name, fn, cases):
    env, syms = _env(lower)
    for a_kind, b_kind in cases:
        specs = [_operand(k, syms, env) for k in (a_kind, b_kind) if k is not None]
        metas = [_meta(shape, env, dtype) for shape, dtype in specs]
        captured = {}

        def record(func, args, kwargs):
            out = pointwise_meta(func, args, kwargs)
            captured.setdefault("hits", []).append(out is not None)
            return out if out is not None else func(*args, **kwargs)

        out_meta = _call(fn, metas, record)
        assert captured["hits"][-1], f"{name} {a_kind},{b_kind}: the closed form should apply"
        for values in _points(syms, 2):
            if any(v < lower for v in values.values()):
                continue
            reals = [_real(shape, values, dtype) for shape, dtype in specs]
            _check_against_eager(out_meta, fn(*reals, *([None] * (2 - len(reals)))), values)


def _call(fn, metas, record):
    """Run `fn` on meta tensors, each ATen call through `record` (a dispatch mode)."""
    class Mode(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return record(func, args, kwargs or {})
    with Mode():
        return fn(*metas, *([None] * (2 - len(metas))))


def test_pointwise_declines_what_it_cannot_decide():
    env, syms = _env(2)
    x = _meta((syms[0], 4), env)
    y = _meta((syms[1], 4), env)   # s0 against s1: broadcasting depends on the sizes
    assert pointwise_meta(aten.add.Tensor, (x, y), {}) is None
    gaps = torch.empty_strided((symint(syms[0], env), 4), (8, 1), device="meta")   # not dense
    assert pointwise_meta(aten.relu.default, (gaps,), {}) is None
    static = torch.empty(3, 4, device="meta")
    assert pointwise_meta(aten.relu.default, (static,), {}) is None   # static sizes: torch's kernel is faster


LAYERS = [
    ("layer_norm", aten.native_layer_norm.default,
     lambda x, env, s: (x, [8], torch.randn(8), torch.randn(8), 1e-5), ("b", "t", 8)),
    ("layer_norm no affine", aten.native_layer_norm.default,
     lambda x, env, s: (x, [8], None, None, 1e-5), ("b", "t", 8)),
    ("batch_norm eval", aten._native_batch_norm_legit_no_training.default,
     lambda x, env, s: (x, torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5, 0.1, 1e-5),
     ("b", 3, "t", "t")),
    ("batch_norm train", aten._native_batch_norm_legit_functional.default,
     lambda x, env, s: (x, torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5, True, 0.1, 1e-5),
     ("b", 3, "t")),
    ("batch_norm no stats", aten._native_batch_norm_legit.no_stats,
     lambda x, env, s: (x, torch.randn(3), torch.randn(3), True, 0.1, 1e-5), ("b", 3, "t")),
    ("linear", aten.linear.default, lambda x, env, s: (x, torch.randn(6, 8), torch.randn(6)), ("b", "t", 8)),
    ("linear 2d no bias", aten.linear.default, lambda x, env, s: (x, torch.randn(6, 8), None), ("b", 8)),
]


@pytest.mark.parametrize("lower", [0, 2])
@pytest.mark.parametrize("name,func,make_args,shape", LAYERS, ids=[p[0] for p in LAYERS])
def test_layer_closed_form_is_eager_at_every_size(lower, name, func, make_args, shape):
    env, syms = _env(lower)
    names = {"b": syms[0], "t": syms[1]}
    sym_shape = tuple(names.get(s, s) for s in shape)
    x = _meta(sym_shape, env)
    args = make_args(x, env, syms)
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) and a.device.type != "meta" else a for a in args)
    out = layer_meta(func, meta_args, {})
    assert out is not None, f"{name}: the closed form should apply"
    for values in _points(syms, 2):
        if any(v < lower for v in values.values()):
            continue
        real_args = (_real(sym_shape, values), *args[1:])
        # torch's meta kernel at that size for every output (the path the closed form replaces;
        # eager's CPU kernel leaves unused batch-norm statistics empty), eager for the result
        try:
            eager = func(*real_args)
            at_size = func(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in real_args))
        except (RuntimeError, ZeroDivisionError):
            continue   # torch rejects that size (batch norm's unbiased variance of one value per channel)
        _check_against_eager(out, tuple(at_size) if isinstance(at_size, (tuple, list)) else at_size, values)
        _check_against_eager(out[0] if isinstance(out, tuple) else out, eager[0] if isinstance(eager, tuple) else eager,
                             values)


def test_layer_norm_declines_a_transposed_input():
    env, syms = _env(2)
    x = _meta((8, syms[0]), env).t()
    assert layer_meta(aten.native_layer_norm.default, (x, [8], None, None, 1e-5), {}) is None


def _decomposition_cases():
    m = lambda *shape: torch.empty(shape, device="meta")  # noqa: E731
    x, c, y = m(2, 3, 4, 5), m(3), m(2, 6, 8)
    return {
        aten._native_batch_norm_legit_no_training.default: (x, c, c, c, c, 0.1, 1e-5),
        aten._native_batch_norm_legit.default: (x, c, c, m(3), m(3), True, 0.1, 1e-5),
        aten._native_batch_norm_legit.no_stats: (x, c, c, True, 0.1, 1e-5),
        aten._native_batch_norm_legit_functional.default: (x, c, c, m(3), m(3), True, 0.1, 1e-5),
        aten.native_layer_norm.default: (y, [8], m(8), m(8), 1e-5),
        aten.native_group_norm.default: (m(2, 6, 5), m(6), m(6), 2, 6, 5, 3, 1e-5),
        aten.var_mean.correction: (y, [2]),
        aten.mean.dim: (y, [1], True),
        aten._safe_softmax.default: (y, -1),
        aten._log_softmax.default: (y, -1, False),
        aten.addmm.default: (m(8), m(6, 4), m(4, 8)),
    }


def test_ops_computed_by_decomposition_are_those_whose_meta_is_that_decomposition():
    """META_BY_DECOMPOSITION lists operators whose meta kernel is the decomposition itself:
    the two give the same metadata (an operator with a meta kernel of its own, `_softmax`,
    would not be listed)."""
    from graphport.capture.layer_meta import META_BY_DECOMPOSITION
    cases = _decomposition_cases()
    assert set(cases) == set(META_BY_DECOMPOSITION)
    for op, args in cases.items():
        kwargs = {"correction": 1, "keepdim": True} if op is aten.var_mean.correction else {}
        expected, got = op(*args, **kwargs), META_BY_DECOMPOSITION[op](*args, **kwargs)
        expected = expected if isinstance(expected, (tuple, list)) else (expected,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert [(t.shape, t.stride(), t.dtype) for t in got] == [(t.shape, t.stride(), t.dtype) for t in expected], op


@pytest.mark.parametrize("lower", [0, 2])
def test_pointwise_on_a_permuted_dense_layout_keeps_it(lower):
    env, syms = _env(lower)
    b, t = symint(syms[0], env), symint(syms[1], env)
    x = torch.empty_strided((b, 3, t, 4), (t * 12, 4, 12, 1), device="meta")   # [b, t, 3, 4] permuted
    out = pointwise_meta(aten.mul.Tensor, (x, x), {})
    assert out is not None
    for values in _points(syms, 2):
        if any(v < lower for v in values.values()):
            continue
        real = _real((syms[0], syms[1], 3, 4), values).permute(0, 2, 1, 3)
        _check_against_eager(out, real * real, values)
    other = _meta((syms[0], 3, syms[1], 4), env)
    assert pointwise_meta(aten.mul.Tensor, (x, other), {}) is None   # two layouts: torch decides


MATMULS = [
    ("batched", ("b", 4, "t", 8), ("b", 4, 8, "t")),
    ("broadcast batch", ("b", 4, "t", 8), (1, 4, 8, 5)),
    ("by a matrix", ("b", "t", 8), (8, 5)),
    ("matrix by a batch", ("t", 8), ("b", 8, 5)),
    ("matrices", ("b", 8), (8, "t")),
]


@pytest.mark.parametrize("lower", [0, 2])
@pytest.mark.parametrize("name,a_shape,b_shape", MATMULS, ids=[m[0] for m in MATMULS])
def test_matmul_closed_form_is_eager_at_every_size(lower, name, a_shape, b_shape):
    env, syms = _env(lower)
    names = {"b": syms[0], "t": syms[1]}
    a_sym, b_sym = (tuple(names.get(s, s) for s in shape) for shape in (a_shape, b_shape))
    out = layer_meta(aten.matmul.default, (_meta(a_sym, env), _meta(b_sym, env)), {})
    assert out is not None
    for values in _points(syms, 2):
        if any(v < lower for v in values.values()):
            continue
        _check_against_eager(out, _real(a_sym, values) @ _real(b_sym, values), values)


def test_linear_of_a_transposed_input_is_row_major():
    env, syms = _env(0)
    b, t = symint(syms[0], env), symint(syms[1], env)
    x = torch.empty_strided((t, b, 8), (8, t * 8, 1), device="meta")   # [b, t, 8] transposed
    out = layer_meta(aten.linear.default, (x, torch.empty(6, 8, device="meta"), None), {})
    for values in _points(syms, 2):
        real = _real((syms[0], syms[1], 8), values).transpose(0, 1)
        _check_against_eager(out, torch.nn.functional.linear(real, torch.randn(6, 8)), values)


@pytest.mark.parametrize("bias_shape", [(6,), (1, 6), ("b", 6), ()], ids=["row", "1xrow", "full", "scalar"])
def test_addmm_closed_form_is_eager_at_every_size(bias_shape):
    env, syms = _env(0)
    bias_sym = tuple(syms[0] if s == "b" else s for s in bias_shape)
    a, b = _meta((syms[0], 8), env), torch.empty(8, 6, device="meta")
    out = layer_meta(aten.addmm.default, (_meta(bias_sym, env), a, b), {"beta": 2})
    assert out is not None
    for values in _points(syms, 1):
        real_bias, real_a, real_b = _real(bias_sym, values), _real((syms[0], 8), values), torch.randn(8, 6)
        _check_against_eager(out, torch.addmm(real_bias, real_a, real_b, beta=2), values)


def test_pointwise_reads_no_stride_of_a_size_one_dimension():
    env, syms = _env(0)
    t = symint(syms[1], env)
    expanded = torch.empty_strided((1, 1, t, t), (0, 0, t, 1), dtype=torch.bool, device="meta")   # a [t, t] mask
    other = torch.empty((1, 1, t, t), dtype=torch.bool, device="meta")
    out = pointwise_meta(aten.bitwise_and.Tensor, (expanded, other), {})
    assert out is not None
    for values in _points(syms[1:], 1):
        n = values[syms[1]]
        real = (torch.rand(n, n) > 0.5).expand(1, 1, n, n)
        _check_against_eager(out, real & (torch.rand(1, 1, n, n) > 0.5), values)


REDUCTIONS = [
    ("mean keepdim", lambda x: aten.mean.dim(x, [-1], True)),
    ("mean two dims", lambda x: aten.mean.dim(x, [0, 2])),
    ("sum all", lambda x: aten.sum.dim_IntList(x, None)),
    ("amax", lambda x: aten.amax.default(x, [1], True)),
    ("var_mean", lambda x: aten.var_mean.correction(x, [-1], correction=0, keepdim=True)),
    ("var int dim", lambda x: aten.var.correction(x, 1, correction=1)),
]


@pytest.mark.parametrize("permuted", [False, True], ids=["row-major", "permuted"])
@pytest.mark.parametrize("name,fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_reduction_closed_form_is_eager_at_every_size(name, fn, permuted):
    from graphport.capture.reduction_meta import reduction_meta
    env, syms = _env(0)
    b, t = symint(syms[0], env), symint(syms[1], env)
    x = torch.empty_strided((b, t, 8), (8, b * 8, 1), device="meta") if permuted else _meta((syms[0], syms[1], 8), env)
    out = _call(lambda a, _: fn(a), [x], lambda func, args, kwargs: reduction_meta(func, args, kwargs))
    assert out is not None
    for values in _points(syms, 2):
        real = _real((syms[1], syms[0], 8), values).transpose(0, 1) if permuted else _real((syms[0], syms[1], 8), values)
        try:
            expected = fn(real)
        except (RuntimeError, IndexError):
            continue   # eager rejects the size (amax of an empty dimension), as the program will there
        _check_against_eager(out, tuple(expected) if isinstance(expected, tuple) else expected, values)


RECURRENT = [(op, batch_first, bidirectional, layers, proj)
             for op in ("gru", "lstm") for batch_first in (False, True) for bidirectional in (False, True)
             for layers in (1, 2) for proj in ((0, 2) if op == "lstm" else (0,))]


@pytest.mark.parametrize("op,batch_first,bidirectional,layers,proj", RECURRENT)
def test_recurrent_layers_match_eager_at_every_batch(op, batch_first, bidirectional, layers, proj):
    env, (b, *_) = _env(0)
    cls = torch.nn.GRU if op == "gru" else torch.nn.LSTM
    module = cls(4, 3, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional,
                 **({"proj_size": proj} if proj else {}))
    params = [p.detach() for p in module._flat_weights]
    directions = 2 if bidirectional else 1
    x_shape = (b, 5, 4) if batch_first else (5, b, 4)
    state_shapes = [(layers * directions, b, proj or 3)] + ([(layers * directions, b, 3)] if op == "lstm" else [])
    func = aten.gru.input if op == "gru" else aten.lstm.input

    def call(x, states, weights):
        return func(x, states[0] if op == "gru" else states, weights, True, layers, 0.0, False, bidirectional,
                    batch_first)

    out = layer_meta(func, (_meta(x_shape, env), [_meta(s, env) for s in state_shapes][0] if op == "gru" else
                            [_meta(s, env) for s in state_shapes], [p.to("meta") for p in params], True, layers,
                            0.0, False, bidirectional, batch_first), {})
    assert out is not None
    for values in _points([b], 1):
        if values[b] == 0:
            continue   # eager refuses an empty batch
        eager = call(_real(x_shape, values), [_real(s, values) for s in state_shapes], params)
        _check_against_eager(tuple(out), tuple(eager), values)


VIEWS = [   # (input shape, view shape); s0, s1 are the symbols
    (("s0", 6), ("s0", 2, 3)),
    (("s0", 6), ("s0", -1, 3)),
    (("s0", "s1", 4), (-1, 4)),
    (("s0", "s1", 4), ("s0", "s1", 2, 2)),
    (("s0", "s1", 4), ("s0", 1, "s1", 4)),
    ((2, "s0", 3), (6, "s0")),
    (("s0", 4), (-1,)),
]


@pytest.mark.parametrize("lower", [0, 1])
@pytest.mark.parametrize("func", [aten.view.default, aten._unsafe_view.default])
@pytest.mark.parametrize("before,after", VIEWS)
def test_view_of_row_major_closed_form_is_eager_at_every_size(lower, func, before, after):
    from graphport.capture.view_meta import view_meta
    env, syms = _env(lower)
    named = {"s0": syms[0], "s1": syms[1]}
    shape_in = [named.get(s, s) for s in before]
    shape_out = [symint(named[s], env) if s in named else s for s in after]
    out = view_meta(func, (_meta(shape_in, env), shape_out), {})
    if -1 in after and lower == 0 and any(s in named for s in after):
        assert out is None   # at size 0 that -1 is ambiguous: eager raises, so torch's path decides
        return
    assert out is not None
    for values in _points(syms[:2], 2):
        if any(v < lower for v in values.values()):
            continue
        real = _real(shape_in, values)
        _check_against_eager(out, func(real, [_at(s, values) for s in shape_out]), values)


def test_view_declines_a_tensor_that_is_not_row_major_or_a_size_that_does_not_divide():
    from graphport.capture.view_meta import view_meta
    env, (s0, s1, _) = _env(1)
    transposed = torch.empty_strided((6, symint(s0, env)), (1, 6), device="meta")
    assert view_meta(aten.view.default, (transposed, [-1]), {}) is None
    assert view_meta(aten.view.default, (_meta((s0, 6), env), [symint(s1, env), -1]), {}) is None


@pytest.mark.parametrize("memory_format", [None, torch.preserve_format, torch.contiguous_format])
@pytest.mark.parametrize("layout", ["row-major", "transposed", "permuted"])
def test_clone_closed_form_is_eager_at_every_size(memory_format, layout):
    env, syms = _env(0)
    b, t = symint(syms[0], env), symint(syms[1], env)
    shape, strides = {"row-major": ((b, 5, t), (5 * t, t, 1)), "transposed": ((t, 5, b), (1, t, 5 * t)),
                      "permuted": ((5, t, b), (t, 1, 5 * t))}[layout]
    x = torch.empty_strided(shape, strides, device="meta")
    kwargs = {} if memory_format is None else {"memory_format": memory_format}
    out = pointwise_meta(aten.clone.default, (x,), kwargs)
    assert out is not None
    for values in _points(syms, 2):
        real = _real((syms[0], 5, syms[1]), values)
        real = {"row-major": real, "transposed": real.transpose(0, 2), "permuted": real.permute(1, 2, 0)}[layout]
        _check_against_eager(out, aten.clone.default(real, **kwargs), values)

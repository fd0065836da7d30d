"""The load check's kernel-free rules (serde/meta_rules.py) against torch's meta kernels.

Over drawn calls (sizes 0, 1 and more, shapes that fit and shapes that do not, mixed
dtypes, numbers, unusual keywords): wherever a rule answers, torch's kernel accepts the
call and gives the same dtype and shape; where the kernel refuses, the rule steps aside
(so the kernel's refusal is what the check reports)."""
from __future__ import annotations

import random

import pytest
import torch

from graphport.serde.meta_rules import _RULES, static_result

aten = torch.ops.aten
DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def near(rng, shape):
    """A shape that often fits `shape` (equal, broadcast, shorter) and sometimes does not."""
    choice = rng.random()
    if choice < 0.3:
        return tuple(shape)
    if choice < 0.6:
        return tuple(1 if rng.random() < 0.4 else s for s in shape[rng.randrange(len(shape) + 1):])
    return tuple(rng.choice([0, 1, 2, 3]) for _ in range(rng.randrange(5)))


def shape(rng, dims=None):
    return tuple(rng.choice([0, 1, 2, 3, 5]) for _ in range(rng.randrange(5) if dims is None else dims))


def number(rng):
    return rng.choice([0, 1, 2, -3, 0.5, 2.0, True, False])


def pick(rng, options):
    return options[rng.randrange(len(options))]


def binary_case(rng, op):
    a = shape(rng)
    x = meta(a, pick(rng, DTYPES))
    other = meta(near(rng, a), pick(rng, DTYPES)) if rng.random() < 0.7 else number(rng)
    kwargs = {"alpha": rng.choice([1, 2, 0.5])} if op in (aten.add.Tensor, aten.sub.Tensor) and rng.random() < 0.3 \
        else {}
    return (x, other), kwargs


def unary_case(rng, op):
    kwargs = {"approximate": rng.choice(["none", "tanh", "erf"])} if op is aten.gelu.default and rng.random() < 0.4 \
        else {}
    return (meta(shape(rng), pick(rng, DTYPES)),), kwargs


def pow_case(rng, op):
    return (meta(shape(rng), pick(rng, DTYPES)), rng.choice([2, 3.0, -1, 0.5, True])), {}


def addmm_case(rng, op):
    n, k, m = (rng.choice([0, 1, 2, 4]) for _ in range(3))
    k2 = k if rng.random() < 0.8 else k + 1
    dtype = pick(rng, FLOATS)
    bias = near(rng, (n, m))
    dtypes = [dtype if rng.random() < 0.85 else pick(rng, DTYPES) for _ in range(3)]
    kwargs = {"beta": 0.5} if rng.random() < 0.1 else {}
    return (meta(bias, dtypes[0]), meta((n, k), dtypes[1]), meta((k2, m), dtypes[2])), kwargs


def linear_case(rng, op):
    x = shape(rng, rng.randrange(1, 4))
    out = rng.choice([0, 1, 3])
    inner = x[-1] if rng.random() < 0.8 else x[-1] + 1
    dtype = pick(rng, FLOATS)
    weight = meta((out, inner) if rng.random() < 0.9 else (inner,), dtype if rng.random() < 0.9 else torch.float64)
    bias = rng.choice([None, meta((out,), dtype), meta((out + 1,), dtype), meta((), dtype)])
    return (meta(x, dtype), weight, bias), {}


def layer_norm_case(rng, op):
    x = shape(rng, rng.randrange(1, 4))
    count = rng.randrange(0 if rng.random() < 0.1 else 1, len(x) + 1)
    normalized = list(x[len(x) - count:]) if rng.random() < 0.8 else [s + 1 for s in x[len(x) - count:]]
    dtype = pick(rng, FLOATS if rng.random() < 0.8 else DTYPES)
    affine = [rng.choice([None, meta(tuple(normalized), dtype), meta(tuple(normalized), dtype),
                          meta(tuple(normalized), torch.float64)])
              for _ in range(2)]
    return (meta(x, dtype), normalized, *affine, rng.choice([1e-5, 1e-12])), {}


def attention_case(rng, op):
    b, h, L, S, E, Ev = (rng.choice([0, 1, 2, 3]) for _ in range(6))
    dtype = pick(rng, FLOATS)

    def maybe(t):   # sometimes one size off
        return tuple(s + 1 if rng.random() < 0.07 else s for s in t)
    q, k, v = meta(maybe((b, h, L, E)), dtype), meta(maybe((b, h, S, E)), dtype), meta(maybe((b, h, S, Ev)), dtype)
    kwargs = {}
    if rng.random() < 0.6:
        kwargs["attn_mask"] = meta(near(rng, (b, h, L, S)), rng.choice([torch.bool, dtype, torch.int64]))
    if rng.random() < 0.3:
        kwargs["scale"] = rng.choice([0.125, None])
    if rng.random() < 0.1:
        kwargs["is_causal"] = True
    if rng.random() < 0.1:
        kwargs["dropout_p"] = 0.1
    return (q, k, v), kwargs


def cumsum_case(rng, op):
    x = shape(rng)
    return (meta(x, pick(rng, DTYPES)), rng.randrange(-len(x) - 1, len(x) + 1)), {}


def diff_case(rng, op):
    x = shape(rng, rng.randrange(0, 4))
    dtype = pick(rng, DTYPES)
    dim = rng.randrange(-len(x) - 1, len(x) + 1) if x else 0
    kwargs = {}
    for name in ("prepend", "append"):
        if rng.random() < 0.4 and x:
            other = list(x)
            other[dim % len(x) if -len(x) <= dim < len(x) else 0] = rng.choice([0, 1, 2])
            kwargs[name] = meta(tuple(other), dtype if rng.random() < 0.85 else pick(rng, DTYPES))
    return (meta(x, dtype), rng.choice([1, 1, 1, 2]), dim), kwargs


def where_case(rng, op):
    a = shape(rng)
    condition = meta(near(rng, a), torch.bool if rng.random() < 0.85 else pick(rng, DTYPES))
    other = number(rng) if op is aten.where.ScalarOther else meta(near(rng, a), pick(rng, DTYPES))
    return (condition, meta(a, pick(rng, DTYPES)), other), {}


def mean_case(rng, op):
    x = shape(rng)
    dims = [rng.randrange(-len(x) - 1, len(x) + 1) for _ in range(rng.randrange(0, 3))]
    kwargs = {"keepdim": rng.random() < 0.5} if rng.random() < 0.7 else {}
    return (meta(x, pick(rng, DTYPES)), dims), kwargs


def cat_case(rng, op):
    x = shape(rng, rng.randrange(0, 4))
    dim = rng.randrange(-len(x) - 1, len(x) + 1) if x else 0
    parts = []
    for _ in range(rng.randrange(1, 4)):
        other = list(x)
        if x and -len(x) <= dim < len(x):
            other[dim] = rng.choice([0, 1, 2])
        if rng.random() < 0.1:
            other = list(near(rng, x))
        parts.append(meta(tuple(other), torch.float32 if rng.random() < 0.9 else pick(rng, DTYPES)))
    return (parts, dim), {}


def embedding_case(rng, op):
    table = meta(shape(rng, 2) if rng.random() < 0.8 else shape(rng), pick(rng, DTYPES))
    indices = meta(shape(rng), pick(rng, [torch.int64, torch.int32] * 3 + DTYPES))
    kwargs = rng.choice([{}, {}, {"padding_idx": 0}, {"scale_grad_by_freq": True}, {"sparse": True}])
    return (table, indices), kwargs


def arange_case(rng, op):
    kwargs = {"dtype": rng.choice([None, torch.int64, torch.int32, torch.float32, torch.float64, torch.float16,
                                   torch.bool])} if rng.random() < 0.5 else {}
    if rng.random() < 0.3:
        kwargs["layout"] = torch.strided
    if rng.random() < 0.5:
        kwargs["device"] = torch.device("meta")
    return (rng.choice([0, 1, 2, 7, -1, 2.5, True]),), kwargs


def index_case(rng, op):
    x = shape(rng, rng.randrange(1, 5))
    common = shape(rng, rng.randrange(0, 3))
    indices = [None if rng.random() < 0.35 else
               meta(near(rng, common) if common else common, pick(rng, [torch.int64, torch.int32] * 4 + DTYPES))
               for _ in range(rng.randrange(1, len(x) + 2))]
    return (meta(x, pick(rng, DTYPES)), indices), {}


def gather_case(rng, op):
    x = shape(rng, rng.randrange(0, 4))
    index = tuple(max(0, s + rng.choice([0, 0, 0, -1, 1])) for s in x) if rng.random() < 0.8 else shape(rng)
    dim = rng.randrange(-len(x) - 1, len(x) + 1) if x else rng.choice([0, -1, 1])
    kwargs = {"sparse_grad": True} if rng.random() < 0.1 else {}
    return (meta(x, pick(rng, DTYPES)), dim, meta(index, pick(rng, [torch.int64, torch.int32] * 3 + DTYPES))), kwargs


CASES = {
    **{op: binary_case for op in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.__and__.Tensor,
                                  aten.bitwise_and.Tensor, aten.eq.Tensor, aten.ne.Tensor, aten.ge.Tensor,
                                  aten.gt.Tensor, aten.le.Tensor, aten.lt.Tensor)},
    **{op: lambda rng, op: ((meta(shape(rng), pick(rng, DTYPES)), number(rng)), {})
       for op in (aten.eq.Scalar, aten.ne.Scalar, aten.ge.Scalar, aten.gt.Scalar, aten.le.Scalar, aten.lt.Scalar)},
    **{op: binary_case for op in (aten.div.Tensor, aten.minimum.default, aten.maximum.default, aten.min.other,
                                  aten.max.other)},
    **{op: unary_case for op in (aten.tanh.default, aten.sin.default, aten.cos.default, aten.rsqrt.default,
                                 aten.log.default, aten.exp.default, aten.sqrt.default, aten.sigmoid.default,
                                 aten.neg.default, aten.abs.default, aten.relu.default)},
    aten.where.self: where_case, aten.where.ScalarOther: where_case, aten.mean.dim: mean_case,
    aten.cat.default: cat_case,
    aten.gelu.default: unary_case, aten.pow.Tensor_Scalar: pow_case,
    aten.addmm.default: addmm_case, aten.linear.default: linear_case, aten.layer_norm.default: layer_norm_case,
    aten.scaled_dot_product_attention.default: attention_case, aten.cumsum.default: cumsum_case,
    aten.diff.default: diff_case, aten.embedding.default: embedding_case, aten.arange.default: arange_case,
    aten.index.Tensor: index_case, aten.gather.default: gather_case,
}


def test_every_rule_has_cases():
    assert set(CASES) == set(_RULES)


@pytest.mark.parametrize("op", list(CASES), ids=str)
def test_rule_agrees_with_torchs_kernel(op):
    rng = random.Random(str(op))
    answered = refused = 0
    for _ in range(300):
        args, kwargs = CASES[op](rng, op)
        ruled = static_result(op, args, kwargs)
        try:
            computed = op(*args, **kwargs)
        except Exception:
            refused += 1
            assert ruled is None, f"{op}{args, kwargs}: the rule answers where the kernel refuses"
            continue
        if ruled is not None:
            answered += 1
            assert (ruled.dtype, tuple(ruled.shape)) == (computed.dtype, tuple(computed.shape)), (op, args, kwargs)
            assert ruled.is_meta
    # the draws reach both sides: calls a rule decides, and (where sizes must fit) calls the kernel refuses
    assert answered >= 25
    if op in SIZES_MUST_FIT:
        assert refused >= 5


SIZES_MUST_FIT = {aten.sub.Tensor, aten.__and__.Tensor, aten.bitwise_and.Tensor, aten.div.Tensor,
                  aten.minimum.default, aten.maximum.default, aten.min.other, aten.max.other, aten.addmm.default,
                  aten.linear.default, aten.layer_norm.default, aten.scaled_dot_product_attention.default,
                  aten.cumsum.default, aten.diff.default, aten.where.self, aten.mean.dim, aten.cat.default,
                  aten.embedding.default, aten.arange.default, aten.index.Tensor, aten.gather.default}


def test_symbolic_and_unusual_arguments_step_aside():
    x = meta((2, 3))
    assert static_result(aten.add.Tensor, (x, x), {"alpha": 2}) is None
    assert static_result(aten.add.Tensor, (x, x), {"out": x}) is None
    assert static_result(aten.add.Tensor, (x, x, 1, 2), {}) is None
    assert static_result(aten.atan2.default, (x, x), {}) is None   # no rule: the kernel decides
    assert static_result(aten.add.Tensor, (torch.empty(2, 3), x), {}) is None   # not a meta tensor

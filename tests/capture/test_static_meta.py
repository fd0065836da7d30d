"""The closed forms of capture/static_meta.py give torch's meta kernel's answer, or decline.

Each case calls an operator on meta tensors of concrete sizes (0 to 3) in many layouts: row-
major, transposed, channels-last, sliced (an offset), expanded, and dtypes mixed or not,
some requiring grad. Where the closed form answers, torch's meta kernel (run below autograd,
as capture runs it) must give the same shapes, strides, storage offsets, dtypes and
requires_grad, and must not raise. The default run samples about 3500 of the cases;
GRAPHPORT_SLOW=1 runs all of them (about a million).
"""
from __future__ import annotations

import itertools
import random

import pytest
import torch

from graphport import _torch
from graphport.capture.static_meta import static_meta

aten = torch.ops.aten
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _shapes():
    for ndim in range(0, 5):
        sizes = (0, 1, 2, 3) if ndim <= 3 else (1, 2, 3)
        yield from itertools.product(sizes, repeat=ndim)


def _layouts(shape, dtype):
    """Meta tensors of `shape` in several layouts."""
    def new(s):
        return torch.empty(s, dtype=dtype, device="meta")
    yield new(shape)
    if len(shape) >= 2:
        yield new((*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)
    if len(shape) == 4:
        yield new(shape).to(memory_format=torch.channels_last)
    if len(shape) >= 1:
        yield new((*shape[:-1], shape[-1] + 2))[..., 1:shape[-1] + 1]      # an offset, a row stride
        yield new((1, *shape[1:])).expand(shape) if shape[0] != 1 else new(shape)


def _agree(func, args, kwargs=None) -> bool:
    """Whether the closed form answered; asserts the answer is torch's."""
    kwargs = kwargs or {}
    ours = static_meta(func, args, kwargs)
    if ours is None:
        return False
    with _torch.below_autograd():
        theirs = func(*args, **kwargs)   # raises where torch refuses a call the form answered: a failure
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs), func
    for a, b in zip(ours, theirs):
        assert (a.shape, a.stride(), a.storage_offset(), a.dtype, a.requires_grad, a.device) == \
               (b.shape, b.stride(), b.storage_offset(), b.dtype, b.requires_grad, b.device), \
               (func, [getattr(x, "shape", x) for x in args], [x.stride() for x in args if isinstance(x, torch.Tensor)])
    return True


UNARY = [aten.neg.default, aten.abs.default, aten.relu.default, aten.gelu.default, aten.tanh.default,
         aten.sigmoid.default, aten.silu.default, aten.exp.default, aten.sqrt.default, aten.rsqrt.default]
BINARY = [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.maximum.default,
          aten.minimum.default, aten.pow.Tensor_Tensor, aten.eq.Tensor, aten.lt.Tensor, aten.ge.Tensor]


def _pointwise_cases():
    dtypes = (*FLOATS, torch.bool, torch.int64)
    shapes = _shapes()
    for shape in shapes if _slow() else [(3,), (2, 3), (1, 3), (2, 0, 3), (2, 1, 3, 3), (3, 2, 1, 1)]:
        for dtype in dtypes:
            for x in _layouts(shape, dtype):
                for func in UNARY + [aten.bitwise_not.default, aten.logical_not.default]:
                    yield func, (x,), {}
                yield aten.gelu.default, (x,), {"approximate": "tanh"}
                yield aten.pow.Tensor_Scalar, (x, 2), {}
                yield aten.pow.Tensor_Scalar, (x, 0.5), {}
                yield aten.mul.Scalar, (x, 3.0), {}
                yield aten.gt.Scalar, (x, 0), {}
                yield aten.eq.Scalar, (x, True), {}
                for other_dtype in {dtype, torch.float32, torch.bool}:
                    for y in _layouts(shape, other_dtype):
                        for func in BINARY + [aten.bitwise_and.Tensor, aten.bitwise_or.Tensor]:
                            yield func, (x, y), {}
                        yield aten.add.Tensor, (x, y), {"alpha": 2}
                        yield aten.div.Tensor_mode, (x, y), {"rounding_mode": "floor"}
                        yield aten.where.self, (torch.empty(shape, dtype=torch.bool, device="meta"), x, y), {}
                if len(shape) >= 1:
                    yield aten.add.Tensor, (x, torch.empty(shape[-1:], dtype=dtype, device="meta")), {}


def _sample(cases, n):
    """All the cases with GRAPHPORT_SLOW=1 (lazily), else n of them drawn with a fixed seed."""
    if _slow():
        return cases
    cases = list(cases)
    random.Random(0).shuffle(cases)
    return cases[:n]


def _slow() -> bool:
    import os
    return os.environ.get("GRAPHPORT_SLOW") == "1"


def test_pointwise_matches_torch():
    answered = sum(_agree(func, args, kwargs) for func, args, kwargs in _sample(_pointwise_cases(), 700))
    assert answered > 10


def _row_major_cases():
    """Calls in the forms' conditions but for a few (0-dim, channels-last as well)."""
    for shape in _shapes():
        for dtype in FLOATS:
            x, y = (torch.empty(shape, dtype=dtype, device="meta") for _ in range(2))
            for func in UNARY:
                yield func, (x,), {}
            for func in BINARY:
                yield func, (x, y), {}
            yield aten.where.self, (torch.empty(shape, dtype=torch.bool, device="meta"), x, y), {}
            yield aten.mul.Scalar, (x, 2), {}
            yield aten.lt.Scalar, (x, 0.5), {}
        flags = torch.empty(shape, dtype=torch.bool, device="meta")
        yield aten.bitwise_and.Tensor, (flags, flags), {}
        yield aten.logical_not.default, (flags,), {}


def test_pointwise_row_major_matches_torch():
    cases = list(_sample(_row_major_cases(), 400))
    answered = sum(_agree(func, args, kwargs) for func, args, kwargs in cases)
    assert answered > len(cases) * 3 // 4


BROADCASTING = [aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.maximum.default,
                aten.minimum.default, aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor,
                aten.ge.Tensor]


def _broadcast_partners(shape):
    """Shapes that broadcast against `shape`: dimensions set to 1, leading ones dropped or added."""
    for mask in itertools.product((False, True), repeat=len(shape)):
        partner = tuple(1 if ones else n for ones, n in zip(mask, shape))
        yield partner
        yield partner[1:]
        yield (2, *partner) if len(partner) < 4 else partner


def _broadcasting_cases():
    for shape in _shapes():
        for partner in _broadcast_partners(shape):
            for dtype in (torch.float32, torch.float16):
                a, b = torch.empty(shape, dtype=dtype, device="meta"), torch.empty(partner, dtype=dtype, device="meta")
                for func in BROADCASTING:
                    yield func, (a, b), {}
                    yield func, (b, a), {}
                yield aten.where.self, (torch.empty(partner, dtype=torch.bool, device="meta"), a, b), {}
                yield aten.where.self, (torch.empty(shape, dtype=torch.bool, device="meta"), b, b), {}
            flags = torch.empty(shape, dtype=torch.bool, device="meta")
            yield aten.bitwise_and.Tensor, (flags, torch.empty(partner, dtype=torch.bool, device="meta")), {}
        yield aten.add.Tensor, (torch.empty(shape, device="meta"), torch.empty((*shape, 2), device="meta")), {}


def test_broadcasting_matches_torch():
    cases = list(_sample(_broadcasting_cases(), 1000))
    answered = sum(_refused_or_agree(func, args, kwargs) for func, args, kwargs in cases)
    assert answered > len(cases) // 2


def _matrices(m, n, dtype):
    yield torch.empty(m, n, dtype=dtype, device="meta")
    yield torch.empty(n, m, dtype=dtype, device="meta").t()


def _refused_or_agree(func, args, kwargs=None) -> bool:
    """As _agree, where torch may refuse the call: the form must then decline it."""
    try:
        with _torch.below_autograd():
            func(*args, **(kwargs or {}))
    except RuntimeError:
        assert static_meta(func, args, kwargs or {}) is None
        return False
    return _agree(func, args, kwargs)


def _addmm_cases():
    for (m, k, n), dtype in itertools.product(itertools.product((0, 1, 2, 3), repeat=3), (*FLOATS, torch.int64)):
        biases = [torch.empty(s, dtype=dtype, device="meta") for s in ((n,), (1, n), (m, n), (m, 1), (1,), ())]
        biases += [torch.empty(n, m, dtype=dtype, device="meta").t(),
                   torch.empty(1, n, dtype=dtype, device="meta").expand(m, n)]
        for bias, a, b in itertools.product(biases, _matrices(m, k, dtype), _matrices(k, n, dtype)):
            yield (bias, a, b), {}
        yield (biases[0], torch.empty(m, k, dtype=dtype, device="meta"), torch.empty(k, n, dtype=dtype, device="meta")), \
            {"beta": 2}
        yield (biases[0], torch.empty(m, k, dtype=dtype, device="meta"),
               torch.empty(k, n, dtype=torch.float32, device="meta")), {}
        yield (biases[0], torch.empty(m, k + 1, dtype=dtype, device="meta"), torch.empty(k, n, dtype=dtype, device="meta")), {}


def test_addmm_matches_torch():
    cases = list(_sample(_addmm_cases(), 500))
    answered = sum(_refused_or_agree(aten.addmm.default, args, kwargs) for args, kwargs in cases)
    assert answered > len(cases) // 4


def _layer_norm_cases():
    for shape in _shapes():
        for k, dtype in itertools.product(range(0, len(shape) + 1), FLOATS):
            normalized = list(shape[len(shape) - k:])
            params = [None, torch.empty(normalized, dtype=dtype, device="meta").requires_grad_()]
            for x in _layouts(shape, dtype):
                for weight, bias in itertools.product(params, params):
                    yield x, normalized, weight, bias, 1e-5
            if k:
                yield torch.empty(shape, dtype=dtype, device="meta"), [n + 1 for n in normalized], None, None, 1e-5
                yield torch.empty(shape, dtype=dtype, device="meta"), normalized, params[1].float(), None, 1e-5


def test_layer_norm_matches_torch():
    cases = list(_sample(_layer_norm_cases(), 500))
    answered = sum(_refused_or_agree(aten.native_layer_norm.default, args) for args in cases)
    assert answered > len(cases) // 5


def _batch_norm_cases():
    for shape in _shapes():
        if len(shape) < 2:
            continue
        channels = shape[1]
        for dtype in FLOATS:
            stats = [torch.empty(channels, dtype=dtype, device="meta") for _ in range(2)]
            for x in _layouts(shape, dtype):
                for affine in (None, torch.empty(channels, dtype=dtype, device="meta").requires_grad_()):
                    yield x, affine, affine, *stats, 0.1, 1e-5
            yield (torch.empty(shape, dtype=dtype, device="meta"), None, None,
                   torch.empty(channels, dtype=torch.float32, device="meta"), stats[1], 0.1, 1e-5)


def test_batch_norm_inference_matches_torch():
    cases = list(_sample(_batch_norm_cases(), 400))
    answered = sum(_refused_or_agree(aten._native_batch_norm_legit_no_training.default, args) for args in cases)
    assert answered > len(cases) // 5


def test_addmm_declines_what_torch_rejects():
    a, b = torch.empty(2, 3, device="meta"), torch.empty(4, 5, device="meta")
    assert static_meta(aten.addmm.default, (torch.empty(5, device="meta"), a, b), {}) is None
    assert static_meta(aten.addmm.default, (torch.empty(3, device="meta"), torch.empty(2, 4, device="meta"), b), {}) is None


@pytest.mark.parametrize("func,args,kwargs", [
    (aten.add.Tensor, (torch.empty(2, 3, device="meta"), torch.empty(3, 2, device="meta")), {}),
    (aten.gelu.default, (torch.empty(2, 3, device="meta"),), {"approximate": "cubic"}),
    (aten.where.self, (torch.empty(2, 3, device="meta", dtype=torch.uint8), torch.empty(2, 3, device="meta"),
                       torch.empty(2, 3, device="meta")), {}),
    (aten.bitwise_and.Tensor, (torch.empty(2, 3, device="meta"), torch.empty(2, 3, device="meta")), {}),
    (aten.mul.Scalar, (torch.empty(2, 3, device="meta"), True), {}),
    (aten.add.Tensor, (torch.empty((), device="meta"), torch.empty((), device="meta")), {}),
])
def test_declines_outside_its_conditions(func, args, kwargs):
    assert static_meta(func, args, kwargs) is None

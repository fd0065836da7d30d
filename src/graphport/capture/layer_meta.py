"""Output metadata of normalization layers and `linear` on symbolic sizes, in closed form.

torch computes these with Python decompositions that ask dozens of size questions per
call (broadcasting the statistics, type promotion, the strides of every intermediate).
For the common call (a row-major input, parameters of the expected shapes) the answer is
known at every size: each output is a new row-major tensor whose shape follows the input.

- `native_layer_norm`: the output has the input's shape; the mean and rstd have the
  input's leading shape followed by ones (they are reductions with keepdim, and torch
  makes reduction results row-major).
- batch norm (`_native_batch_norm_legit*`): the output is the input's elementwise
  normalization by per-channel statistics broadcast as [1, C, 1, ...], so it has the
  input's shape and, for a row-major input, row-major strides (see pointwise_meta); the
  saved statistics and updated running stats have per-channel shapes, which need a static
  channel count.
- `linear` and `matmul` of matrices: a fresh matrix product (mm or bmm) viewed to the
  leading shape (a bias added elementwise), row-major at every size and input layout.
- softmax (`_softmax`, `_log_softmax`, `_safe_softmax`): a new row-major tensor of the
  input's shape whatever the input's layout (eager's kernels allocate the output contiguous;
  `_safe_softmax` is `where(all-masked rows, 0, softmax)`, all three operands row-major).
  torch's Python decomposition, which the symbolic path would otherwise run, asks size
  questions for the reduction, the mask and the `where` (a tenth of T5's dynamic capture).
- `gru` and `lstm` (batched): the output is a new row-major [time, batch, directions *
  hidden] tensor, transposed to [batch, time, ...] for batch_first; the final states are
  new row-major tensors of the initial states' shapes.

dtypes (and the statistics' static shapes) are read from the operator run on tiny tensors
of the same dtypes and static sizes, which also raises eager's error for a call eager
rejects. Anything outside these conditions returns None and takes torch's path.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _torch
from .meta_probe import probe
from .pointwise_meta import broadcast_shapes, contiguous, same_size, same_sizes, symbolic_sizes

aten = torch.ops.aten

# Operators whose meta kernel in torch is a Python decomposition into ATen operators:
# running that same decomposition on the tracers gives the same metadata, and its
# pointwise pieces take the closed forms (pointwise_meta.py) instead of torch's reference code.
META_BY_DECOMPOSITION = {op: _torch.decomposition_table()[op] for op in (
    aten._native_batch_norm_legit_no_training.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_functional.default,
    aten.native_layer_norm.default, aten.native_group_norm.default, aten.var_mean.correction, aten.mean.dim,
    aten._safe_softmax.default, aten._log_softmax.default, aten.addmm.default)}

def layer_meta(func, args: tuple, kwargs: dict) -> Any:
    """Output meta tensor(s) of a call to one of the operators above, or None."""
    rule = _RULES.get(func)
    if rule is None or not symbolic_sizes([a for a in args if isinstance(a, torch.Tensor)]):
        return None
    if set(kwargs) - _KWARGS.get(func, set()):
        return None
    return rule(func, *args, **kwargs)


def _layer_norm(func, x, normalized_shape, weight, bias, eps):
    k = len(normalized_shape)
    lead = x.dim() - k
    if lead < 0 or not contiguous(x) or any(isinstance(s, torch.SymInt) for s in normalized_shape):
        return None
    if not all(same_size(a, b) for a, b in zip(x.shape[lead:], normalized_shape)):
        return None
    if not all(p is None or (same_sizes(p.shape, normalized_shape) and contiguous(p)) for p in (weight, bias)):
        return None
    dtypes = probe(func, (x, list(normalized_shape), weight, bias, eps))
    stat_shape = (*x.shape[:lead], *([1] * k))
    return (_new(x.shape, dtypes[0][0]), _new(stat_shape, dtypes[1][0]), _new(stat_shape, dtypes[2][0]))


def _batch_norm(func, x, *rest):
    """Every variant: the first output input-shaped, the others per channel."""
    if x.dim() < 2 or isinstance(x.shape[1], torch.SymInt) or not contiguous(x):
        return None
    channels = x.shape[1]
    tensors = [a for a in rest if isinstance(a, torch.Tensor)]
    if not all(same_sizes(t.shape, (channels,)) and contiguous(t) for t in tensors):
        return None
    outputs = probe(func, (x, *rest))
    (dtype, _), *stats = outputs
    return (_new(x.shape, dtype), *(_new(shape, dt) for dt, shape in stats))


def _linear(func, x, weight, bias=None):
    if x.dim() < 1 or weight.dim() != 2:
        return None
    if any(isinstance(s, torch.SymInt) for s in weight.shape) or not same_size(x.shape[-1], weight.shape[1]):
        return None
    if bias is not None and (not same_sizes(bias.shape, (weight.shape[0],)) or not contiguous(bias)):
        return None
    dtype = probe(func, (x, weight, bias))[0][0]
    return _new((*x.shape[:-1], weight.shape[0]), dtype)


def _addmm(func, bias, a, b, *, beta=1, alpha=1):
    """`bias + a @ b`: a new row-major matrix (torch's own decomposition adds the bias to the
    product, whose layout wins), the bias broadcast to it."""
    if a.dim() != 2 or b.dim() != 2 or not same_size(a.shape[1], b.shape[0]):
        return None
    shape = (a.shape[0], b.shape[1])
    full = broadcast_shapes([tuple(bias.shape), shape]) if bias.dim() <= 2 else None
    if full is None or not same_sizes(full, shape):
        return None
    dtype = probe(func, (bias, a, b))[0][0]
    return _new(shape, dtype)


def _matmul(func, a, b):
    """Both operands matrices or batches of them: the product of the broadcast batches,
    computed by mm or bmm into a new tensor and viewed to the batch shape (a 2-D @ N-D
    product is transposed back with `.contiguous()`), so row-major at every size."""
    if a.dim() < 2 or b.dim() < 2 or not same_size(a.shape[-1], b.shape[-2]):
        return None
    batch = broadcast_shapes([tuple(a.shape[:-2]), tuple(b.shape[:-2])])
    if batch is None:
        return None
    dtype = probe(func, (a, b))[0][0]
    return _new((*batch, a.shape[-2], b.shape[-1]), dtype)


def _softmax(func, x, dim, third=None, **kwargs):
    """`third`: `_safe_softmax`'s dtype, or the others' half_to_float (eager's CPU kernel
    refuses it, so such a call takes torch's path)."""
    rank = max(x.dim(), 1)
    if (func is not aten._safe_softmax.default and third) or type(dim) is not int or not -rank <= dim < rank:
        return None   # a dimension out of range: torch's path raises eager's error
    dtype = probe(func, (x, dim) if third is None else (x, dim, third), kwargs)[0][0]
    return _new(x.shape, dtype)


def _recurrent(gates: int):
    """gru (3 gates) or lstm (4; its hx is [h0, c0], and h0 may be projected)."""
    def rule(func, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
        directions = 2 if bidirectional else 1
        if x.dim() != 3 or len(states) != (2 if gates == 4 else 1) or not contiguous(x) \
                or not all(isinstance(h, torch.Tensor) and h.dim() == 3 for h in states):
            return None
        hidden, out_size = states[-1].shape[2], states[0].shape[2]
        tensors = [x, *states, *params]
        per_layer = (4 if has_biases else 2) + (1 if not same_size(hidden, out_size) else 0)
        if len({t.dtype for t in tensors}) != 1 or not x.dtype.is_floating_point \
                or len(params) != num_layers * directions * per_layer \
                or any(isinstance(s, torch.SymInt) for p in params for s in p.shape) \
                or any(isinstance(s, torch.SymInt) for h in states for s in (h.shape[0], h.shape[2])):
            return None
        batch = x.shape[0] if batch_first else x.shape[1]
        if not all(same_sizes(h.shape[:2], (num_layers * directions, batch)) for h in states) \
                or not same_sizes(params[0].shape, (gates * hidden, x.shape[2])):
            return None
        time = x.shape[1] if batch_first else x.shape[0]
        out = _new((time, batch, directions * out_size), x.dtype)
        return (out.transpose(0, 1) if batch_first else out, *(_new(h.shape, x.dtype) for h in states))
    return rule


_RULES: dict[Any, Callable] = {
    aten.gru.input: _recurrent(3),
    aten.lstm.input: _recurrent(4),
    aten.native_layer_norm.default: _layer_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm,
    aten._native_batch_norm_legit.default: _batch_norm,
    aten._native_batch_norm_legit.no_stats: _batch_norm,
    aten._native_batch_norm_legit_functional.default: _batch_norm,
    aten.linear.default: _linear,
    aten.matmul.default: _matmul,
    aten.addmm.default: _addmm,
    aten._softmax.default: _softmax,
    aten._log_softmax.default: _softmax,
    aten._safe_softmax.default: _softmax,
}
# the keyword arguments a rule takes (others take none)
_KWARGS = {aten.addmm.default: {"beta", "alpha"}, aten._safe_softmax.default: {"dtype"}}


def _new(shape, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device="meta")

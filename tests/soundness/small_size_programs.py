"""Programs whose behaviour at sizes 0 and 1 of a dynamic dimension differs from sizes >= 2.

Capture may answer a size question as if every dynamic size were at least 2; the sizes 0
and 1 are then proven separately. Each program here makes that difference observable:
an output shape, a broadcast, a layout decision (`contiguous()`, `reshape` and `flatten`
return the tensor itself, or a view, at size 1 and a copy above), a stride or offset read by
user code, a kernel that raises at a small size, or user code that branches on the size.

A `Program` says how to build its inputs at any size `n` of the dynamic dimension and how
to name that dimension in `dynamic_shapes`. `tests/soundness/test_small_size_paths.py`
exports each one and calls it at 0, 1, 2, 3 and the maximum.

torch.export as a reference (torch 2.13, same Dims): its graph keeps `contiguous`, `reshape`
and in-place operators unfunctionalized, so the aliasing programs below answer right there at
sizes 0 and 1 (whether to copy is decided at run time), where graphport's functional graph
refuses those sizes. It answers wrong where a decision is made at capture: branching on the
size (`branch_on_size_one`, `branch_on_numel_zero`, `size_one_as_broadcast_flag`), on the
layout (`is_contiguous_branch`, `slice_is_contiguous_branch`, `elementwise_output_layout_branch`,
`channels_last_query_branch`), a squeezed size flowing into Python
(`squeeze_size_flows_into_python`), a kernel that raises at batch 1 (`batch_norm_train`,
`instance_norm_spatial`), and the offset of a size-0 dim (`storage_offset_read`); it refuses
`stride_of_contiguous_as_strided` and `stride_read_of_views` at export. graphport treats a read
of strides or an offset as an assumption that the tensor's sizes are at least 2, proven at 0
and 1 by a trace there, which sees eager's strides (`max(size, 1)` products). It answers right on
the programs marked `xfail` for graphport's lost writes through aliases
(`item_count_*_write`, `masked_rows_reshape_write`), again because its graph keeps the views
and in-place operators.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX = 16


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., Any]            # a function, or (when `module`) a factory of an nn.Module
    make: Callable[[int], tuple]      # the inputs at size n of the dynamic dimension
    spec: Callable[[Callable[[str], Any]], Any]   # dynamic_shapes, given dim(name) -> a Dim in range
    min: int = 0                      # the declared minimum of the Dim
    example: int = 4
    module: bool = False
    common: bool = False              # an everyday model: must run at every size in range
    extra: tuple = field(default=())  # more calls: input tuples whose sizes are not all n
    xfail: str | None = None          # a wrong answer of the current code, described
    xfail_auto: str | None = None     # the same, with every dynamic dimension Dim.AUTO


PROGRAMS: list[Program] = []


def program(name, make, spec=lambda dim: ({0: dim("n")},), **kw):
    """Register the decorated function (or module factory) under `name`."""
    def register(fn):
        PROGRAMS.append(Program(name, fn, make, spec, **kw))
        return fn
    return register


def randn(*shape):
    return torch.randn(*shape)


# ------------------------------------------------------------------ squeeze, flatten, unflatten
# At size 1 squeeze() removes the dimension, so the output has another rank.

@program("squeeze_all", lambda n: (randn(n, 1, 3),))
def _squeeze_all(x):
    return x.squeeze() * 2


@program("squeeze_dim", lambda n: (randn(n, 3),))
def _squeeze_dim(x):
    return x.squeeze(0) + 1


@program("squeeze_dims_tuple", lambda n: (randn(2, n, 1),), spec=lambda dim: ({1: dim("n")},))
def _squeeze_dims_tuple(x):
    return x.squeeze((1, 2)).sum(-1)


@program("unsqueeze_then_squeeze", lambda n: (randn(n, 3),))
def _unsqueeze_then_squeeze(x):
    return x.unsqueeze(0).squeeze().cumsum(-1)


@program("squeeze_then_reduce_last", lambda n: (randn(n, 4),))
def _squeeze_then_reduce_last(x):
    return x.squeeze().sum(-1)


@program("flatten_batch_then_linear", lambda n: (randn(n, 3, 4), randn(4, 5)), spec=lambda dim: ({0: dim("n")}, None))
def _flatten_batch_then_linear(x, w):
    return x.flatten(0, 1) @ w


@program("unflatten_dynamic_dim", lambda n: (randn(n, 6),))
def _unflatten_dynamic_dim(x):
    return x.unflatten(0, (1, -1)).sum(0) + x.unflatten(1, (2, 3)).mean(-1).sum(-1, keepdim=True)


@program("squeeze_size_flows_into_python", lambda n: (randn(n, 4),))
def _squeeze_size_flows_into_python(x):
    rows = x.squeeze().shape[0]       # 4 at n = 1, n otherwise
    return torch.arange(rows) * 2 + x.squeeze().sum()


# ------------------------------------------------------------------ contiguous(): alias at 1, copy at >= 2
# `t.contiguous()` returns `t` itself when `t` is already contiguous, and a size-1 dimension's
# stride does not count: transposing, permuting, slicing or expanding a batch of one gives a
# contiguous tensor, so contiguous() aliases the input where at batch >= 2 it copies.

@program("transpose_contiguous_mutate_result", lambda n: (randn(n, 3, 5),))
def _transpose_contiguous_mutate_result(x):
    y = x.transpose(0, 1).contiguous()
    y.add_(1)
    return x * 1, y


@program("permute_contiguous_mutate_result", lambda n: (randn(n, 3, 4),))
def _permute_contiguous_mutate_result(x):
    y = x.permute(1, 2, 0).contiguous()
    y.mul_(2)
    return x.sum(0), y


@program("slice_contiguous_setitem_result", lambda n: (randn(n, 6),))
def _slice_contiguous_setitem_result(x):
    y = x[:, :3].contiguous()
    y[0] = 0
    return x + 0, y


@program("expand_contiguous_mutate_result", lambda n: (randn(1, 4), randn(n, 4)),
         spec=lambda dim: (None, {0: dim("n")}))
def _expand_contiguous_mutate_result(x, y):
    e = x.expand_as(y).contiguous()
    e.add_(1)
    return x + 0, e + y


@program("transpose_contiguous_mutate_original", lambda n: (randn(n, 3, 5),))
def _transpose_contiguous_mutate_original(x):
    y = x.transpose(0, 1).contiguous()
    x.add_(1)
    return y * 1


@program("transpose_contiguous_setitem_read_original", lambda n: (randn(n, 4),))
def _transpose_contiguous_setitem_read_original(x):
    y = x.t().contiguous()
    y[0] = 0
    return x.clone()


@program("channels_last_contiguous_mutate", lambda n: (randn(2, n, 3, 3),), spec=lambda dim: ({1: dim("n")},))
def _channels_last_contiguous_mutate(x):
    y = x.contiguous(memory_format=torch.channels_last)
    y.add_(1)
    return x + 0, y


@program("broadcast_tensors_contiguous_mutate", lambda n: (randn(n, 1, 3), randn(4, 3)),
         spec=lambda dim: ({0: dim("n")}, None))
def _broadcast_tensors_contiguous_mutate(x, y):
    a, b = torch.broadcast_tensors(x, y)
    b = b.contiguous()
    b.add_(1)          # at n = 1, b is y itself
    return a + b, y + 0


@program("step_slice_contiguous_mutate", lambda n: (randn(n, 4),), example=6)
def _step_slice_contiguous_mutate(x):
    y = x[::2].contiguous()   # (n + 1) // 2 rows: one row, an alias, at n = 1 AND n = 2
    y.add_(1)
    return x + 0, y


@program("select_contiguous_mutate", lambda n: (randn(n, 3),))
def _select_contiguous_mutate(x):
    y = x.select(1, 0).contiguous()   # stride 3: contiguous only with at most one element
    y.mul_(-1)
    return x + 0, y


@program("diagonal_contiguous_zero", lambda n: (randn(n, n),), spec=lambda dim: ({0: dim("n"), 1: dim("n")},))
def _diagonal_contiguous_zero(x):
    d = x.diagonal().contiguous()
    d.zero_()
    return x + 0


@program("batched_mT_contiguous_mutate", lambda n: (randn(2, n, 3),), spec=lambda dim: ({1: dim("n")},))
def _batched_mT_contiguous_mutate(x):
    y = x.mT.contiguous()
    y[..., 0] = 5
    return x + 0, y


@program("tail_slice_transpose_contiguous", lambda n: (randn(n, 3),), example=5)
def _tail_slice_transpose_contiguous(x):
    y = x[1:].t().contiguous()   # n - 1 rows: an alias at n = 2, where n itself is not small
    y.add_(1)
    return x + 0, y


@program("two_dims_transpose_contiguous", lambda n: (randn(n, 3),), spec=lambda dim: ({0: dim("n"), 1: dim("m")},),
         extra=((randn(1, 5),), (randn(5, 1),), (randn(1, 1),), (randn(0, 1),), (randn(1, 0),), (randn(3, 2),)))
def _two_dims_transpose_contiguous(x):
    y = x.t().contiguous()       # an alias where either size is 1 (or the tensor is empty)
    y.mul_(3)
    return x + 0


@program("expand_reshape_mutate", lambda n: (randn(1, 4), randn(n, 4)), spec=lambda dim: (None, {0: dim("n")}))
def _expand_reshape_mutate(x, y):
    z = x.expand_as(y).reshape(-1)   # a view of x at n <= 1, a copy above
    z.add_(1)
    return x + 0, z


@program("noncontiguous_input_contiguous_mutate", lambda n: (randn(3, n).t(),))
def _noncontiguous_input_contiguous_mutate(x):
    y = x.contiguous()               # x itself at n <= 1: its strides (1, n) are then contiguous
    y.add_(1)
    return x + 0, y


@program("contiguous_then_view_as_mutate", lambda n: (randn(n, 3), randn(3, n)),
         spec=lambda dim: ({0: dim("n")}, {1: dim("n")}))
def _contiguous_then_view_as_mutate(x, w):
    y = x.t().contiguous().view_as(w)
    y.add_(w)
    return x + 0, y


@program("read_before_write_through_reshape", lambda n: (randn(n, 3),))
def _read_before_write_through_reshape(x):
    y = x.t().reshape(-1)
    before = x * 2
    y.add_(1)
    return before, x * 2


@program("elementwise_output_layout_branch", lambda n: (randn(n, 3),))
def _elementwise_output_layout_branch(x):
    y = x.t() * 2                # the output takes the input's layout: contiguous only at n <= 1
    if y.is_contiguous():
        return y.view(-1)
    return y.reshape(-1) + 1


@program("elementwise_output_contiguous_mutate", lambda n: (randn(n, 3),))
def _elementwise_output_contiguous_mutate(x):
    y = x.t() * 2
    z = y.contiguous()           # y itself at n <= 1: the write shows in y
    z.add_(1)
    return y, z


@program("conv_channels_last_layout_branch",
         lambda n: (randn(n, 3, 5, 5).contiguous(memory_format=torch.channels_last),),
         module=True)
def _conv_channels_last_layout_branch():
    return _LayoutBranch()


class _LayoutBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 1, 3)   # one output channel: both layouts coincide

    def forward(self, x):
        y = self.conv(x)
        if y.is_contiguous():
            return y.view(y.shape[0], -1)
        return y.flatten(1) * 2


@program("view_of_contiguous_setitem", lambda n: (randn(n, 3),))
def _view_of_contiguous_setitem(x):
    z = x.t().contiguous().view(-1)   # a chain of views of x at n <= 1
    z[1] = 9
    return x + 0


@program("expand_two_dims_contiguous", lambda n: (randn(1, 1), randn(n, 3)),
         spec=lambda dim: (None, {0: dim("n"), 1: dim("m")}),
         extra=((randn(1, 1), randn(1, 1)), (randn(1, 1), randn(1, 4)), (randn(1, 1), randn(4, 1)),
                (randn(1, 1), randn(0, 1))))
def _expand_two_dims_contiguous(x, y):
    e = x.expand_as(y).contiguous()   # x itself only when BOTH sizes are at most 1
    e.add_(1)
    return x + 0, e + y


class _BufferExpandContiguous(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.randn(1, 4))

    def forward(self, x):
        s = self.state.expand_as(x).contiguous()
        s.mul_(0.5)        # at batch 1, s is the buffer itself
        return x + s


@program("buffer_expand_contiguous_mutate", lambda n: (randn(n, 4),), module=True)
def _buffer_expand_contiguous_mutate():
    return _BufferExpandContiguous()


# ------------------------------------------------------------------ reshape / flatten: view at 1, copy at >= 2

@program("transpose_reshape_mutate_result", lambda n: (randn(n, 3),))
def _transpose_reshape_mutate_result(x):
    y = x.transpose(0, 1).reshape(-1)
    y.add_(1)
    return x * 1, y


@program("transpose_reshape_mutate_original", lambda n: (randn(n, 3),))
def _transpose_reshape_mutate_original(x):
    y = x.t().reshape(-1)
    x.mul_(2)
    return y + 0


@program("transpose_reshape_setitem", lambda n: (randn(n, 3),))
def _transpose_reshape_setitem(x):
    y = x.t().reshape(-1)
    y[0] = 7
    return x + 0


@program("permute_flatten_mutate_result", lambda n: (randn(n, 3, 4),))
def _permute_flatten_mutate_result(x):
    y = x.permute(1, 0, 2).flatten(1)
    y.sub_(1)
    return x + 0, y


@program("reshape_as_mutate_result", lambda n: (randn(n, 3), randn(3, n)),
         spec=lambda dim: ({0: dim("n")}, {1: dim("n")}))
def _reshape_as_mutate_result(x, w):
    y = x.t().reshape_as(w)     # same shape as x.t(): a view at any size
    z = x.t().reshape(-1, 1)    # a view at n = 1 only
    z.add_(2)
    y.mul_(3)
    return x + 0, w + y


@program("transposed_view_flat", lambda n: (randn(n, 3),))
def _transposed_view_flat(x):
    return x.t().view(-1) * 2   # eager raises at n >= 2 (not viewable); fine at 0 and 1


@program("intermediate_reshape_write_then_read", lambda n: (randn(n, 3),))
def _intermediate_reshape_write_then_read(x):
    y = x.t() * 2
    z = y.reshape(-1)            # a view of y at n <= 1
    z.mul_(0)
    return y.sum(0), z


# ------------------------------------------------------------------ user code reading layout

@program("is_contiguous_branch", lambda n: (randn(n, 3),))
def _is_contiguous_branch(x):
    y = x.t()
    if y.is_contiguous():
        return y * 2
    return y.contiguous() * 3


@program("slice_is_contiguous_branch", lambda n: (randn(n, 4),))
def _slice_is_contiguous_branch(x):
    y = x[:, :2]
    if y.is_contiguous():
        return y.view(-1) + 1
    return y.reshape(-1) - 1


@program("channels_last_query_branch", lambda n: (randn(2, n, 3, 3),), spec=lambda dim: ({1: dim("n")},))
def _channels_last_query_branch(x):
    if x.is_contiguous(memory_format=torch.channels_last):   # true at one channel
        return x * 2
    return x + 2


@program("stride_of_contiguous_as_strided", lambda n: (randn(3, n), randn(40)), spec=lambda dim: ({1: dim("n")}, None))
def _stride_of_contiguous_as_strided(x, w):
    # a contiguous (3, n) tensor has stride max(n, 1) on dim 0: 1 at n = 0, not 0
    step = x.stride(0)
    return torch.as_strided(w, (3, 3), (step, 1))


@program("storage_offset_read", lambda n: (randn(3, n),), spec=lambda dim: ({1: dim("n")},))
def _storage_offset_read(x):
    y = x[1:]    # offset: the stride of dim 0, max(n, 1)
    return torch.arange(y.storage_offset()) + y.sum()


@program("stride_read_of_views", lambda n: (randn(3, n), torch.arange(100.0)), spec=lambda dim: ({1: dim("n")}, None))
def _stride_read_of_views(x, w):
    views = (x[None, :, None], x.chunk(3, 0)[1], x.unsqueeze(1), x.t())
    return [torch.as_strided(w, (2,) * v.dim(), v.stride()) for v in views]


@program("stride_used_as_size", lambda n: (randn(n, 5),))
def _stride_used_as_size(x):
    t = x.t()
    return torch.as_strided(x, (t.shape[1], 5), (t.stride(1), t.stride(0))) + 1


# ------------------------------------------------------------------ broadcasting and expand

@program("broadcast_outer", lambda n: (randn(n, 1), randn(1, n)), spec=lambda dim: ({0: dim("n")}, {1: dim("n")}))
def _broadcast_outer(x, y):
    return x * y + x


@program("broadcast_second_dim_may_be_one", lambda n: (randn(n, 3), randn(n, 3)),
         spec=lambda dim: ({0: dim("n")}, {0: dim("m")}),
         extra=((randn(3, 3), randn(1, 3)), (randn(1, 3), randn(1, 3)), (randn(1, 3), randn(4, 3))))
def _broadcast_second_dim_may_be_one(x, y):
    return x + y


@program("broadcast_against_static", lambda n: (randn(n, 3), randn(5, 3)), spec=lambda dim: ({0: dim("n")}, None),
         min=1, example=5)
def _broadcast_against_static(x, y):
    return x + y                 # valid only at n = 1 (a broadcast) and n = 5


@program("boolean_mask_select", lambda n: (randn(n, 3),))
def _boolean_mask_select(x):
    rows = x[x.sum(1) > 0]       # a data-dependent number of rows, maybe 0 or 1
    return rows.sum(0), rows.shape[0] * 1.0 + x.sum()


@program("expand_as_repeat", lambda n: (randn(n, 1), randn(n, 4)), spec=lambda dim: ({0: dim("n")}, {0: dim("n")}))
def _expand_as_repeat(x, y):
    return x.expand_as(y) * y + x.repeat(1, 4), x.repeat(2, 1).sum(0)


@program("masked_fill_broadcast_mask", lambda n: (randn(n, 4), torch.rand(n, 1) > 0.5, torch.rand(1, 4) > 0.5),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}, None))
def _masked_fill_broadcast_mask(x, row_mask, col_mask):
    return x.masked_fill(row_mask, 0.0).masked_fill(col_mask, -1.0)


@program("where_broadcast", lambda n: (torch.rand(n, 1) > 0.5, randn(1, 4), randn(n, 4)),
         spec=lambda dim: ({0: dim("n")}, None, {0: dim("n")}))
def _where_broadcast(c, a, b):
    return torch.where(c, a, b)


@program("inplace_into_expanded", lambda n: (randn(1, 4), randn(n, 4)), spec=lambda dim: (None, {0: dim("n")}))
def _inplace_into_expanded(x, y):
    e = x.expand_as(y)
    e.add_(1)          # eager raises at n >= 2 (elements share memory); at n <= 1 it writes x
    return x + y


@program("meshgrid_write_through", lambda n: (randn(1), randn(n)), spec=lambda dim: (None, {0: dim("n")}))
def _meshgrid_write_through(x, y):
    a, b = torch.meshgrid(x, y, indexing="ij")
    b.add_(1)          # b is a (1, n) view of y at every n
    return a + b, y + 0


@program("sum_to_size_write", lambda n: (randn(n, 3),))
def _sum_to_size_write(x):
    s = x.sum_to_size(1, 3)      # x itself at n = 1, a new tensor (the column sums) above
    s.add_(1)
    return x + 0, s


@program("index_put_broadcast_value", lambda n: (randn(n, 4), torch.arange(n), randn(1, 4)),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}, None))
def _index_put_broadcast_value(x, idx, v):
    x.index_put_((idx.flip(0),), v, accumulate=True)
    return x * 1


# ------------------------------------------------------------------ reductions over a dynamic dim of size 0 or 1

@program("softmax_dynamic_dim", lambda n: (randn(4, n),), spec=lambda dim: ({1: dim("n")},))
def _softmax_dynamic_dim(x):
    return x.softmax(-1), x.log_softmax(-1)


@program("log_softmax_batch_dim", lambda n: (randn(n, 3),))
def _log_softmax_batch_dim(x):
    return x.log_softmax(0)


@program("max_dim", lambda n: (randn(n, 3),))
def _max_dim(x):
    values, indices = x.max(0)
    return values, indices


@program("sort_topk_one", lambda n: (randn(n, 3),))
def _sort_topk_one(x):
    s, i = x.sort(0)
    t, j = x.topk(1, dim=0)
    return s, i, t, j


@program("cumsum_argmax", lambda n: (randn(n, 3),))
def _cumsum_argmax(x):
    return x.cumsum(0), x.argmax(0, keepdim=True)


@program("mean_var_std", lambda n: (randn(n, 3),))
def _mean_var_std(x):
    return x.mean(0), x.var(0), x.std(0, correction=0), torch.var_mean(x, 0)


@program("logsumexp_prod_norm_amax", lambda n: (randn(3, n),), spec=lambda dim: ({1: dim("n")},))
def _logsumexp_prod_norm_amax(x):
    return x.logsumexp(1), x.prod(1), x.norm(dim=1), x.amax(1)


@program("reduce_listed_dims", lambda n: (randn(n, 3, 2),))
def _reduce_listed_dims(x):
    return x.mean((0, 2)), x.var((0, 2)), x.sum((0, 1)), x.amin((1, 2)), x.std((0,), keepdim=True)


@program("layer_norm_dynamic_normalized_dim", lambda n: (randn(2, n),), spec=lambda dim: ({1: dim("n")},))
def _layer_norm_dynamic_normalized_dim(x):
    return F.layer_norm(x, x.shape[-1:]), F.rms_norm(x, x.shape[-1:])


@program("linspace_dynamic_steps", lambda n: (randn(n),))
def _linspace_dynamic_steps(x):
    return x * torch.linspace(0, 1, x.shape[0]), torch.logspace(0, 1, x.shape[0]).sum()


# ------------------------------------------------------------------ matmul family with a dynamic batch

@program("matmul_transposed_batch", lambda n: (randn(3, n, 4), randn(4, 5)), spec=lambda dim: ({1: dim("n")}, None))
def _matmul_transposed_batch(a, b):
    return a.transpose(0, 1) @ b     # matmul folds the batch: a view at n = 1, a copy above


@program("matmul_broadcast_batch", lambda n: (randn(n, 1, 3, 4), randn(2, 4, 5)),
         spec=lambda dim: ({0: dim("n")}, None))
def _matmul_broadcast_batch(a, b):
    return a @ b


@program("bmm_einsum", lambda n: (randn(n, 3, 4), randn(n, 4, 2)), spec=lambda dim: ({0: dim("n")}, {0: dim("n")}))
def _bmm_einsum(a, b):
    return torch.bmm(a, b), torch.einsum("bij,bjk->ik", a, b), torch.einsum("bij->ji", a)


@program("vector_dot_and_mv", lambda n: (randn(n), randn(n), randn(3, n)),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}, {1: dim("n")}))
def _vector_dot_and_mv(x, y, w):
    return x @ y, w @ x, torch.outer(x, y).sum(0)


@program("linear", lambda n: (randn(n, 8),), module=True, common=True)
def _linear():
    return nn.Linear(8, 5)


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 6))

    def forward(self, x):
        return x + self.net(x)


@program("mlp", lambda n: (randn(n, 3, 6),), module=True, common=True)
def _mlp():
    return _MLP()


@program("sdpa", lambda n: (randn(n, 2, 5, 8), randn(n, 2, 5, 8), randn(n, 2, 5, 8)),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}, {0: dim("n")}), min=1, common=True)
def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@program("sdpa_dynamic_sequence", lambda n: (randn(2, 2, n, 8), randn(2, 2, n, 8), randn(2, 2, n, 8)),
         spec=lambda dim: ({2: dim("n")}, {2: dim("n")}, {2: dim("n")}), min=1, common=True)
def _sdpa_dynamic_sequence(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@program("multihead_attention", lambda n: (randn(n, 5, 8),), module=True, min=1, common=True)
def _multihead_attention():
    return _SelfAttention()


class _SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


# ------------------------------------------------------------------ convolution, normalization, resampling

@program("conv1d", lambda n: (randn(n, 3, 10),), module=True, common=True)
def _conv1d():
    return nn.Conv1d(3, 4, 3, padding=1)


@program("conv2d", lambda n: (randn(n, 3, 8, 8),), module=True, common=True)
def _conv2d():
    return nn.Conv2d(3, 4, 3, stride=2)


@program("conv2d_dynamic_width", lambda n: (randn(2, 3, 5, n),), spec=lambda dim: ({3: dim("n")},), module=True, min=1)
def _conv2d_dynamic_width():
    return nn.Conv2d(3, 4, (3, 1), padding=(1, 0))


@program("batch_norm_eval", lambda n: (randn(n, 4),), module=True, common=True)
def _batch_norm_eval():
    bn = nn.BatchNorm1d(4)
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    return bn.eval()


@program("batch_norm_train", lambda n: (randn(n, 4),), module=True)
def _batch_norm_train():
    return nn.BatchNorm1d(4)     # eager raises at batch 1 ("more than 1 value per channel")


@program("instance_norm_spatial", lambda n: (randn(2, 3, n),), spec=lambda dim: ({2: dim("n")},))
def _instance_norm_spatial(x):
    return F.instance_norm(x)    # eager raises at one spatial element


@program("group_norm", lambda n: (randn(n, 4, 6),), module=True, common=True)
def _group_norm():
    return nn.GroupNorm(2, 4)


@program("layer_norm", lambda n: (randn(n, 5, 8),), module=True, common=True)
def _layer_norm():
    return nn.LayerNorm(8)


@program("interpolate_align_corners", lambda n: (randn(1, 2, n),), spec=lambda dim: ({2: dim("n")},), min=1)
def _interpolate_align_corners(x):
    # align_corners=True divides by (n - 1): at n = 1 the scale is special-cased
    return F.interpolate(x, size=7, mode="linear", align_corners=True)


@program("interpolate_nearest_batch", lambda n: (randn(n, 2, 3, 3),), common=True)
def _interpolate_nearest_batch(x):
    return F.interpolate(x, scale_factor=2.0, mode="nearest") + F.interpolate(x, size=(6, 6), mode="bilinear")


@program("interpolate_fractional_scale", lambda n: (randn(1, 2, n),), spec=lambda dim: ({2: dim("n")},), min=1)
def _interpolate_fractional_scale(x):
    return F.interpolate(x, scale_factor=1.5, mode="nearest")   # floor(1.5 n) outputs


@program("pad_reflect_dynamic", lambda n: (randn(2, 3, n),), spec=lambda dim: ({2: dim("n")},))
def _pad_reflect_dynamic(x):
    return F.pad(x, (2, 2), mode="reflect")   # eager raises unless n > 2


@program("pad_negative_and_replicate", lambda n: (randn(2, n, 3),), spec=lambda dim: ({1: dim("n")},))
def _pad_negative_and_replicate(x):
    return F.pad(x, (0, 0, -1, 1)), F.pad(x, (1, 1), mode="replicate")


@program("conv1d_dynamic_length", lambda n: (randn(2, 3, n),), spec=lambda dim: ({2: dim("n")},), module=True)
def _conv1d_dynamic_length():
    return nn.Conv1d(3, 4, 3)    # eager raises below the kernel size


@program("pooling_dynamic_length", lambda n: (randn(2, 3, n),), spec=lambda dim: ({2: dim("n")},))
def _pooling_dynamic_length(x):
    return F.avg_pool1d(x, 2), F.adaptive_avg_pool1d(x, 1), F.max_pool1d(x, 2)   # eager raises below 2


@program("max_pool_ceil_mode", lambda n: (randn(2, 3, n),), spec=lambda dim: ({2: dim("n")},), min=1)
def _max_pool_ceil_mode(x):
    return F.max_pool1d(x, 2, ceil_mode=True)   # the last window may start past the end: refused


@program("roll_unfold_repeat_interleave", lambda n: (randn(n, 3),))
def _roll_unfold_repeat_interleave(x):
    return x.roll(1, 0), x.repeat_interleave(2, dim=0), x.flip(0)


@program("unfold_dynamic", lambda n: (randn(n, 3),))
def _unfold_dynamic(x):
    return x.unfold(0, 2, 1).sum(-1)   # eager raises below two rows


# ------------------------------------------------------------------ split, index, scatter, cat

@program("split_across_dynamic", lambda n: (randn(n, 6),))
def _split_across_dynamic(x):
    a, b, c = x.split(2, dim=1)
    return a * b + c, x.chunk(3, 1)[1], x.unbind(1)[2]


@program("chunk_along_dynamic", lambda n: (randn(n, 4),))
def _chunk_along_dynamic(x):
    return x.chunk(2, 0)[0] * 2          # one chunk at n = 1: the same slice, no second


@program("split_sizes_along_dynamic", lambda n: (randn(n, 4),))
def _split_sizes_along_dynamic(x):
    head, tail = x.split([1, x.shape[0] - 1], dim=0)
    return head.sum(0) + tail.sum(0)


@program("index_select_gather", lambda n: (randn(n, 5), torch.randint(0, 5, (n, 2))),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}))
def _index_select_gather(x, idx):
    reversed_rows = torch.arange(x.shape[0]).flip(0)
    return x.gather(1, idx), x.index_select(1, torch.tensor([4, 0])), x.index_select(0, reversed_rows)


@program("scatter_inplace", lambda n: (torch.zeros(n, 5), torch.randint(0, 5, (n, 2)), randn(n, 2)),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}, {0: dim("n")}))
def _scatter_inplace(buf, idx, src):
    buf.scatter_add_(1, idx, src)
    return buf.scatter(1, idx, 1.0).sum(1)


@program("cat_maybe_empty", lambda n: (randn(n, 3), randn(2, 3), randn(n)),
         spec=lambda dim: ({0: dim("n")}, None, {0: dim("n")}))
def _cat_maybe_empty(x, y, v):
    return torch.cat([x, y]), torch.cat([v, v * 2]), torch.stack([x, x], 1)


@program("index_first_row", lambda n: (randn(n, 3),))
def _index_first_row(x):
    return x[0] + x[-1]                   # eager raises at n = 0


# ------------------------------------------------------------------ user code that asks the size

@program("branch_on_size_one", lambda n: (randn(n, 3),))
def _branch_on_size_one(x):
    if x.shape[0] == 1:
        return x - 1
    return x + 1


@program("branch_on_numel_zero", lambda n: (randn(n, 3),))
def _branch_on_numel_zero(x):
    if x.numel() == 0:
        return x.new_ones(3)
    return x.sum(0)


@program("size_one_as_broadcast_flag", lambda n: (randn(n, 3), randn(5, 3)), spec=lambda dim: ({0: dim("n")}, None))
def _size_one_as_broadcast_flag(x, y):
    return y * x.sum(0) if x.shape[0] > 1 else y * x


@program("cross_entropy_batch", lambda n: (randn(n, 5), torch.randint(0, 5, (n,))),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}))
def _cross_entropy_batch(logits, target):
    # mean over an empty batch is nan
    return F.cross_entropy(logits, target), F.nll_loss(logits.log_softmax(-1), target, reduction="sum")


@program("normalize_over_dynamic_dim", lambda n: (randn(n, 3),))
def _normalize_over_dynamic_dim(x):
    return F.normalize(x, dim=0), F.cosine_similarity(x, x.flip(0), dim=1)


@program("sdpa_broadcast_mask", lambda n: (randn(n, 2, 5, 8), torch.rand(n, 1, 1, 5) > 0.3),
         spec=lambda dim: ({0: dim("n")}, {0: dim("n")}), min=1, common=True)
def _sdpa_broadcast_mask(q, mask):
    mask = mask.clone()
    mask[..., 0] = True          # every row attends somewhere
    return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


# ------------------------------------------------------------------ sizes known only at run time
# A size from `.item()` or a boolean mask cannot be pinned and traced again: whatever the
# capture assumed about it must hold or be checked at run time. `n` is the count here.

def _rows_with_count(n):
    return randn(MAX, 3), torch.tensor(n)


def _first_rows(x, count):
    k = count.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return x[:k]


@program("item_count_reshape_write", _rows_with_count, spec=lambda dim: None)
def _item_count_reshape_write(x, count):
    y = _first_rows(x, count).t().reshape(-1)   # a view of x when one row is taken
    y.mul_(0)
    return x + 0


@program("item_count_contiguous_write", _rows_with_count, spec=lambda dim: None)
def _item_count_contiguous_write(x, count):
    y = _first_rows(x, count).t().contiguous()
    y.add_(1)
    return x + 0


@program("item_count_flatten_then_write_source", _rows_with_count, spec=lambda dim: None)
def _item_count_flatten_then_write_source(x, count):
    y = _first_rows(x, count).permute(1, 0).flatten()   # a view of x when one row is taken
    x.add_(1)                                            # ... which then sees this write
    return y * 1


@program("item_counts_broadcast", lambda n: (randn(MAX, 3), torch.tensor(n), torch.tensor(1)), spec=lambda dim: None)
def _item_counts_broadcast(x, count, other):
    return _first_rows(x, count) + _first_rows(x, other)   # broadcasts unless both counts are equal


@program("item_count_squeeze", _rows_with_count, spec=lambda dim: None)
def _item_count_squeeze(x, count):
    return _first_rows(x, count).squeeze(0) * 2


def _rows_with_positives(n):
    x = randn(MAX, 3)
    x[:, 0] = -1.0
    x[:n, 0] = 1.0
    return (x,)


@program("masked_rows_reshape_write", _rows_with_positives, spec=lambda dim: None)
def _masked_rows_reshape_write(x):
    rows = x[x[:, 0] > 0]                # a new tensor of data-dependent length
    y = rows.t().reshape(-1)             # a view of rows when one row is selected
    y.mul_(0)
    return rows


@program("nonzero_then_squeeze", _rows_with_positives, spec=lambda dim: None)
def _nonzero_then_squeeze(x):
    return (x[:, 0] > 0).nonzero().squeeze() * 2   # a 0-d tensor when one row is positive


@program("branch_on_numel_one_two_dims", lambda n: (randn(n, 3),), spec=lambda dim: ({0: dim("n"), 1: dim("m")},),
         extra=((randn(1, 1),), (randn(1, 4),), (randn(4, 1),), (randn(0, 1),)))
def _branch_on_numel_one_two_dims(x):
    if x.numel() == 1:                # only when both sizes are 1
        return x - 1
    return x + 1


# ------------------------------------------------------------------ small composite models

class _TransformerBlock(nn.Module):
    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


@program("transformer_block", lambda n: (randn(n, 5, 8),), module=True, min=1, common=True)
def _transformer_block():
    return _TransformerBlock()


class _MaskedAttention(nn.Module):
    """Attention with a causal mask built from the sequence length (tril of ones)."""

    def __init__(self, dim=8):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        t = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-2, -1) / 8 ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v


@program("causal_mask_from_length", lambda n: (randn(2, n, 8),), spec=lambda dim: ({1: dim("n")},), module=True, min=1,
         common=True)
def _causal_mask_from_length():
    return _MaskedAttention()


class _CausalSelfAttention(nn.Module):
    """A hand-written attention (the GPT pattern): view into heads, transpose, contiguous."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


@program("gpt_attention_batch", lambda n: (randn(n, 5, 8),), module=True, min=1, common=True)
def _gpt_attention_batch():
    return _CausalSelfAttention()


@program("gpt_attention_sequence", lambda n: (randn(2, n, 8),), spec=lambda dim: ({1: dim("n")},), module=True, min=1,
         common=True)
def _gpt_attention_sequence():
    return _CausalSelfAttention()


class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


@program("conv_net", lambda n: (randn(n, 3, 8, 8),), module=True, common=True)
def _conv_net():
    return _ConvNet().eval()


@program("conv_net_train_mode", lambda n: (randn(n, 3, 8, 8),), module=True, min=1)
def _conv_net_train_mode():
    return _ConvNet().train()      # batch norm over (n, 8, 8): fine at batch 1, buffers updated


class _Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(4, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


@program("lstm_batch", lambda n: (randn(n, 5, 4),), module=True, min=1, common=True)
def _lstm_batch():
    return _Recurrent(nn.LSTM)


@program("gru_batch", lambda n: (randn(n, 5, 4),), module=True, min=1, common=True)
def _gru_batch():
    return _Recurrent(nn.GRU)


class _EmbedPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.fc = nn.Linear(6, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


@program("embedding_mean_pool_sequence", lambda n: (torch.randint(0, 10, (3, n)),), spec=lambda dim: ({1: dim("n")},),
         module=True, min=1, common=True)
def _embedding_mean_pool_sequence():
    return _EmbedPool()


@program("transformer_encoder_layer", lambda n: (randn(n, 5, 8),), module=True, min=1, common=True)
def _transformer_encoder_layer():
    return nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True).eval()


@program("embedding_max_norm", lambda n: (torch.randint(0, 10, (n, 3)),), module=True)
def _embedding_max_norm():
    return nn.Embedding(10, 4, max_norm=1.0)   # renormalizes the looked-up rows of its weight in place

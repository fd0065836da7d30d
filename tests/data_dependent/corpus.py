"""Data-dependent programs: each with example inputs, other inputs to run it on, and, for
programs that need a torch._check, the same program without it and the check the export
error must name."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

import graphport as gp


@dataclass
class Case:
    name: str
    fn: Callable
    args: tuple
    others: list = field(default_factory=list)        # more inputs the export must match eager on
    dynamic_shapes: object = None
    unchecked: Callable | None = None                  # the program without its torch._check
    suggestion: str = ""                               # what the export error must suggest for it
    breaking: list = field(default_factory=list)       # inputs that break a stated check: refused at run time


def _zeros(n):
    k = n.item()
    torch._check(k >= 0)
    return torch.zeros(k, 3)


def _zeros_unchecked(n):
    k = n.item()
    return torch.zeros(k, 3) if k >= 0 else torch.ones(1)


def _narrow(x, n):
    k = n.item()
    torch._check(k >= 0)
    torch._check(k <= x.shape[0])
    return x.narrow(0, 0, k) * 2


def _view(x, n):
    k = n.item()
    torch._check(k > 0)
    torch._check(x.numel() % k == 0)
    return x.view(k, -1).sum(1)


def _item_index(x, i):
    return x[i.item()] + 1


def _item_scalar(x, s):
    return x * s.item() + 1


def _float_item(x, s):
    return x + s.sum().item()


def _nonzero_gather(x):
    idx = torch.nonzero(x > 0)
    return x[idx[:, 0], idx[:, 1]]


def _mask(x):
    return x[x > 0].sum() + x[x < 0].numel()


def _mask_rows(x, keep):
    return x[keep] * 2


def _masked_select(x):
    return torch.masked_select(x, x.abs() > 0.5) + 1


def _where_one_arg(x):
    rows, cols = torch.where(x > 0)
    return rows * 10 + cols


def _unique(x):
    values, counts = torch.unique(x, return_counts=True)
    return values, counts


def _unique_inverse(x):
    values, inverse = torch.unique(x, sorted=True, return_inverse=True)
    return values.float().mean(), inverse


def _repeat(x, r):
    return torch.repeat_interleave(x, r)


def _tolist_loop(x, w):
    out = []
    for n in w.tolist():
        out.append(x * n)
    return torch.stack(out)


def _tolist_float_sum(x):
    values = x.tolist()
    return x * sum(values)


def _tolist_sizes(x, sizes):
    a, b = sizes.tolist()
    torch._check(a >= 0)
    torch._check(b >= 0)
    return torch.ones(a) * x.sum(), torch.zeros(b, 2)


def _checked_branch(x, y):
    a = x.item()
    torch._check(a >= 0)
    torch._check(a <= 5)
    if a < 6:
        return y.sin()
    return y.cos()


def _branch_unchecked(x, y):
    a = x.item()
    if a < 6:
        return y.sin()
    return y.cos()


def _constrain_as_size(x, n):
    k = n.item()
    torch._constrain_as_size(k, min=1, max=8)
    return torch.ones(k, x.shape[1]) @ x.t()


def _constrain_as_value(x, n):
    k = n.item()
    torch.sym_constrain_range(k, min=0, max=3)
    return x * (k + 1)


def _slice_to_item(x, y):
    return x[: y.int().item()]


def _check_with(x, n):
    k = n.item()
    torch._check_with(ValueError, k >= 1, lambda: "k must be positive")
    torch._check(k <= 4)
    return torch.arange(k) + x.sum()


def _nonzero_count(x):
    return torch.nonzero(x).shape[0] * torch.ones(2)


def _dynamic_mask(x):
    return (x[x > 0] ** 2).sum()


def _moe_routing(x, route):
    out = torch.zeros_like(x)
    for e in range(3):
        idx = torch.where(route == e)[0]
        out = out.index_add(0, idx, x[idx] * (e + 1))
    return out


def _bincount(x):
    return torch.bincount(x)


def _bincount_padded(x):
    counts = torch.bincount(x)
    torch._check(counts.shape[0] <= 8)
    if counts.shape[0] > 8:
        raise ValueError("values must be below 8")
    return torch.cat([counts, torch.zeros(8 - counts.shape[0], dtype=torch.long)])


def _bincount_padded_unchecked(x):
    counts = torch.bincount(x)
    if counts.shape[0] > 8:
        raise ValueError("values must be below 8")
    return torch.cat([counts, torch.zeros(8 - counts.shape[0], dtype=torch.long)])


def _bincount_weighted(x, w, bias):
    return torch.bincount(x, w, minlength=5) + bias


def _unique_rows(x):
    return torch.unique(x, dim=0, return_inverse=True, return_counts=True)


def _unique_columns(x):
    return torch.unique(x, dim=1, sorted=True).float().mean(0)


def _unique_consecutive(x):
    values, counts = torch.unique_consecutive(x, return_counts=True)
    return values * 10 + counts


def _unique_consecutive_rows(x):
    return torch.unique_consecutive(x, dim=0, return_inverse=True, return_counts=True)


def _tensor_from_tolist(x):
    return torch.tensor(x.tolist()) * 2


def _tensor_from_items(x, s):
    return torch.tensor([[s.item(), 1.5], [x.sum().item(), s.item() * 2]], dtype=torch.float64) + 1


CASES = [
    Case("item_as_size_for_zeros", _zeros, (torch.tensor(3),), [(torch.tensor(0),), (torch.tensor(7),)],
         unchecked=_zeros_unchecked, suggestion="torch._check"),
    Case("item_as_size_for_narrow", _narrow, (torch.randn(6, 2), torch.tensor(4)),
         [(torch.randn(6, 2), torch.tensor(0)), (torch.randn(6, 2), torch.tensor(6))],
         breaking=[(torch.randn(6, 2), torch.tensor(7)), (torch.randn(6, 2), torch.tensor(-1))]),
    Case("item_as_size_for_narrow_dynamic", _narrow, (torch.randn(6, 2), torch.tensor(4)),
         [(torch.randn(9, 2), torch.tensor(9)), (torch.randn(1, 2), torch.tensor(1))],
         dynamic_shapes={"x": {0: gp.Dim("rows")}, "n": None}, breaking=[(torch.randn(2, 2), torch.tensor(3))]),
    Case("item_as_size_for_view", _view, (torch.randn(6, 2), torch.tensor(3)),
         [(torch.randn(6, 2), torch.tensor(4)), (torch.randn(6, 2), torch.tensor(12))],
         breaking=[(torch.randn(6, 2), torch.tensor(5)), (torch.randn(6, 2), torch.tensor(0))]),
    Case("item_as_index", _item_index, (torch.randn(5, 2), torch.tensor(3)),
         [(torch.randn(5, 2), torch.tensor(0)), (torch.randn(5, 2), torch.tensor(-1))]),
    Case("item_as_scalar", _item_scalar, (torch.randn(4), torch.tensor(3)), [(torch.randn(4), torch.tensor(-2))]),
    Case("float_item", _float_item, (torch.randn(4), torch.randn(3)), [(torch.randn(4), torch.randn(3))]),
    Case("nonzero_then_gather", _nonzero_gather, (torch.randn(4, 5),), [(torch.randn(4, 5),), (-torch.ones(4, 5),)]),
    Case("boolean_mask", _mask, (torch.randn(10),), [(torch.randn(10),), (torch.zeros(10),)]),
    Case("boolean_mask_rows", _mask_rows, (torch.randn(4, 3), torch.tensor([True, False, True, True])),
         [(torch.randn(4, 3), torch.tensor([False, False, False, False]))]),
    Case("masked_select", _masked_select, (torch.randn(3, 4),), [(torch.randn(3, 4),)]),
    Case("where_one_argument", _where_one_arg, (torch.randn(3, 4),), [(torch.randn(3, 4),)]),
    Case("unique_counts", _unique, (torch.tensor([3, 1, 3, 2, 2, 2]),), [(torch.tensor([5, 5, 5, 5, 5, 5]),)]),
    Case("unique_inverse", _unique_inverse, (torch.tensor([3, 1, 3, 2]),), [(torch.tensor([7, 7, 0, 1]),)]),
    Case("repeat_interleave_tensor", _repeat, (torch.tensor([1., 2., 3.]), torch.tensor([1, 0, 2])),
         [(torch.tensor([1., 2., 3.]), torch.tensor([3, 3, 0]))]),
    Case("tolist_loop", _tolist_loop, (torch.randn(3), torch.tensor([1, 2, 3])),
         [(torch.randn(3), torch.tensor([-4, 0, 9]))]),
    Case("tolist_float_sum", _tolist_float_sum, (torch.randn(3),), [(torch.randn(3),), (torch.zeros(3),)]),
    Case("tolist_sizes", _tolist_sizes, (torch.randn(3), torch.tensor([2, 3])),
         [(torch.randn(3), torch.tensor([0, 5]))], breaking=[(torch.randn(3), torch.tensor([-1, 2]))]),
    Case("check_settles_branch", _checked_branch, (torch.tensor(4), torch.randn(5, 5)),
         [(torch.tensor(0), torch.randn(5, 5))], unchecked=_branch_unchecked, suggestion="torch._check(a < 6)",
         breaking=[(torch.tensor(6), torch.randn(5, 5)), (torch.tensor(-3), torch.randn(5, 5))]),
    Case("constrain_as_size", _constrain_as_size, (torch.randn(3, 2), torch.tensor(4)),
         [(torch.randn(3, 2), torch.tensor(8)), (torch.randn(3, 2), torch.tensor(1))],
         breaking=[(torch.randn(3, 2), torch.tensor(0)), (torch.randn(3, 2), torch.tensor(9))]),
    Case("constrain_as_value", _constrain_as_value, (torch.randn(3), torch.tensor(2)), [(torch.randn(3), torch.tensor(0))],
         breaking=[(torch.randn(3), torch.tensor(4))]),
    Case("slice_up_to_item", _slice_to_item, (torch.randn(3, 2), torch.tensor(4)),
         [(torch.randn(3, 2), torch.tensor(1)), (torch.randn(3, 2), torch.tensor(0))]),
    Case("check_with", _check_with, (torch.randn(2), torch.tensor(3)), [(torch.randn(2), torch.tensor(1))],
         breaking=[(torch.randn(2), torch.tensor(0)), (torch.randn(2), torch.tensor(5))]),
    Case("nonzero_count_as_value", _nonzero_count, (torch.tensor([1, 0, 2]),), [(torch.tensor([0, 0, 0]),)]),
    Case("mask_dynamic_length", _dynamic_mask, (torch.randn(8),), [(torch.randn(3),), (torch.randn(1),)],
         dynamic_shapes={"x": {0: gp.Dim("n")}}),
    Case("bincount", _bincount, (torch.tensor([1, 2, 2, 5]),),
         [(torch.tensor([0, 0, 0, 0]),), (torch.tensor([9, 3, 3, 0]),)]),
    Case("bincount_padded", _bincount_padded, (torch.tensor([1, 2, 2, 5]),),
         [(torch.tensor([0, 0, 0, 0]),), (torch.tensor([7, 3, 3, 0]),)], unchecked=_bincount_padded_unchecked,
         suggestion="torch._check(u0 > 8)", breaking=[(torch.tensor([1, 8, 2, 4]),)]),
    Case("bincount_weighted_broadcast", _bincount_weighted, (torch.tensor([1, 2, 2, 4]), torch.rand(4), torch.randn(5)),
         [(torch.tensor([0, 0, 3, 1]), torch.rand(4), torch.randn(5))],
         breaking=[(torch.tensor([1, 7, 2, 4]), torch.rand(4), torch.randn(5))]),
    Case("unique_rows", _unique_rows, (torch.tensor([[1, 2], [1, 2], [3, 4]]),),
         [(torch.tensor([[5, 5], [1, 2], [0, 0]]),), (torch.tensor([[1, 1], [1, 1], [1, 1]]),)]),
    Case("unique_columns_dynamic_rows", _unique_columns, (torch.tensor([[1, 2, 1], [3, 4, 3]]),),
         [(torch.tensor([[1, 2, 3], [3, 4, 3], [0, 0, 0]]),), (torch.tensor([[7, 7, 7]]),)],
         dynamic_shapes={"x": {0: gp.Dim("rows", min=1)}}),
    Case("unique_consecutive", _unique_consecutive, (torch.tensor([1, 1, 2, 3, 3, 1]),),
         [(torch.tensor([4, 4, 4, 4, 4, 4]),), (torch.tensor([1, 2, 1, 2, 1, 2]),)]),
    Case("unique_consecutive_rows", _unique_consecutive_rows, (torch.tensor([[1, 2], [1, 2], [3, 4]]),),
         [(torch.tensor([[1, 2], [3, 4], [1, 2]]),)]),
    Case("tensor_from_tolist", _tensor_from_tolist, (torch.tensor([1, 2, 3]),), [(torch.tensor([-5, 0, 7]),)]),
    Case("tensor_from_items", _tensor_from_items, (torch.randn(3), torch.tensor(2.5)),
         [(torch.randn(3), torch.tensor(-1.0))]),
    Case("moe_style_routing", _moe_routing, (torch.randn(6, 4), torch.tensor([0, 2, 1, 0, 0, 2])),
         [(torch.randn(6, 4), torch.tensor([1, 1, 1, 1, 1, 1]))]),
]

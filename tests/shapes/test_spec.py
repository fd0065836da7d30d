"""Every form of the `dynamic_shapes` spec, and the errors for malformed ones.

Each case builds its spec twice, from graphport's and from torch.export's `Dim`, exports
with both, runs graphport's program against eager at the example size and at another
size, and compares range constraints and placeholder shapes with torch.export's.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import pytest
import torch

import graphport as gp

from .helpers import (
    assert_matches_eager,
    assert_same_input_shapes,
    assert_same_range_constraints,
    torch_export,
)


# ---------------------------------------------------------------------------- programs

def add2(x, y):
    return x * 2 + y


def add_bcast(x, y):
    return x * 2 + y


def nested(inputs):
    return inputs["a"] + inputs["b"][0] * inputs["b"][1]


def pair_input(pair):
    x, y = pair
    return torch.cat([x, y], dim=1).relu()


def with_mask(x, mask=None):
    return x.softmax(-1) * mask


def reduce_last(x):
    return x.sum(-1) * x.amax(-1) + x.mean(1, keepdim=True)[..., 0]


def tail(x, y):
    return x + y[1:]


def doubled(x, y):
    return torch.cat([x, x]) + y


def doubled_plus_one(x, y):
    return torch.cat([x, x]) + y[1:]


def chained(x, y, z):
    return x + y[1:] + z.reshape(-1, 2, 3)[:, 0][1:]


def seq_only(x, w):
    return x @ w


def matmul(a, b):
    return a @ b


@dataclasses.dataclass
class Case:
    fn: Callable
    make: Callable          # n -> (args, kwargs); n = 4 is the example, n = 9 the other size
    spec: Callable          # (api module, args, kwargs) -> dynamic_shapes
    torch_spec: Callable | None = None   # where torch.export needs another spelling
    sizes: tuple = (4, 9)


def r(*shape):
    return torch.randn(*shape)


def _b(api):
    return api.Dim("b", max=64)


CASES = {
    "dict_by_name": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                         lambda api, a, k: {"x": {0: _b(api)}, "y": {0: _b(api)}}),
    "tuple": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                  lambda api, a, k: ({0: _b(api)}, {0: _b(api)})),
    "list": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                 lambda api, a, k: [{0: _b(api)}, {0: _b(api)}]),
    "per_dim_tuple_with_none": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                                    lambda api, a, k: {"x": (_b(api), None), "y": (_b(api), None)}),
    "per_dim_list_two_dims": Case(add2, lambda n: ((r(n, n + 2), r(n, n + 2)), {}),
                                  lambda api, a, k: [[_b(api), api.Dim("c", max=64)],
                                                     [_b(api), api.Dim("c", max=64)]]),
    "none_for_static_input": Case(add_bcast, lambda n: ((r(n, 3), r(3)), {}),
                                  lambda api, a, k: {"x": {0: _b(api)}, "y": None}),
    "input_left_out_of_dict_is_static": Case(
        add_bcast, lambda n: ((r(n, 3), r(3)), {}),
        lambda api, a, k: {"x": {0: _b(api)}},
        torch_spec=lambda api, a, k: {"x": {0: _b(api)}, "y": None}),   # torch.export wants every key
    "nested_dict_and_list": Case(nested, lambda n: (({"a": r(n, 3), "b": [r(n, 3), r(n, 3)]},), {}),
                                 lambda api, a, k: {"inputs": {"a": {0: _b(api)},
                                                               "b": [{0: _b(api)}, {0: _b(api)}]}}),
    "tuple_input": Case(pair_input, lambda n: (((r(n, 3), r(n, 5)),), {}),
                        lambda api, a, k: {"pair": ({0: _b(api)}, {0: _b(api)})}),
    "kwargs": Case(with_mask, lambda n: ((r(n, 3),), {"mask": r(n, 3)}),
                   lambda api, a, k: {"x": {0: _b(api)}, "mask": {0: _b(api)}}),
    "shapes_collection": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                              lambda api, a, k: _collection(api, a)),
    "dims": Case(reduce_last, lambda n: ((r(n, n + 1, 8),), {}),
                 lambda api, a, k: {"x": dict(enumerate(api.dims("bb", "ss", max=64)))}),
    "auto_dynamic_static": Case(add2, lambda n: ((r(n, 3), r(n, 3)), {}),
                                lambda api, a, k: {"x": {0: api.Dim.AUTO, 1: api.Dim.STATIC},
                                                   "y": {0: api.Dim.DYNAMIC, 1: api.Dim.STATIC}}),
    "auto_everywhere": Case(matmul, lambda n: ((r(n, n + 1), r(n + 1, 5)), {}),
                            lambda api, a, k: ((api.Dim.AUTO, api.Dim.AUTO), (api.Dim.AUTO, api.Dim.AUTO))),
    "seq_dim_only": Case(seq_only, lambda n: ((r(2, n, 8), r(8, 4)), {}),
                         lambda api, a, k: {"x": {1: api.Dim("seq", max=128)}, "w": None}),
    "derived_plus_one": Case(tail, lambda n: ((r(n, 3), r(n + 1, 3)), {}),
                             lambda api, a, k: _derived(api, lambda d: d + 1)),
    "derived_two_dx": Case(doubled, lambda n: ((r(n, 3), r(2 * n, 3)), {}),
                           lambda api, a, k: _derived(api, lambda d: 2 * d)),
    "derived_two_dx_plus_one": Case(doubled_plus_one, lambda n: ((r(n, 3), r(2 * n + 1, 3)), {}),
                                    lambda api, a, k: _derived(api, lambda d: 2 * d + 1)),
    "derived_chain": Case(chained, lambda n: ((r(n, 3), r(n + 1, 3), r(2 * n + 2, 3)), {}),
                          lambda api, a, k: _chain(api)),
}


def _collection(api, args):
    sc = api.ShapesCollection()
    b = _b(api)
    sc[args[0]] = {0: b}
    sc[args[1]] = {0: b}
    return sc


def _derived(api, derive):
    dx = api.Dim("dx", max=32)
    return {"x": {0: dx}, "y": {0: derive(dx)}}


def _chain(api):
    dx = api.Dim("dx", max=32)
    dy = dx + 1
    return {"x": {0: dx}, "y": {0: dy}, "z": {0: 2 * dy}}


_EXPORTS: dict = {}


def _gp_export(name):
    """One graphport export per case (module-level cache: the cases are pure functions)."""
    if name not in _EXPORTS:
        case = CASES[name]
        args, kwargs = case.make(case.sizes[0])
        _EXPORTS[name] = gp.export(case.fn, args, kwargs, dynamic_shapes=case.spec(gp, args, kwargs))
    return _EXPORTS[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_form_exports_and_matches_eager_at_two_sizes(name):
    case = CASES[name]
    ep = _gp_export(name)
    for n in case.sizes:
        args, kwargs = case.make(n)
        assert_matches_eager(ep, case.fn, args, kwargs, what=f"at size {n}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_spec_form_range_constraints_match_torch_export(name):
    case = CASES[name]
    args, kwargs = case.make(case.sizes[0])
    ref = torch_export(case.fn, args, kwargs,
                       dynamic_shapes=(case.torch_spec or case.spec)(torch.export, args, kwargs))
    ep = _gp_export(name)
    assert_same_input_shapes(ep, ref)
    assert_same_range_constraints(ep, ref, hint_dims=True)


def test_shapes_collection_keys_by_tensor_identity():
    """Two equal-valued tensors are still two inputs: only the one in the collection is dynamic."""
    x = torch.randn(4, 3)
    y = x.clone()
    sc = gp.ShapesCollection()
    sc[x] = {0: gp.Dim("b", max=64)}
    ep = gp.export(add_bcast, (x, torch.randn(3)), dynamic_shapes=sc)
    assert_matches_eager(ep, add_bcast, (torch.randn(7, 3), torch.randn(3)))
    with pytest.raises(gp.InputMismatchError):
        ep.module()(torch.randn(4, 3), torch.randn(4))
    del y


def test_static_dims_stay_checked():
    ep = _gp_export("per_dim_tuple_with_none")
    with pytest.raises(gp.InputMismatchError) as info:
        ep.module()(r(5, 4), r(5, 4))
    assert re.search(r"\bx\b", str(info.value)), str(info.value)


def test_dim_auto_static_dim_refuses_other_sizes():
    ep = _gp_export("auto_dynamic_static")
    assert_matches_eager(ep, add2, (r(11, 3), r(11, 3)))
    with pytest.raises(gp.InputMismatchError):
        ep.module()(r(4, 5), r(4, 5))


# ---------------------------------------------------------------------------- malformed specs

X4, Y4 = torch.randn(4, 3), torch.randn(4, 3)


def _refused(fn, args, spec, kwargs=None):
    with pytest.raises(gp.GraphportError) as info:
        gp.export(fn, args, kwargs, dynamic_shapes=spec)
    return str(info.value)


def _torch_refuses(fn, args, spec, kwargs=None):
    with pytest.raises(Exception):
        torch_export(fn, args, kwargs, dynamic_shapes=spec)


def _mentions(msg, *words):
    for w in words:
        assert re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", msg), f"the message should name {w!r}:\n{msg}"


def test_unknown_argument_name():
    b = torch.export.Dim("b")
    _torch_refuses(add2, (X4, Y4), {"x": {0: b}, "z": {0: b}})
    b = gp.Dim("b")
    msg = _refused(add2, (X4, Y4), {"x": {0: b}, "z": {0: b}})
    _mentions(msg, "z", "x", "y")


def test_tuple_spec_with_wrong_length():
    _torch_refuses(add2, (X4, Y4), ({0: torch.export.Dim("b")},))
    msg = _refused(add2, (X4, Y4), ({0: gp.Dim("b")},))
    _mentions(msg, "dynamic_shapes")


def test_nested_spec_with_wrong_structure():
    inputs = {"a": X4, "b": [X4.clone(), Y4]}
    _torch_refuses(nested, (inputs,), {"inputs": {"a": {0: torch.export.Dim("b")}, "b": [{0: torch.export.Dim("b")}]}})
    msg = _refused(nested, (inputs,), {"inputs": {"a": {0: gp.Dim("b")}, "b": [{0: gp.Dim("b")}]}})
    _mentions(msg, "inputs", "b")


def test_nested_spec_dict_where_list_expected():
    inputs = {"a": X4, "b": [X4.clone(), Y4]}
    bt = torch.export.Dim("b")
    _torch_refuses(nested, (inputs,), {"inputs": {"a": {0: bt}, "b": {"first": {0: bt}}}})
    bg = gp.Dim("b")
    msg = _refused(nested, (inputs,), {"inputs": {"a": {0: bg}, "b": {"first": {0: bg}}}})
    _mentions(msg, "inputs", "b")


@pytest.mark.parametrize("index", [2, 5, -3])
def test_dim_index_out_of_range(index):
    _torch_refuses(add2, (X4, Y4), {"x": {index: torch.export.Dim("b")}, "y": None})
    msg = _refused(add2, (X4, Y4), {"x": {index: gp.Dim("b")}, "y": None})
    _mentions(msg, "x", str(index))


def test_per_dim_tuple_longer_than_the_tensor():
    _torch_refuses(add2, (X4, Y4), {"x": (torch.export.Dim("b"), None, None), "y": None})
    msg = _refused(add2, (X4, Y4), {"x": (gp.Dim("b"), None, None), "y": None})
    _mentions(msg, "x")


@pytest.mark.parametrize("value", ["batch", 2.5, object()])
def test_non_dim_value(value):
    _torch_refuses(add2, (X4, Y4), {"x": {0: value}, "y": None})
    msg = _refused(add2, (X4, Y4), {"x": {0: value}, "y": None})
    _mentions(msg, "x")
    if isinstance(value, str):
        assert "batch" in msg, msg


def test_spec_for_a_non_tensor_input():
    def scaled(x, k):
        return x * k
    _torch_refuses(scaled, (X4, 3), {"x": {0: torch.export.Dim("b")}, "k": {0: torch.export.Dim("c")}})
    msg = _refused(scaled, (X4, 3), {"x": {0: gp.Dim("b")}, "k": {0: gp.Dim("c")}})
    _mentions(msg, "k")


@pytest.mark.parametrize("size,bounds", [(100, {"max": 64}), (4, {"min": 8}), (70, {"min": 8, "max": 64})])
def test_example_size_outside_the_dims_range(size, bounds):
    args = (torch.randn(size, 3), torch.randn(size, 3))
    bt = torch.export.Dim("b", **bounds)
    _torch_refuses(add2, args, {"x": {0: bt}, "y": {0: bt}})
    bg = gp.Dim("b", **bounds)
    msg = _refused(add2, args, {"x": {0: bg}, "y": {0: bg}})
    _mentions(msg, "x", str(size))
    assert any(str(v) in msg for v in bounds.values()), msg


def test_derived_dim_inconsistent_with_the_examples():
    args = (torch.randn(4, 3), torch.randn(6, 3))
    dt = torch.export.Dim("dx", max=32)
    _torch_refuses(tail, args, {"x": {0: dt}, "y": {0: dt + 1}})
    dg = gp.Dim("dx", max=32)
    msg = _refused(tail, args, {"x": {0: dg}, "y": {0: dg + 1}})
    _mentions(msg, "y", "6")


def test_derived_dim_whose_range_falls_outside():
    """dx in [2, 32] makes 2*dx+1 at most 65: an example of 67 is out of range."""
    args = (torch.randn(33, 3), torch.randn(67, 3))
    dg = gp.Dim("dx", min=2, max=32)
    msg = _refused(doubled_plus_one, args, {"x": {0: dg}, "y": {0: 2 * dg + 1}})
    _mentions(msg, "x", "33")


def test_invalid_dim_bounds():
    with pytest.raises((gp.GraphportError, ValueError, AssertionError)):
        gp.Dim("b", min=10, max=5)
    with pytest.raises((gp.GraphportError, ValueError, AssertionError)):
        torch.export.Dim("b", min=10, max=5)


@pytest.mark.parametrize("name,bad", [
    ("derived_plus_one", lambda n: (r(n, 3), r(n + 2, 3))),
    ("derived_two_dx", lambda n: (r(n, 3), r(2 * n + 1, 3))),
    ("derived_two_dx_plus_one", lambda n: (r(n, 3), r(2 * n, 3))),
    ("derived_chain", lambda n: (r(n, 3), r(n + 1, 3), r(2 * n + 4, 3))),
    ("dict_by_name", lambda n: (r(n, 3), r(n + 1, 3))),
    ("nested_dict_and_list", lambda n: ({"a": r(n, 3), "b": [r(n, 3), r(n + 1, 3)]},)),
    ("tuple_input", lambda n: ((r(n, 3), r(n + 1, 5)),)),
])
def test_broken_relations_are_refused_at_call_time(name, bad):
    module = _gp_export(name).module()
    for n in (4, 7):
        with pytest.raises(gp.InputMismatchError):
            module(*bad(n))


def test_kwargs_relation_is_refused_at_call_time():
    module = _gp_export("kwargs").module()
    with pytest.raises(gp.InputMismatchError) as info:
        module(r(5, 3), mask=r(6, 3))
    assert "mask" in str(info.value), str(info.value)


def test_derived_dim_whose_root_sizes_no_input():
    """{"y": {0: dx + 1}} alone: dx is a hidden root (torch.export accepts it too)."""
    def shifted(y):
        return y[1:] * 2
    torch_export(shifted, (r(8, 3),), dynamic_shapes={"y": {0: torch.export.Dim("dx", max=32) + 1}})
    ep = gp.export(shifted, (r(8, 3),), dynamic_shapes={"y": {0: gp.Dim("dx", max=32) + 1}})
    module = ep.module()
    for n in (3, 9, 33):
        assert_matches_eager(ep, shifted, (r(n, 3),), what=f"at {n}", module=module)
    with pytest.raises(gp.InputMismatchError):
        module(r(34, 3))

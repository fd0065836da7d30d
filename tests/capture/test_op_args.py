"""The fast walk over operator arguments gives exactly what torch's pytree gives."""
import collections

import pytest
import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from graphport.op_args import arg_leaves, map_args

Pair = collections.namedtuple("Pair", "a b")


def _node() -> fx.Node:
    graph = fx.Graph()
    return graph.placeholder("x")


def _fx_containers() -> tuple:
    """fx's own immutable list and dict, as a node's args and kwargs hold them."""
    graph = fx.Graph()
    node = graph.call_function(torch.add, ([1, torch.ones(1)],), {"k": {"j": (None, 4)}})
    return node.args[0], node.kwargs["k"]


CASES = [
    (torch.ones(2), 3, [torch.zeros(1), None, 2.5]),
    {"dim": [0, 1], "keepdim": True, "dtype": torch.float16},
    (torch.Size([2, 3]), [torch.Size([4])]),
    (Pair(torch.ones(1), 2), collections.OrderedDict(b=1, a=[2, 3])),
    _fx_containers(),
    (torch.device("meta"), torch.contiguous_format, torch.strided, "mean", ()),
    (None, [], {}, ((),)),
]


def _tag(value):
    return ("leaf", type(value).__name__, value.shape if isinstance(value, torch.Tensor) else value)


@pytest.mark.parametrize("value", CASES + [(_node(), [_node(), 1])], ids=lambda v: type(v).__name__)
def test_map_args_matches_pytree(value):
    ours, theirs = map_args(_tag, value), pytree.tree_map(_tag, value)
    assert ours == theirs
    assert pytree.tree_structure(ours) == pytree.tree_structure(theirs)


@pytest.mark.parametrize("value", CASES, ids=lambda v: type(v).__name__)
def test_arg_leaves_matches_pytree(value):
    ours, theirs = list(arg_leaves(value)), pytree.tree_leaves(value)
    assert len(ours) == len(theirs)
    assert all(a is b for a, b in zip(ours, theirs))


def test_symbolic_sizes_are_leaves():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    env = ShapeEnv()
    s = env.create_unbacked_symint()
    value = ([s, 2], {"n": s})
    assert map_args(lambda v: ("seen", v) if v is s else v, value) == pytree.tree_map(
        lambda v: ("seen", v) if v is s else v, value)

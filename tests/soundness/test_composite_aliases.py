"""Operators that return their input itself, or a view of it, must be captured as aliases.

Many operators answer "nothing to do" by returning the input (`x.type_as(x)`,
`F.dropout(x, training=False)`, `x.sum_to_size(x.shape)`, `x.contiguous()` of a contiguous
tensor) or return views (`broadcast_tensors`, `einsum("ij->ji")`, `unsafe_split`). Eager then
writes through the result into the input. A capture that records the result as a new tensor
loses that write: a wrong answer, with static shapes already. Each case writes in place into
the result and returns the input; the exported program must give what eager gives, the
input's state after the call included. A write into the input after the call must likewise
be seen through the result. Each case is also exported with a dynamic dimension and called
at sizes 0, 1, 2 and 5.

The same operators, where eager computes a new tensor (dropout in training, an einsum that
multiplies, type_as to another dtype, sum_to_size that sums), keep their graphs: one node.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphport as gp

RETURNS_INPUT_OR_VIEW = {
    # answered right today
    "contiguous": lambda x: x.contiguous(),
    "float_of_float": lambda x: x.float(),
    "to_same_dtype": lambda x: x.to(torch.float32),
    "to_same_device": lambda x: x.to(x.device, copy=False),
    "detach": lambda x: x.detach(),
    "view_as": lambda x: x.view_as(x),
    "reshape_as_self": lambda x: x.reshape_as(x),
    "expand_as_self": lambda x: x.expand_as(x),
    "broadcast_to_self": lambda x: torch.broadcast_to(x, x.shape),
    "flatten_same_dim": lambda x: x.flatten(0, 0),
    "ravel": lambda x: x.ravel(),
    "atleast_2d": lambda x: torch.atleast_2d(x),
    "swapaxes": lambda x: x.swapaxes(0, 1),
    "movedim": lambda x: x.movedim(0, 1),
    "adjoint": lambda x: x.adjoint(),
    "chunk_one": lambda x: x.chunk(1, 0)[0],
    "split": lambda x: x.split(2, 0)[1],
    "tensor_split": lambda x: x.tensor_split(2, 0)[0],
    "unbind": lambda x: x.unbind(0)[0],
    "as_strided_same": lambda x: x.as_strided(x.shape, x.stride()),
    "identity_module": lambda x: torch.nn.Identity()(x),
    # kept whole (or copied) before; recorded as aliases now
    "type_as": lambda x: x.type_as(x),
    "sum_to_size_same": lambda x: x.sum_to_size(x.shape),
    "dropout_eval": lambda x: F.dropout(x, 0.5, training=False),
    "dropout_p0_train": lambda x: F.dropout(x, 0.0, training=True),
    "dropout2d_eval": lambda x: F.dropout2d(x[None, :, :, None], 0.5, training=False)[0, :, :, 0],
    "alpha_dropout_eval": lambda x: F.alpha_dropout(x, 0.5, training=False),
    "to_dense": lambda x: x.to_dense(),
    "cast_float": lambda x: torch.ops.aten._cast_Float(x),
    "broadcast_tensors": lambda x: torch.broadcast_tensors(x, x)[0],
    "broadcast_tensors_expanding_other": lambda x: torch.broadcast_tensors(x, x[:1])[0],
    "meshgrid": lambda x: torch.meshgrid(x[0], indexing="ij")[0],
    "einsum_identity": lambda x: torch.einsum("ij->ij", x),
    "einsum_transpose": lambda x: torch.einsum("ij->ji", x),
    "unsafe_chunk": lambda x: x.unsafe_chunk(2, 0)[1],
    "unsafe_split": lambda x: x.unsafe_split(2, 0)[0],
    "unsafe_split_with_sizes": lambda x: x.unsafe_split_with_sizes([1, 3], 0)[1],
}


def _write_through(op):
    def program(x):
        y = op(x)
        y.add_(1)
        return x * 1, y * 1
    return program


@pytest.mark.parametrize("op", list(RETURNS_INPUT_OR_VIEW.values()), ids=list(RETURNS_INPUT_OR_VIEW))
def test_a_write_through_the_result_reaches_the_input(op):
    program = _write_through(op)
    x = torch.randn(4, 3)
    ep = gp.export(program, (x.clone(),))
    eager_x, graph_x = x.clone(), x.clone()
    want, got = program(eager_x), ep.module()(graph_x)
    torch.testing.assert_close(graph_x, eager_x, msg=lambda m: f"the input after the call: {m}")
    torch.testing.assert_close(got, want, msg=lambda m: f"outputs: {m}")


def _write_into_input(op):
    def program(x):
        y = op(x)
        x.mul_(2)
        return y * 1
    return program


@pytest.mark.parametrize("op", list(RETURNS_INPUT_OR_VIEW.values()), ids=list(RETURNS_INPUT_OR_VIEW))
def test_a_write_into_the_input_is_seen_through_the_result(op):
    program = _write_into_input(op)
    x = torch.randn(4, 3)
    ep = gp.export(program, (x.clone(),))
    eager_x, graph_x = x.clone(), x.clone()
    want, got = program(eager_x), ep.module()(graph_x)
    torch.testing.assert_close(graph_x, eager_x, msg=lambda m: f"the input after the call: {m}")
    torch.testing.assert_close(got, want, msg=lambda m: f"output: {m}")


# Ops whose arguments need a static size of their own (a split into pieces of 2, two-row
# broadcasts) vary dimension 1; the rest would do with either.
@pytest.mark.parametrize("make_program", [_write_through, _write_into_input], ids=["through_result", "into_input"])
@pytest.mark.parametrize("op", list(RETURNS_INPUT_OR_VIEW.values()), ids=list(RETURNS_INPUT_OR_VIEW))
def test_aliases_with_a_dynamic_dimension(op, make_program):
    program = make_program(op)
    n = gp.Dim("n", min=0, max=16)
    ep = gp.export(program, (torch.randn(4, 3),), dynamic_shapes=({1: n},))
    for size in (0, 1, 2, 5):
        x = torch.randn(4, size)
        eager_x, graph_x = x.clone(), x.clone()
        want, got = program(eager_x), ep.module()(graph_x)
        torch.testing.assert_close(graph_x, eager_x, msg=lambda m: f"the input after the call at n = {size}: {m}")
        torch.testing.assert_close(got, want, msg=lambda m: f"outputs at n = {size}: {m}")


COMPUTES_A_NEW_TENSOR = {
    "dropout_train": (lambda x: F.dropout(x, 0.5, training=True), "native_dropout"),
    "einsum_product": (lambda x: torch.einsum("ij,kj->ik", x, x), "einsum"),
    "einsum_sum": (lambda x: torch.einsum("ij->i", x), "einsum"),
    "type_as_other_dtype": (lambda x: x.type_as(x.double()), "type_as"),
    "sum_to_size_sums": (lambda x: x.sum_to_size(1, 3), "sum_to_size"),
}


@pytest.mark.parametrize("case", list(COMPUTES_A_NEW_TENSOR.values()), ids=list(COMPUTES_A_NEW_TENSOR))
def test_where_eager_computes_a_new_tensor_the_op_stays_one_node(case):
    op, kept = case
    program = _write_through(op)
    x = torch.randn(4, 3)
    ep = gp.export(program, (x.clone(),))
    targets = [n.target.__name__.split(".")[0] for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count(kept) == 1, f"expected one {kept} node, the graph calls {targets}"
    if kept != "native_dropout":
        eager_x, graph_x = x.clone(), x.clone()
        want, got = program(eager_x), ep.module()(graph_x)
        torch.testing.assert_close(graph_x, eager_x)
        torch.testing.assert_close(got, want)


ON_A_CONSTANT = {
    "type_as": lambda c, x: c.type_as(x),
    "sum_to_size_same": lambda c, x: c.sum_to_size(3),
    "dropout_eval": lambda c, x: F.dropout(c, 0.2, training=False),
    "einsum_identity": lambda c, x: torch.einsum("i->i", c),
    "broadcast_tensors": lambda c, x: torch.broadcast_tensors(c, x)[0],
}


@pytest.mark.parametrize("op", list(ON_A_CONSTANT.values()), ids=list(ON_A_CONSTANT))
def test_applied_to_a_plain_tensor_attribute(op):
    """The operand is a module's plain tensor attribute (a constant of the program)."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.randn(3)

        def forward(self, x):
            return op(self.c, x) * x

    model, x = Model(), torch.randn(2, 3)
    ep = gp.export(model, (x,))
    torch.testing.assert_close(ep.module()(x), model(x))


def test_a_cond_branch_may_return_eval_dropout_of_its_operand():
    def program(p, x):
        return torch.cond(p.sum() > 0, lambda x: F.dropout(x, 0.5, training=False), lambda x: x * 2, (x,))
    args = (torch.ones(2), torch.randn(3))
    ep = gp.export(program, args)
    torch.testing.assert_close(ep.module()(*args), program(*args))

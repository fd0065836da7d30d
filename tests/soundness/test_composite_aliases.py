"""Operators that return their input itself, or a view of it, must be captured as aliases.

Many operators answer "nothing to do" by returning the input (`x.type_as(x)`,
`F.dropout(x, training=False)`, `x.sum_to_size(x.shape)`, `x.contiguous()` of a contiguous
tensor) or return views (`broadcast_tensors`, `einsum("ij->ji")`, `unsafe_split`). Eager then
writes through the result into the input. A capture that records the result as a new tensor
loses that write: a wrong answer, with static shapes already. Each case writes in place into
the result and returns the input; the exported program must give what eager gives, the
input's state after the call included.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphport as gp

KEPT_WHOLE = ("a composite operator the graph keeps whole returns its input (or a view of it) in "
              "eager, but the capture treats its output as a new tensor: the in-place write "
              "through it is lost")

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
    # wrong today
    "type_as": lambda x: x.type_as(x),
    "sum_to_size_same": pytest.param(lambda x: x.sum_to_size(x.shape),
                                     marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "dropout_eval": pytest.param(lambda x: F.dropout(x, 0.5, training=False),
                                 marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "dropout_p0_train": pytest.param(lambda x: F.dropout(x, 0.0, training=True),
                                     marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "to_dense": pytest.param(lambda x: x.to_dense(), marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "broadcast_tensors": pytest.param(lambda x: torch.broadcast_tensors(x, x)[0],
                                      marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "meshgrid": pytest.param(lambda x: torch.meshgrid(x[0], indexing="ij")[0],
                             marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "einsum_identity": pytest.param(lambda x: torch.einsum("ij->ij", x),
                                    marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "einsum_transpose": pytest.param(lambda x: torch.einsum("ij->ji", x),
                                     marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "unsafe_chunk": pytest.param(lambda x: x.unsafe_chunk(2, 0)[1],
                                 marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
    "unsafe_split": pytest.param(lambda x: x.unsafe_split(2, 0)[0],
                                 marks=pytest.mark.xfail(strict=True, reason=KEPT_WHOLE)),
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

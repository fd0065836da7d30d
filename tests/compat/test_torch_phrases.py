"""Errors in torch.export's words too: for each situation of docs/errors.md's table "torch.export's
words", the same user code runs against both exporters, and the canonical phrase torch.export
prints there (matched as a regular expression) is in both messages. graphport's own text, the
user's line and the fix stay: each graphport error is also checked for its class, its location
in this file and a fix."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import graphport as gp

from .exporters import EXPORTERS


class Narrowed(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[0] >= 3)
        torch._check(x.shape[0] <= 6)
        return x + 1


class Plain(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Pair(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Specialized(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[0] == 4)
        return x * 2


class BranchOnNonzeroCount(torch.nn.Module):
    def forward(self, x):
        n = x.nonzero().shape[0]
        if n > 2:
            return x + 1
        return x - 1


class MutatesConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.tensor([1.0, 2.0])

    def forward(self, x):
        self.c.add_(1)
        return x + self.c


class MutatesConstantThroughDetach(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.tensor([1.0, 2.0])

    def forward(self, x):
        y = x + self.c
        self.c.detach().mul_(2)
        return y


RUNNING_MEAN, RUNNING_VAR = torch.zeros(3), torch.ones(3)


class StatsInAClosure(torch.nn.Module):
    """Running statistics held by no module: a lifted constant that instance_norm updates."""

    def forward(self, x):
        return F.instance_norm(x, RUNNING_MEAN, RUNNING_VAR, use_input_stats=True)


@dataclass
class Row:
    situation: str
    run: Callable      # (exporter) -> anything; raises in both exporters
    phrase: str        # torch.export's words, a regular expression
    graphport_class: type


ROWS = [
    Row("a range the program narrows",
        lambda ex: ex.export(Narrowed(), (torch.randn(4, 2),), dynamic_shapes={"x": {0: ex.Dim("d", min=1, max=10)}}),
        r"Constraints violated \(d\)!(.|\n)*Suggested fixes:\n  d = Dim\('d', min=3, max=6\)",
        gp.ConstraintViolationError),
    Row("two dims the program makes equal",
        lambda ex: ex.export(Pair(), (torch.randn(4, 2), torch.randn(4, 2)),
                             dynamic_shapes={"x": {0: ex.Dim("d")}, "y": {0: ex.Dim("e")}}),
        r"Constraints violated \(e\)!(.|\n)*Suggested fixes:\n  e = d", gp.ConstraintViolationError),
    Row("a dynamic dim the program makes a constant",
        lambda ex: ex.export(Specialized(), (torch.randn(4, 2),), dynamic_shapes={"x": {0: ex.Dim("d")}}),
        r"Constraints violated \(d\)!(.|\n)*Suggested fixes:\n  d = 4", gp.ConstraintViolationError),
    Row("an example size outside its Dim",
        lambda ex: ex.export(Plain(), (torch.randn(3, 2),), dynamic_shapes={"x": {0: ex.Dim("d", min=5, max=10)}}),
        r"3 not in range \[5, 10\]", gp.ConstraintViolationError),
    Row("a static size the example does not have",
        lambda ex: ex.export(Plain(), (torch.randn(4, 2),), dynamic_shapes={"x": {0: 5}}),
        r"Static shape constraint of 5 does not match input size of 4", gp.ConstraintViolationError),
    Row("a branch on a data-dependent size",
        lambda ex: ex.export(BranchOnNonzeroCount(), (torch.randn(4, 2),)),
        r"Could not guard on data-dependent expression u0 > 2", gp.DataDependentError),
    Row("a bare tensor as args",
        lambda ex: ex.export(Plain(), torch.randn(4, 2)),
        r"Expecting `args` to be a tuple of example positional inputs, got <class 'torch.Tensor'>",
        gp.UnsupportedInputError),
    Row("a spec keyed by names that are not the arguments",
        lambda ex: ex.export(Plain(), (torch.randn(4, 2),), dynamic_shapes={"y": {0: ex.Dim("d")}}),
        re.escape("When `dynamic_shapes` is specified as a dict, its top-level keys must be the arg names ['x'] "
                  "of `inputs`, but here they are ['y']."), gp.UnsupportedInputError),
    # torch.export accepts these programs and refuses them when they are lowered; graphport at export
    Row("an in-place write into a tensor attribute",
        lambda ex: ex.export(MutatesConstant(), (torch.randn(2),)).run_decompositions(),
        r"Constant c is mutated in the forward method\. Pls register it as buffer", gp.ConstantMutationError),
    Row("an in-place write through a detached tensor attribute",
        lambda ex: ex.export(MutatesConstantThroughDetach(), (torch.randn(2),)).run_decompositions(),
        r"Constant c is mutated in the forward method\. Pls register it as buffer", gp.ConstantMutationError),
    Row("an in-place write into a tensor no module holds",
        lambda ex: ex.export(StatsInAClosure(), (torch.randn(2, 3, 4, 4),)).run_decompositions(),
        r"Constant lifted_tensor_0 is mutated in the forward method\. Pls register it as buffer",
        gp.ConstantMutationError),
]


@pytest.mark.parametrize("exporter", list(EXPORTERS))
@pytest.mark.parametrize("row", ROWS, ids=[r.situation for r in ROWS])
def test_torchs_phrase_is_in_both_messages(row: Row, exporter: str):
    with pytest.raises(Exception) as caught:
        row.run(EXPORTERS[exporter])
    assert re.search(row.phrase, str(caught.value)), str(caught.value)


@pytest.mark.parametrize("row", ROWS, ids=[r.situation for r in ROWS])
def test_graphport_keeps_its_own_text_line_and_fix(row: Row):
    with pytest.raises(row.graphport_class) as caught:
        row.run(EXPORTERS["graphport"])
    err = caught.value
    assert err.fix and err.location is not None and err.location.filename == __file__
    own, torchs = err.msg.split(gp.errors.TORCH_WORDS)
    assert err.what in own and not re.search(row.phrase, own)
    assert re.search(row.phrase, torchs)


class ReadsDetachedConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.tensor([1.0, 2.0])

    def forward(self, x):
        return x * self.c.detach()


def test_a_detached_tensor_attribute_that_is_only_read_is_a_constant():
    model, x = ReadsDetachedConstant(), torch.randn(3, 2)
    ep = gp.export(model, (x,))
    assert list(ep.constants) == ["c"]
    fresh = torch.randn(3, 2)
    assert torch.equal(ep.module()(fresh), model(fresh))


def test_refining_a_spec_from_the_message_still_works():
    spec = {"x": {0: gp.Dim("d", min=1, max=10)}}
    with pytest.raises(gp.ConstraintViolationError) as caught:
        gp.export(Narrowed(), (torch.randn(4, 2),), dynamic_shapes=spec)
    refined = gp.refine_dynamic_shapes_from_suggested_fixes(caught.value.msg, spec)
    assert (refined["x"][0].min, refined["x"][0].max) == (3, 6)
    gp.export(Narrowed(), (torch.randn(4, 2),), dynamic_shapes=refined)


def test_the_phrase_survives_pickling():
    import pickle
    with pytest.raises(gp.DataDependentError) as caught:
        gp.export(BranchOnNonzeroCount(), (torch.randn(4, 2),))
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.msg == caught.value.msg and again.torch_phrase == caught.value.torch_phrase

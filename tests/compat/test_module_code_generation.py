"""`ep.module()` generates and compiles its graph's code once: the checked call runs the
graph's body, and fx's `forward` and `.code` are generated only when something uses them
(a hook, a direct `forward` call, reading the code, printing). Whenever they are generated,
they are what fx generates for the module's graph, and calls give the same results."""
from __future__ import annotations

import copy
import inspect

import pytest
import torch
import torch.fx as fx

import graphport as gp


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        return self.linear(x) + y


@pytest.fixture
def generations(monkeypatch):
    """How many times fx generated the Python code of a graph."""
    count = [0]
    real = fx.Graph.python_code

    def counting(graph, *args, **kwargs):
        count[0] += 1
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(fx.Graph, "python_code", counting)
    return count


def program():
    torch.manual_seed(0)
    model = TwoInputs()
    args = (torch.randn(3, 4), torch.randn(3, 4))
    return model, args, gp.export(model, args, dynamic_shapes={"x": {0: gp.Dim("b")}, "y": {0: gp.Dim("b")}})


def test_making_and_calling_the_module_generates_the_code_once(generations):
    model, args, ep = program()
    generations[0] = 0
    module = ep.module()
    assert generations[0] == 1
    for batch in (0, 1, 5):
        fresh = (torch.randn(batch, 4), torch.randn(batch, 4))
        assert torch.equal(module(*fresh), model(*fresh))
    assert generations[0] == 1


@pytest.mark.parametrize("use", ["code", "str", "signature", "forward", "hook", "deepcopy"])
def test_what_uses_fx_forward_gets_it(use, generations):
    model, args, ep = program()
    module, reference = ep.module(), ep.module()
    reference.recompile()   # generated up front, as fx does
    if use == "code":
        assert module.code == reference.code and "def forward(self, x, y)" in module.code
    elif use == "str":
        assert str(module) == str(reference)
    elif use == "signature":
        assert list(inspect.signature(module.forward).parameters) == ["x", "y"]
    elif use == "forward":
        assert torch.equal(module.forward(*args), model(*args))
    elif use == "hook":
        seen = []
        module.register_forward_hook(lambda mod, inputs, output: seen.append(output.shape))
        assert torch.equal(module(*args), model(*args)) and seen == [(3, 4)]
    else:
        copied = copy.deepcopy(module)
        assert copied.code == reference.code and torch.equal(copied(*args), model(*args))
    # the checks stay: a wrong input is refused with graphport's error whichever way it is called
    with pytest.raises(gp.InputGuardError):
        module(torch.randn(3, 4), torch.randn(2, 4))

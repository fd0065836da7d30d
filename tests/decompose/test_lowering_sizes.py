"""run_decompositions proves the small sizes its decompositions assume away (passes/
lowering_sizes.py): the lowering is made again at each size the program accepts below the
lowering's assumption, and a size where the lowered graph differs is refused by the lowered
program at call time (with a warning at lowering), never run on a graph the proof did not see."""
import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.symbolic_shapes import guard_or_false

import graphport as gp

aten = torch.ops.aten


def _relu_that_differs_at_one(x):
    """A user decomposition taking another path when the batch is 1 (a wrong one there)."""
    if guard_or_false(x.shape[0] == 1):
        return x.clone()
    return aten.clamp_min.default(x, 0)


def _program(min_batch: int):
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    batch = gp.Dim("batch", min=min_batch, max=32)
    return model, gp.export(model, (torch.randn(3, 4),), dynamic_shapes={"input": {0: batch}})


def test_a_decomposition_that_differs_at_a_smaller_size_is_refused_there_naming_it():
    model, ep = _program(0)
    with pytest.warns(UserWarning, match="batch < 2 is refused at call time by the lowered program"):
        core = ep.run_decompositions({aten.relu.default: _relu_that_differs_at_one})
    with pytest.raises(gp.InputGuardError, match="batch >= 2"):
        core.module()(torch.randn(1, 4))
    x = torch.randn(4, 4)
    torch.testing.assert_close(core.module()(x), model(x))


def test_the_program_as_exported_still_runs_at_that_size():
    model, ep = _program(0)
    before = str(ep)
    with pytest.warns(UserWarning):
        ep.run_decompositions({aten.relu.default: _relu_that_differs_at_one})
    assert str(ep) == before
    for n in (0, 1):
        x = torch.randn(n, 4)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_sizes_the_program_refuses_need_no_proof():
    model, ep = _program(2)   # batch >= 2: the decomposition's assumption is the program's
    core = ep.run_decompositions({aten.relu.default: _relu_that_differs_at_one})
    x = torch.randn(5, 4)
    torch.testing.assert_close(core.module()(x), model(x))


@pytest.mark.parametrize("table", [None, {}])
def test_layers_lowered_at_every_size_match_eager(table):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 5 * 5, 6), nn.LayerNorm(6), nn.GELU()).eval()
    batch = gp.Dim("batch", min=0, max=16)
    ep = gp.export(model, (torch.randn(3, 3, 5, 5),), dynamic_shapes={"input": {0: batch}})
    core = ep.run_decompositions(table)
    with torch.no_grad():
        for n in (0, 1, 2, 7):
            x = torch.randn(n, 3, 5, 5)
            torch.testing.assert_close(core.module()(x), model(x))


def _add_that_differs_when_both_are_one(x, y):
    """Another path only when both batches are 1 (a wrong one there)."""
    x_is_one, y_is_one = guard_or_false(x.shape[0] == 1), guard_or_false(y.shape[0] == 1)
    if x_is_one and y_is_one:
        return x.clone()
    return aten.sub.Tensor(x, aten.neg.default(y))


def test_sizes_wrong_only_together_refuse_the_lowering_naming_both():
    def f(x, y):
        return (x + y).relu()

    a, b = gp.Dim("a", min=0, max=8), gp.Dim("b", min=0, max=8)
    ep = gp.export(f, (torch.randn(3, 4), torch.randn(3, 1, 4)), dynamic_shapes=({0: a}, {0: b}))
    with pytest.raises(gp.UnsupportedFeatureError, match="a = 1, b = 1 together") as info:
        ep.run_decompositions({aten.add.Tensor: _add_that_differs_when_both_are_one})
    assert isinstance(info.value, RuntimeError) and "test_lowering_sizes.py" in str(info.value)

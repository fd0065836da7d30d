"""export, run_decompositions and load pause the cycle collector and always restore it."""
import gc

import pytest
import torch

import graphport as gp
from graphport._gc import cycle_collection_paused


@pytest.fixture(autouse=True)
def _collector_restored():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_restored_after():
    seen = []

    @cycle_collection_paused()
    def inner():
        seen.append(gc.isenabled())

    gc.enable()
    inner()
    assert seen == [False] and gc.isenabled()


def test_restored_after_an_error():
    @cycle_collection_paused()
    def failing():
        raise ValueError("boom")

    gc.enable()
    with pytest.raises(ValueError):
        failing()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    @cycle_collection_paused()
    def inner():
        return 1

    gc.disable()
    assert inner() == 1 and not gc.isenabled()


def test_nested_calls_keep_it_paused_until_the_outermost_returns():
    states = []

    @cycle_collection_paused()
    def inner():
        states.append(gc.isenabled())

    @cycle_collection_paused()
    def outer():
        inner()
        states.append(gc.isenabled())

    gc.enable()
    outer()
    assert states == [False, False] and gc.isenabled()


def test_export_leaves_the_collector_on_and_matches_eager(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    x = torch.randn(3, 4)
    gc.enable()
    ep = gp.export(model, (x,))
    assert gc.isenabled()
    decomposed = ep.run_decompositions()
    assert gc.isenabled()
    gp.save(decomposed, tmp_path / "m.gport")
    loaded = gp.load(tmp_path / "m.gport")
    assert gc.isenabled()
    fresh = torch.randn(3, 4)
    for program in (ep, decomposed, loaded):
        torch.testing.assert_close(program.module()(fresh), model(fresh))


def test_export_refusal_restores_the_collector():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x + 1 if x.sum() > 0 else x - 1

    gc.enable()
    with pytest.raises(gp.DataDependentError):
        gp.export(Branchy(), (torch.randn(2),))
    assert gc.isenabled()

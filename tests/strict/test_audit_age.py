"""Which objects predate the call: the audit's age check while the cycle collector runs.

The collector keeps running during export, so a container forward builds can leave the
collector's youngest generation before forward writes into it (a long run of operators in
between is enough). Such a write is forward's own business: no finding, and strict export
accepts the program. A container that existed before the call is still found after the same
collections."""
import gc

import pytest
import torch

import graphport as gp

RESULTS: dict = {"seen": 0}


def _collections_between(x):
    """Operators and collections enough that anything made before has left generation 0."""
    for _ in range(50):
        x = x * 2 + 1
    gc.collect(0)
    gc.collect(1)
    return x


class BuildsThenWrites(torch.nn.Module):
    def forward(self, x):
        acc = {"first": x}
        parts = [x]
        x = _collections_between(x)
        acc["last"] = x          # acc and parts were made by this call
        parts.append(x)
        parts[0] = parts[0] + 1
        return acc["last"] + parts[0] + parts[-1]


class WritesGlobal(torch.nn.Module):
    def forward(self, x):
        x = _collections_between(x)
        RESULTS["seen"] = 1      # existed before the call: an effect
        return x


@pytest.mark.parametrize("strict", [False, True])
def test_containers_made_by_the_call_are_its_own_after_collections(strict):
    x = torch.randn(4)
    ep = gp.export(BuildsThenWrites(), (x,), strict=strict)
    assert ep.python_effects == []
    for fresh in (x, torch.randn(4), torch.randn(4)):
        torch.testing.assert_close(ep.module()(fresh), BuildsThenWrites()(fresh))


def test_a_long_forward_writing_its_own_dict_exports_strict():
    """The same without an explicit collection: enough operators for the collector to run."""
    class Long(torch.nn.Module):
        def forward(self, x):
            acc = {"a": [1]}
            for _ in range(300):
                x = x * 2 + 1
            acc["b"] = x
            return acc["b"]

    x = torch.randn(3)
    ep = gp.export(Long(), (x,), strict=True)
    torch.testing.assert_close(ep.module()(x), Long()(x))


def test_a_container_that_predates_the_call_is_still_found_after_collections():
    ep = gp.export(WritesGlobal(), (torch.randn(4),))
    assert [e.kind for e in ep.python_effects if e.refused_by_strict] == ["container write"]
    with pytest.raises(gp.PythonEffectError, match="RESULTS"):
        gp.export(WritesGlobal(), (torch.randn(4),), strict=True)


def test_the_collector_callback_is_removed_after_export():
    before = list(gc.callbacks)
    gp.export(BuildsThenWrites(), (torch.randn(4),), strict=True)
    with pytest.raises(gp.PythonEffectError):
        gp.export(WritesGlobal(), (torch.randn(4),), strict=True)
    assert gc.callbacks == before

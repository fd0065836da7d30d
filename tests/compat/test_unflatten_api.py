"""unflatten's API as torch.export has it: `FlatArgsAdapter` and `UnflattenedModule` as names
users import; a preserved submodule called several times in one forward (each call its own
module_call_graph entry, `n`, `n@1`, ..., as torch records them), also when it updates a
buffer; swapping in an eager module, also one called with keyword arguments; and a call of
another structure, refused without an adapter (torch's words) and adapted with one. The same
user code against both exporters."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.export.unflatten import FlatArgsAdapter as TorchFlatArgsAdapter

import graphport as gp
from graphport.unflatten import FlatArgsAdapter, UnflattenedModule

from tests.soundness import assert_same

from .exporters import EXPORTERS

ADAPTERS = {"graphport": FlatArgsAdapter, "torch": TorchFlatArgsAdapter}


class Counted(nn.Module):
    """Updates a buffer on every call; takes a dict argument."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x, d):
        self.calls.add_(1)
        return {"out": self.lin(x) * self.calls + d["b"]}


class ThreeCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = Counted()

    def forward(self, x):
        y = self.n(x, {"b": x})["out"]
        z = self.n(y, {"b": y})["out"]
        return self.n(z, {"b": x})["out"].relu()


class KeywordCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = Counted()

    def forward(self, x):
        return self.n(x, d={"b": x * 2})["out"]


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y):
        return self.lin(x) - y


def _export(ex, model, *args):
    return ex.export(model, args, preserve_module_call_signature=("n",))


def test_the_names_users_import():
    ep = gp.export(TwoInputs(), (torch.randn(2, 3), torch.randn(2, 3)))
    assert isinstance(gp.unflatten(ep), UnflattenedModule) and gp.UnflattenedModule is UnflattenedModule
    assert gp.FlatArgsAdapter is FlatArgsAdapter
    with pytest.raises(TypeError):
        FlatArgsAdapter()   # abstract, as torch's


def test_each_call_of_a_preserved_module_has_its_entry(ex):
    ep = _export(ex, ThreeCalls(), torch.randn(2, 3))
    entries = [e.fqn for e in ep.module_call_graph]
    assert entries == ["", "n", "n.lin", "n@1", "n@2"]
    signatures = {e.fqn: e.signature for e in ep.module_call_graph}
    assert all(signatures[k].in_spec == signatures["n"].in_spec for k in ("n@1", "n@2"))
    assert [len(signatures[k].inputs) for k in ("n", "n@1", "n@2")] == [2, 2, 2]


def test_unflattened_calls_update_the_buffer_as_eager(ex):
    model, x = ThreeCalls(), torch.randn(2, 3)
    eager = copy.deepcopy(model)
    unflat = ex.unflatten(_export(ex, model, x))
    for fresh in (x, torch.randn(2, 3)):
        assert_same(unflat(fresh), eager(fresh), exact=False)
    assert torch.equal(unflat.n.calls, eager.n.calls) and eager.n.calls.item() == 6


def test_an_eager_module_swapped_in_takes_every_call(ex):
    model, x = ThreeCalls(), torch.randn(2, 3)
    unflat = ex.unflatten(_export(ex, copy.deepcopy(model), x))
    swapped = copy.deepcopy(model.n)
    unflat.set_submodule("n", swapped)
    assert_same(unflat(x), model(x), exact=False)
    assert swapped.calls.item() == 3


def test_an_eager_module_called_with_keywords_can_be_swapped_in(ex):
    model, x = KeywordCall(), torch.randn(2, 3)
    unflat = ex.unflatten(_export(ex, copy.deepcopy(model), x))
    unflat.set_submodule("n", copy.deepcopy(model.n))
    assert_same(unflat(x), model(x), exact=False)


def test_a_call_of_another_structure_needs_an_adapter(ex):
    model, x, y = TwoInputs(), torch.randn(2, 3), torch.randn(2, 3)
    unflat = ex.unflatten(ex.export(model, (x, y)))
    with pytest.raises(TypeError, match="There is no flat args adapter specified"):
        unflat((x, y, torch.randn(2, 3)))


@pytest.mark.parametrize("exporter", list(EXPORTERS))
def test_a_flat_args_adapter_maps_the_call(exporter):
    ex = EXPORTERS[exporter]

    class KeepTwo(ADAPTERS[exporter]):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return input_args[:2]

    model, x, y = TwoInputs(), torch.randn(2, 3), torch.randn(2, 3)
    unflat = ex.unflatten(ex.export(model, (x, y)), KeepTwo())
    assert_same(unflat(x, y, torch.randn(2, 3)), model(x, y), exact=False)
    assert_same(unflat(x, y), model(x, y), exact=False)


def test_graphport_checks_what_the_adapter_gives():
    class KeepOne(FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return input_args[:1]

    class WrongShapes(FlatArgsAdapter):
        def adapt(self, target_spec, input_spec, input_args, metadata=None, obj=None):
            return [a[:, :2] for a in input_args[:2]]

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    ep = gp.export(TwoInputs(), (x, y))
    with pytest.raises(gp.FlatArgsError, match="number of args mismatch") as caught:
        gp.unflatten(ep, KeepOne())(x, y, x)
    assert "gave 1 arguments; the program takes 2" in caught.value.msg
    with pytest.raises(gp.InputGuardError):
        gp.unflatten(ep, WrongShapes())(x, y, x)


def test_graphport_error_without_an_adapter_keeps_its_own_text():
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    unflat = gp.unflatten(gp.export(TwoInputs(), (x, y)))
    with pytest.raises(gp.FlatArgsError) as caught:
        unflat(x, y, x)  # <- here
    err = caught.value
    assert isinstance(err, gp.InputStructureError) and isinstance(err, ValueError)
    assert "FlatArgsAdapter" in err.fix and err.location.filename == __file__


def test_a_preserved_module_called_with_another_structure_is_refused():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = Counted()

        def forward(self, x):
            return self.n(x, {"b": x})["out"] + self.n(x, d={"b": x})["out"]

    with pytest.raises(gp.UnsupportedFeatureError, match="'n'.*another structure than at its first call"):
        gp.export(Mixed(), (torch.randn(2, 3),), preserve_module_call_signature=("n",))


def test_repeated_preserved_calls_unflatten_after_lowering(tmp_path):
    model, x = ThreeCalls(), torch.randn(2, 3)
    ep = gp.export(copy.deepcopy(model), (x,), preserve_module_call_signature=("n",))
    lowered = gp.unflatten(ep.run_decompositions())
    assert_same(lowered(x), model(x), exact=False)
    # the artifact records which buffer values the calls left (ModuleCallSignature.state_writes)
    gp.save(ep, tmp_path / "p.gport")
    loaded = gp.load(tmp_path / "p.gport")
    writes = [e.signature.state_writes for e in ep.module_call_graph if e.signature is not None]
    assert any(writes) and writes == [e.signature.state_writes for e in loaded.module_call_graph
                                      if e.signature is not None]
    reference, unflat = copy.deepcopy(model), gp.unflatten(loaded)
    for _ in range(2):   # the buffer the calls update carries over from call to call, as in eager
        assert_same(unflat(x), reference(x), exact=False)
    assert_same(unflat.n.calls, reference.n.calls)

"""Custom objects (TorchBind classes): the same module, holding a `torch.classes` object and
calling it in forward, exported by graphport and by torch.export (the classes:
tests/torchbind_classes.py, compiled from C++, with a Python fake class)."""
from __future__ import annotations

import collections
import io

import pytest
import torch

import graphport as gp
from graphport.interop import to_torch
from torchbind_classes import NS, Model, inputs as _inputs


@pytest.fixture
def classes(torchbind_classes):
    return torchbind_classes


def _signature(ep):
    return [(s.kind.name, s.arg.name, s.target, getattr(s.arg, "class_fqn", None))
            for s in ep.graph_signature.input_specs] + [(s.kind.name, s.target) for s in ep.graph_signature.output_specs]


def _ops(ep):
    return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def _eager(model, x, y):
    """Eager's answer on fresh copies of the model's state (the object counts its calls)."""
    with torch.no_grad():
        return model(x, y)


@pytest.mark.parametrize("dynamic", [False, True])
def test_same_program_as_torch_export(classes, ex, dynamic):
    torch.manual_seed(0)
    model = Model(classes)
    shapes = {"x": {0: ex.Dim("n")}, "y": {0: ex.Dim("n")}} if dynamic else None
    ep = ex.export(model, _inputs(3), dynamic_shapes=shapes)
    assert [s for s in _signature(ep) if s[0] == "CUSTOM_OBJ"] == [
        ("CUSTOM_OBJ", "obj_scaler", "scaler", f"__torch__.torch.classes.{NS}.Scaler")]
    assert ep.constants["scaler"] is model.scaler and "spare" not in ep.constants
    assert _ops(ep)["call_torchbind"] == 1 and _ops(ep)[f"{NS}.scaled_add.default"] == 1
    for n in ([0, 1, 2, 7] if dynamic else [3]):
        x, y = _inputs(n)
        torch.testing.assert_close(ep.module()(x, y), _eager(model, x, y))


@pytest.mark.parametrize("dynamic", [False, True])
def test_signature_and_operators_equal_torch_exports(classes, dynamic):
    torch.manual_seed(0)
    model = Model(classes)
    shapes = {"x": {0: gp.Dim("n")}, "y": {0: gp.Dim("n")}} if dynamic else None
    tshapes = {"x": {0: torch.export.Dim("n")}, "y": {0: torch.export.Dim("n")}} if dynamic else None
    ours = gp.export(model, _inputs(3), dynamic_shapes=shapes)
    theirs = torch.export.export(model, _inputs(3), dynamic_shapes=tshapes)
    assert _signature(ours) == _signature(theirs)
    assert _ops(ours) == _ops(theirs)
    assert "call_torchbind(obj_scaler, 'apply'" in str(ours)
    assert "obj_scaler: CUSTOM_OBJ target='scaler'" in str(ours)
    from graphport.viewer.data import program_data
    shown = {n["n"]: n for n in program_data(ours)["graphs"]["main"]}
    assert shown["obj_scaler"]["o"] == "custom object" and shown["obj_scaler"]["t"] == "custom_obj scaler"


def test_method_calls_run_on_the_real_object(classes):
    model = Model(classes)
    before = model.scaler.count()
    ep = gp.export(model, _inputs(2))
    assert model.scaler.count() == before        # export ran the fake class, not the object
    ep.module()(*_inputs(2))
    assert model.scaler.count() == before + 2    # apply, once directly and once inside scaled_add


def test_calls_stay_in_program_order_and_are_never_dead_code(classes):
    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scaler = classes.Scaler(2.0)

        def forward(self, x):
            self.scaler.apply(x)          # result unused: the call still changes the object's state
            return self.scaler.apply(x + 1)

    model = Unused()
    ep = gp.export(model, (torch.randn(3),))
    calls = [n for n in ep.graph.nodes if n.op == "call_function" and "call_torchbind" in str(n.target)]
    assert len(calls) == 2 and not calls[0].users
    before = model.scaler.count()
    ep.module()(torch.randn(3))
    assert model.scaler.count() == before + 2
    lowered = ep.run_decompositions()
    assert [method for _, method in _effects(lowered)] == ["apply", "apply"]
    before = model.scaler.count()
    lowered.module()(torch.randn(3))
    assert model.scaler.count() == before + 2


def _effects(ep):
    """What each with_effects call orders: the operator's name (and the method, for call_torchbind)."""
    return [(str(n.args[1]), n.args[3] if "call_torchbind" in str(n.args[1]) else None)
            for n in ep.graph.nodes if n.op == "call_function" and "with_effects" in str(n.target)]


@pytest.mark.parametrize("dynamic", [False, True])
def test_lowering_threads_effect_tokens_as_torch(classes, dynamic):
    torch.manual_seed(0)
    model = Model(classes)
    shapes = {"x": {0: gp.Dim("n")}, "y": {0: gp.Dim("n")}} if dynamic else None
    tshapes = {"x": {0: torch.export.Dim("n")}, "y": {0: torch.export.Dim("n")}} if dynamic else None
    ours = gp.export(model, _inputs(3), dynamic_shapes=shapes).run_decompositions()
    theirs = torch.export.export(model, _inputs(3), dynamic_shapes=tshapes).run_decompositions()
    assert ours.dialect == "ATEN"
    kinds = lambda ep: ([s.kind.name for s in ep.graph_signature.input_specs],
                        [s.kind.name for s in ep.graph_signature.output_specs])
    assert kinds(ours) == kinds(theirs) and kinds(ours)[0][0] == "TOKEN" and kinds(ours)[1][0] == "TOKEN"
    assert _ops(ours) == _ops(theirs)
    assert _effects(ours) == _effects(theirs) == [("call_torchbind", "apply"), (f"{NS}.scaled_add.default", None)]
    for n in ([0, 1, 5] if dynamic else [3]):
        x, y = _inputs(n)
        torch.testing.assert_close(ours.module()(x, y), _eager(model, x, y))
    unflat = gp.unflatten(ours)           # tokens removed first, as torch's unflatten does
    x, y = _inputs(3)
    torch.testing.assert_close(unflat(x, y), _eager(model, x, y))
    assert unflat.scaler is model.scaler
    again = ours.run_decompositions()    # lowering a lowered program keeps its one chain
    assert _effects(again) == _effects(ours) and again.graph_signature.input_tokens == ["token"]


def test_a_number_a_method_returned_is_checked_at_run_time(classes):
    """count() answered 1 at export (after one apply) and the program computes with 1; once the
    real object's count has moved on, the program refuses to compute with the stale constant
    (torch.export's program silently uses 1)."""
    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scaler = classes.Scaler(2.0)

        def forward(self, x):
            return self.scaler.apply(x) + self.scaler.count()

    model = Counting()
    ep = gp.export(model, (torch.randn(3),))
    assert _ops(ep)["aten._assert_scalar.default"] == 1
    for program in (ep, ep.run_decompositions()):
        fresh = Counting()
        program.constants["scaler"] = fresh.scaler if program is not ep else model.scaler
        module = program.module()
        x = torch.ones(3)
        torch.testing.assert_close(module(x), x * 2 + 1)      # a fresh object counts 1 here, as at export
        with pytest.raises(RuntimeError, match=r"count\(\) of the custom object 'scaler' returned 1 when the program "
                                               r"was exported"):
            module(x)


def test_save_refuses_with_the_object_named(classes):
    ep = gp.export(Model(classes), _inputs(2))
    with pytest.raises(gp.ArtifactError, match=r"custom object 'scaler' \(gp_custom_objects_test.Scaler\)") as err:
        gp.save(ep, io.BytesIO())
    assert "torch.export.save(graphport.interop.to_torch(ep)" in str(err.value)
    # the fix works: torch saves it (pickling the object) and loads it back
    buf = io.BytesIO()
    torch.export.save(to_torch(ep), buf)
    buf.seek(0)
    x, y = _inputs(2)
    torch.testing.assert_close(torch.export.load(buf).module()(x, y), ep.module()(x, y))


def test_a_class_without_fake_class_is_refused_with_the_fix(classes):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.obj = classes.Unfaked()

        def forward(self, x):
            return self.obj.apply(x)

    with pytest.raises(gp.UnsupportedFeatureError) as err:
        gp.export(M(), (torch.randn(2),))
    message = str(err.value)
    assert "'obj'" in message and "no fake class" in message and "test_custom_objects.py" in message
    assert f'register_fake_class("{NS}::Unfaked")' in message
    assert isinstance(err.value, RuntimeError)


def test_an_object_the_module_does_not_hold_is_refused(classes):
    class Made(torch.nn.Module):
        def forward(self, x):
            return classes.Scaler(2.0).apply(x)

    with pytest.raises(gp.UnsupportedFeatureError, match="no attribute of the exported module holds") as err:
        gp.export(Made(), (torch.randn(2),))
    assert "self.obj = torch.classes.gp_custom_objects_test.Scaler(...)" in str(err.value)


def test_a_method_missing_from_the_fake_class_is_refused(classes):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scaler = classes.Scaler(2.0)

        def forward(self, x):
            return x * self.scaler.__obj_flatten__()[0][1]

    with pytest.raises(gp.UnsupportedFeatureError, match="has no method __obj_flatten__"):
        gp.export(M(), (torch.randn(2),))


def test_an_object_inside_a_branch_is_refused_as_torch(classes, ex):
    class Branching(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scaler = classes.Scaler(2.0)

        def forward(self, x):
            return ex.cond(x.sum() > 0, lambda x: self.scaler.apply(x), lambda x: x - 1, (x,))

    with pytest.raises(RuntimeError) as err:
        ex.export(Branching(), (torch.randn(3),))
    if ex.export is gp.export:
        assert isinstance(err.value, gp.UnsupportedFeatureError) and "inside a torch.cond branch" in str(err.value)
        assert "test_custom_objects.py" in str(err.value)

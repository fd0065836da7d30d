"""Custom objects and effect tokens through graphport.interop: to_torch writes torch's
CustomObjArgument (with torch's fake object on the placeholder) and TokenArgument, from_torch
reads them, and both sides' programs run the real object (the classes: tests/torchbind_classes.py)."""
from __future__ import annotations

import torch

import graphport as gp
from graphport.interop import from_torch, to_torch
from torchbind_classes import Model, inputs as _inputs


def _signature(ep):
    return [(s.kind.name, s.arg.name, s.target, getattr(s.arg, "class_fqn", None))
            for s in ep.graph_signature.input_specs] + [(s.kind.name, s.target) for s in ep.graph_signature.output_specs]


def _effects(ep):
    return [(str(n.args[1]), n.args[3] if "call_torchbind" in str(n.args[1]) else None)
            for n in ep.graph.nodes if n.op == "call_function" and "with_effects" in str(n.target)]


def _eager(model, x, y):
    with torch.no_grad():
        return model(x, y)


def test_to_torch_and_back(torchbind_classes):
    torch.manual_seed(0)
    model = Model(torchbind_classes)
    ep = gp.export(model, _inputs(3), dynamic_shapes={"x": {0: gp.Dim("n")}, "y": {0: gp.Dim("n")}})
    tep = to_torch(ep)
    spec = next(s for s in tep.graph_signature.input_specs if s.kind.name == "CUSTOM_OBJ")
    assert isinstance(spec.arg, torch.export.graph_signature.CustomObjArgument) and spec.target == "scaler"
    assert tep.constants["scaler"] is model.scaler
    x, y = _inputs(4)
    torch.testing.assert_close(tep.module()(x, y), _eager(model, x, y))
    lowered = tep.run_decompositions()      # torch's lowering reads the fake object on the placeholder
    assert any("with_effects" in str(n.target) for n in lowered.graph.nodes)
    back = from_torch(tep)
    assert _signature(back) == _signature(ep)
    torch.testing.assert_close(back.module()(x, y), _eager(model, x, y))
    tokens = from_torch(lowered)            # torch's lowered program, effect tokens and all
    assert tokens.graph_signature.input_tokens == ["token"] and _effects(tokens) == _effects(lowered)
    torch.testing.assert_close(tokens.module()(x, y), _eager(model, x, y))
    ours = to_torch(ep.run_decompositions(), dialect="ATEN")   # graphport's lowered program, in torch's hands
    assert [s.kind.name for s in ours.graph_signature.input_specs][0] == "TOKEN"
    torch.testing.assert_close(ours.module()(x, y), _eager(model, x, y))
    theirs = from_torch(torch.export.export(model, _inputs(3)))     # torch's own program of it
    assert _signature(theirs) == _signature(gp.export(model, _inputs(3)))
    x, y = _inputs(3)
    torch.testing.assert_close(theirs.module()(x, y), _eager(model, x, y))

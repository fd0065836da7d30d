"""Effect tokens: lowering chains effectful calls (here `aten._print`, which torch registers
as ordered) with `with_effects` on a TOKEN input and output, as torch.export's
run_decompositions() does; the program runs, saves, loads and converts with them."""
from __future__ import annotations

import collections
import io

import pytest
import torch

import graphport as gp
from graphport.interop import from_torch, to_torch


class Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        torch.ops.aten._print("first")
        y = self.lin(x).relu()
        torch.ops.aten._print("second")
        return y * 2


def _signature(ep):
    return ([(s.kind.name, s.arg.name, s.target) for s in ep.graph_signature.input_specs],
            [(s.kind.name, s.target) for s in ep.graph_signature.output_specs])


def _ops(ep):
    return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def _printed(ep):
    return [n.args[2] for n in ep.graph.nodes if n.op == "call_function" and "with_effects" in str(n.target)]


def test_lowering_threads_tokens_as_torch(ex):
    torch.manual_seed(0)
    model = Printing()
    shapes = {"x": {0: ex.Dim("n")}}
    lowered = ex.export(model, (torch.randn(4, 3),), dynamic_shapes=shapes).run_decompositions()
    inputs, outputs = _signature(lowered)
    assert inputs[0] == ("TOKEN", "token", None) and outputs[0][0] == "TOKEN"
    assert _printed(lowered) == ["first", "second"]          # in program order, on one chain
    assert _ops(lowered)["with_effects"] == 2
    for n in (0, 1, 5):
        x = torch.randn(n, 3)
        torch.testing.assert_close(lowered.module()(x), model(x))


def test_lowered_signature_and_operators_equal_torch():
    torch.manual_seed(0)
    model = Printing()
    ours = gp.export(model, (torch.randn(4, 3),), dynamic_shapes={"x": {0: gp.Dim("n")}}).run_decompositions()
    theirs = torch.export.export(model, (torch.randn(4, 3),),
                                 dynamic_shapes={"x": {0: torch.export.Dim("n")}}).run_decompositions()
    assert [k for k, *_ in _signature(ours)[0]] == [k for k, *_ in _signature(theirs)[0]]
    assert [k for k, _ in _signature(ours)[1]] == [k for k, _ in _signature(theirs)[1]]
    assert _ops(ours) == _ops(theirs)


def test_exported_programs_have_no_tokens_as_torch():
    ep = gp.export(Printing(), (torch.randn(2, 3),))
    assert not ep.graph_signature.input_tokens and _ops(ep)["aten._print.default"] == 2


def test_saves_loads_and_converts_with_tokens():
    torch.manual_seed(0)
    model = Printing()
    lowered = gp.export(model, (torch.randn(2, 3),)).run_decompositions()
    buf = io.BytesIO()
    gp.save(lowered, buf)
    loaded = gp.load(io.BytesIO(buf.getvalue()))
    assert _signature(loaded) == _signature(lowered) and _printed(loaded) == ["first", "second"]
    loaded.validate()
    x = torch.randn(2, 3)
    torch.testing.assert_close(loaded.module()(x), model(x))
    again = io.BytesIO()
    gp.save(loaded, again)
    assert again.getvalue() == buf.getvalue()
    tep = to_torch(lowered, dialect="ATEN")
    assert [s.kind.name for s in tep.graph_signature.input_specs][0] == "TOKEN"
    torch.testing.assert_close(tep.module()(x), model(x))
    back = from_torch(tep)
    assert _signature(back) == _signature(lowered)
    torch.testing.assert_close(back.module()(x), model(x))
    theirs = from_torch(torch.export.export(model, (x,)).run_decompositions())   # torch's own lowered program
    torch.testing.assert_close(theirs.module()(x), model(x))


def test_unflatten_removes_the_tokens_as_torch(ex):
    torch.manual_seed(0)
    model = Printing()
    lowered = ex.export(model, (torch.randn(2, 3),)).run_decompositions()
    unflat = ex.unflatten(lowered)
    x = torch.randn(2, 3)
    torch.testing.assert_close(unflat(x), model(x))
    assert [n.target for n in unflat.graph.nodes if n.op == "call_function"].count(torch.ops.aten._print.default) == 2


def test_the_viewer_shows_the_token():
    from graphport.viewer.data import program_data
    nodes = program_data(gp.export(Printing(), (torch.randn(2, 3),)).run_decompositions())["graphs"]["main"]
    token = next(n for n in nodes if n["n"] == "token")
    assert token["o"] == "effect token" and token["t"] == "token"


def test_the_verifier_refuses_a_broken_token_chain():
    lowered = gp.export(Printing(), (torch.randn(2, 3),)).run_decompositions()
    second = [n for n in lowered.graph.nodes if "with_effects" in str(n.target)][1]
    second.args = (next(n for n in lowered.graph.nodes if n.op == "placeholder"), *second.args[1:])  # reuse the input token
    with pytest.raises(gp.InternalError, match="effect token"):
        lowered.validate()

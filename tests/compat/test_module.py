"""Calling `ep.module()` as torch.export users do: keyword arguments in any order, a
torch.fx.GraphModule with the program's parameters and signature, gradients as in eager,
placeholder names as torch's. Each behaviour runs the same user code against both
exporters (torch.export only as the oracle)."""
from __future__ import annotations

import copy
import inspect

import pytest
import torch
import torch.export
import torch.fx as fx

import graphport as gp

from .exporters import EXPORTERS


class Keywords(torch.nn.Module):
    def forward(self, input, *, y, z):
        return input * y - z


class Nested(torch.nn.Module):
    def forward(self, d):
        return d["a"] * 2 - d["b"], d["c"][0] + d["c"][1]


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Linear(4, 5)

    def forward(self, input, scale):
        h = torch.relu(self.bn(self.conv(input)))
        return self.head(h.mean((2, 3))) * scale


def small_transformer() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True),
        torch.nn.LayerNorm(16))


def test_keyword_arguments_in_any_order(ex):
    x, y, z = torch.randn(3), torch.randn(3), torch.randn(3)
    m = ex.export(Keywords(), (x,), {"y": y, "z": z}).module()
    torch.testing.assert_close(m(x, z=z, y=y), x * y - z)
    torch.testing.assert_close(m(x, y=y, z=z), x * y - z)


def test_dict_inputs_in_another_key_order_are_refused():
    """A program may iterate over a dict input, so its key order is part of the input: a
    call with the keys in another order is refused, never answered in the export's order
    (torch.export 2.13's module accepts it and returns the export-order concatenation)."""
    class Concat(torch.nn.Module):
        def forward(self, d):
            return torch.cat(list(d.values()))
    a, b = torch.ones(1), torch.zeros(1)
    m = gp.export(Concat(), ({"a": a, "b": b},)).module()
    torch.testing.assert_close(m({"a": a, "b": b}), Concat()({"a": a, "b": b}))
    with pytest.raises(gp.InputStructureError):
        m({"b": b, "a": a})


def test_keywords_gathered_by_var_keyword_keep_their_order():
    """`**kwargs` is a dict the program can iterate: its order is part of the input too."""
    def gather(x, **extra):
        return torch.cat([x, *extra.values()])
    x, y, z = torch.ones(1), torch.zeros(1), torch.full((1,), 2.0)
    m = gp.export(gather, (x,), {"y": y, "z": z}).module()
    torch.testing.assert_close(m(x, y=y, z=z), gather(x, y=y, z=z))
    with pytest.raises(gp.InputStructureError):
        m(x, z=z, y=y)


def test_dict_with_other_keys_still_refused(ex):
    d = {"a": torch.randn(2), "b": torch.randn(2), "c": [torch.randn(2), torch.randn(2)]}
    m = ex.export(Nested(), (d,)).module()
    with pytest.raises(ValueError):
        m({"a": d["a"], "x": d["b"], "c": d["c"]})
    with pytest.raises(ValueError):
        m({"a": d["a"], "b": d["b"], "c": tuple(d["c"])})


def test_graphport_names_the_missing_keyword():
    x = torch.randn(3)
    m = gp.export(Keywords(), (x,), {"y": x, "z": x}).module()
    with pytest.raises(gp.InputStructureError) as info:
        m(x, y=x)
    assert info.value.what == "the call lacks the keyword argument z; the program is called as (input, *, y, z)"
    assert info.value.fix == "pass z=... as at export" and "TreeSpec" not in info.value.msg


def test_module_is_a_graph_module_with_the_program_signature(ex):
    model = Cnn()
    ep = ex.export(model, (torch.randn(2, 3, 8, 8), 2.0))
    m = ep.module()
    assert isinstance(m, fx.GraphModule)
    assert list(inspect.signature(m.forward).parameters) == ["input", "scale"]
    assert "def forward(self, input, scale)" in m.code
    assert "conv2d" in m.print_readable(print_output=False)
    assert any(n.op == "get_attr" and n.target == "conv.weight" for n in m.graph.nodes)
    assert [k for k, _ in m.named_parameters()] == [k for k, _ in model.named_parameters()]
    assert [k for k, _ in m.named_buffers()] == [k for k, _ in model.named_buffers()]


def test_placeholder_names_follow_torch():
    args = (torch.randn(2, 3, 8, 8), 2.0)
    names = {}
    for name, exporter in EXPORTERS.items():
        ep = exporter.export(Cnn(), args)
        names[name] = [n.name for n in ep.graph.nodes if n.op == "placeholder"]
    assert "input" in names["graphport"]
    assert names["graphport"] == names["torch"]


def test_reexport_of_the_module_round_trips(ex):
    """export -> module -> export, the spec keyed by the original argument names."""
    model = Cnn().eval()
    ep = gp.export(model, (torch.randn(4, 3, 8, 8), 2.0),
                   dynamic_shapes={"input": {0: gp.Dim("batch", min=2, max=16)}, "scale": None})
    spec = {"input": {0: ex.Dim("batch", min=2, max=16)}, "scale": None}
    ep2 = ex.export(ep.module(), (torch.randn(4, 3, 8, 8), 2.0), dynamic_shapes=spec)
    if ex is EXPORTERS["graphport"]:
        ops = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
        assert [str(n.target) for n in ep2.graph.nodes if n.op == "call_function"] == ops
    assert [(s.kind.name, s.target) for s in ep2.graph_signature.input_specs] == \
        [(s.kind.name, s.target) for s in ep.graph_signature.input_specs]
    fresh = torch.randn(7, 3, 8, 8)
    torch.testing.assert_close(ep2.module()(fresh, 2.0), model(fresh, 2.0))


def test_graphport_reexport_gives_the_same_program():
    model = Cnn().eval()
    args = (torch.randn(4, 3, 8, 8), 2.0)
    ep = gp.export(model, args)
    ep2 = gp.export(ep.module(), args)
    assert ep2.graph_module.code == ep.graph_module.code
    assert str(ep2.graph_signature) == str(ep.graph_signature)


def _gradients(model: torch.nn.Module, inputs: tuple) -> dict[str, torch.Tensor]:
    model.zero_grad()
    out = model(*inputs)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("make, inputs", [
    (Cnn, lambda: (torch.randn(4, 3, 8, 8), 2.0)),
    (small_transformer, lambda: (torch.randn(2, 5, 16),)),
], ids=["cnn", "transformer"])
def test_gradients_in_training_mode_match_eager(ex, make, inputs):
    torch.manual_seed(0)
    model = make().train()
    args = inputs()
    eager = copy.deepcopy(model)
    m = ex.export(copy.deepcopy(model), args).module()
    want = _gradients(eager, args)
    got = _gradients(m, args)
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], msg=name)
    for (name, b), (_, b_eager) in zip(m.named_buffers(), eager.named_buffers()):
        torch.testing.assert_close(b, b_eager, msg=name)


def test_a_deep_copy_keeps_the_checks_and_the_state():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    model.register_buffer("scratch", torch.zeros(4), persistent=False)
    x = torch.randn(5, 3)
    m = gp.export(model, (x,)).module()
    c = copy.deepcopy(m)
    assert set(c.state_dict()) == set(m.state_dict()) == set(model.state_dict())
    torch.testing.assert_close(c(x), m(x))
    assert c.get_buffer("1.running_mean") is not m.get_buffer("1.running_mean")
    with pytest.raises(gp.InputGuardError):
        c(x.double())


class Mixed(torch.nn.Module):
    def forward(self, d, input, *rest, scale=None):
        return d["a"] * 2 - d["b"], d["c"][0] + input, rest[0] * scale


def test_names_and_signature_of_nested_varargs_and_keyword_inputs_follow_torch():
    d = {"a": torch.randn(2), "b": torch.randn(2), "c": [torch.randn(2), torch.randn(2)]}
    args, kwargs = (d, torch.randn(2), torch.randn(2)), {"scale": torch.randn(2)}
    seen = {}
    for name, exporter in EXPORTERS.items():
        ep = exporter.export(Mixed(), args, kwargs)
        m = ep.module()
        seen[name] = ([n.name for n in ep.graph.nodes if n.op == "placeholder"],
                      list(inspect.signature(m.forward).parameters))
        for got, want in zip(m(*args, **kwargs), Mixed()(*args, **kwargs)):
            torch.testing.assert_close(got, want)
    assert seen["graphport"] == seen["torch"]

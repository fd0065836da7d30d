"""The ExportedProgram's data as torch.export users read it: state_dict names, node
metadata (val on the run-time device, tensor_meta, stack_trace, nn_module_stack, torch_fn,
source_fn_stack), and ranges of sizes. Same user code against both exporters."""
from __future__ import annotations


import pytest
import torch
import torch.export

import graphport as gp

from .exporters import EXPORTERS


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.out = torch.nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight
        self.register_buffer("scale", torch.tensor(2.0))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)

    def forward(self, ids):
        return self.out(self.emb(ids)) * self.scale + self.scratch


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).flatten(1).sum(1)


class Shifted(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] + y[:-1] * 2


class Offset(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] + y


def ids():
    return torch.randint(0, 10, (2, 5))


def test_state_dict_has_every_name_of_the_model(ex):
    model = Tied()
    ep = ex.export(model, (ids(),))
    assert set(ep.state_dict) == set(model.state_dict())
    assert ep.state_dict["out.weight"] is ep.state_dict["emb.weight"]


def test_module_of_a_tied_model_keeps_both_names():
    model = Tied()
    m = gp.export(model, (ids(),)).module()
    assert set(m.state_dict()) == set(model.state_dict())
    assert m.out.weight is m.emb.weight
    x = ids()
    torch.testing.assert_close(m(x), model(x))


@pytest.mark.parametrize("make, args", [(Cnn, lambda: (torch.randn(2, 3, 6, 6),)), (Tied, lambda: (ids(),))],
                         ids=["cnn", "tied"])
def test_node_metadata_keys_match_torch(make, args):
    model, inputs = make().eval(), args()
    keys = {}
    for name, exporter in EXPORTERS.items():
        ep = exporter.export(model, inputs)
        keys[name] = {n.name: set(n.meta) for n in ep.graph.nodes if n.op == "call_function"}
    common = set(keys["graphport"]) & set(keys["torch"])
    assert common
    for node in common:
        wanted = keys["torch"][node] & {"val", "tensor_meta", "stack_trace", "nn_module_stack", "torch_fn",
                                        "source_fn_stack"}
        assert wanted <= keys["graphport"][node], node


def test_torch_fn_names_the_torch_function_like_torch():
    model, inputs = Tied().eval(), (ids(),)
    fns = {}
    for name, exporter in EXPORTERS.items():
        ep = exporter.export(model, inputs)
        fns[name] = {n.name: n.meta.get("torch_fn") for n in ep.graph.nodes if n.op == "call_function"}
    for node, fn in fns["torch"].items():
        if node in fns["graphport"] and fn is not None:
            assert fns["graphport"][node] == fn, node


def test_val_reports_the_run_time_device_and_dtype(ex):
    ep = ex.export(Cnn().eval(), (torch.randn(2, 3, 6, 6),), dynamic_shapes=({0: ex.Dim("batch")},))
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            assert val.device == torch.device("cpu"), node.name
            assert node.meta["tensor_meta"].dtype == val.dtype
            assert tuple(node.meta["tensor_meta"].shape) == tuple(val.shape)
    x = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert str(x.meta["val"].shape[0]) == "s0" or not isinstance(x.meta["val"].shape[0], int)
    assert x.meta["val"].dtype == torch.float32


def test_values_compute_like_fake_tensors():
    """A pass that applies an operator to a node's val gets a value on the same device."""
    ep = gp.export(Cnn().eval(), (torch.randn(2, 3, 6, 6),), dynamic_shapes=({0: gp.Dim("batch")},))
    x = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x").meta["val"]
    y = torch.ops.aten.add.Tensor(x, 1)
    assert y.device == torch.device("cpu") and y.shape == x.shape and y.dtype == x.dtype


def test_printing_shows_plain_annotations():
    text = str(gp.export(Cnn().eval(), (torch.randn(2, 3, 6, 6),)))
    assert 'x: "f32[2, 3, 6, 6]"' in text and "RuntimeValue" not in text


def test_ranges_of_sizes_are_never_negative(ex):
    d = ex.Dim("d", min=3, max=20)
    ep = ex.export(Shifted(), (torch.randn(5, 3), torch.randn(5, 3)), dynamic_shapes={"x": {0: d}, "y": {0: d}})
    assert ep.range_constraints
    for rng in ep.range_constraints.values():
        assert rng.lower >= 0


def test_derived_dim_ranges_are_never_negative():
    d = gp.Dim("d", max=20)
    ep = gp.export(Offset(), (torch.randn(5, 3), torch.randn(4, 3)), dynamic_shapes={"x": {0: d}, "y": {0: d - 1}})
    assert ep.range_constraints
    for rng in ep.range_constraints.values():
        assert rng.lower >= 0

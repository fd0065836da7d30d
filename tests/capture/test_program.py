"""The ExportedProgram surface for static-shape captures: printing, placeholder names,
node metadata, state accessors, module() semantics, and zero-copy weights."""
from __future__ import annotations

import inspect
import os

import pytest
import torch
import torch.nn as nn

import graphport as gp

from .helpers import torch_export


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def line_of(fn, code: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if code in text)


class Net(nn.Module):
    """One of each kind of state: parameters, buffers, a tensor attribute, a lifted tensor."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.scale = torch.tensor(2.0)

    def forward(self, x):
        y = self.bn(self.conv(x))
        return y * self.scale + torch.tensor(1.0)


def export_net(train=False):
    model = Net().train(train)
    return model, gp.export(model, (torch.randn(2, 3, 5, 5),))


def test_str_has_torch_export_layout():
    _, ep = export_net()
    text = str(ep)
    for piece in ("ExportedProgram:", "class GraphModule(torch.nn.Module):", "def forward(self",
                  'x: "f32[2, 3, 5, 5]"', 'p_conv_weight: "f32[4, 3, 3, 3]"', "Graph signature:",
                  "# inputs", "# outputs", "USER_OUTPUT", "Range constraints: {}"):
        assert piece in text, f"{piece!r} missing from str(ep):\n{text}"
    assert f"# File: {__file__}:{line_of(Net.forward, 'y * self.scale')} in forward" in text, text
    assert "PARAMETER target='conv.weight'" in text and "BUFFER target='bn.running_mean' persistent=True" in text


def test_placeholder_names_follow_torch_export():
    model, ep = export_net()
    names = [n.name for n in ep.graph.nodes if n.op == "placeholder"]
    assert names == ["p_conv_weight", "p_conv_bias", "p_bn_weight", "p_bn_bias", "b_bn_running_mean",
                     "b_bn_running_var", "b_bn_num_batches_tracked", "c_scale", "c_lifted_tensor_0", "x"]
    ref = torch_export(model, (torch.randn(2, 3, 5, 5),))
    assert sorted(names) == sorted(n.name for n in ref.graph.nodes if n.op == "placeholder")
    assert [s.arg.name for s in ep.graph_signature.input_specs] == names


def test_signature_specs():
    _, ep = export_net()
    specs = ep.graph_signature.input_specs
    assert [(s.kind, s.target) for s in specs] == [
        (gp.InputKind.PARAMETER, "conv.weight"), (gp.InputKind.PARAMETER, "conv.bias"),
        (gp.InputKind.PARAMETER, "bn.weight"), (gp.InputKind.PARAMETER, "bn.bias"),
        (gp.InputKind.BUFFER, "bn.running_mean"), (gp.InputKind.BUFFER, "bn.running_var"),
        (gp.InputKind.BUFFER, "bn.num_batches_tracked"),
        (gp.InputKind.CONSTANT_TENSOR, "scale"), (gp.InputKind.CONSTANT_TENSOR, "lifted_tensor_0"),
        (gp.InputKind.USER_INPUT, None)]
    assert all(s.persistent for s in specs if s.kind == gp.InputKind.BUFFER)
    assert [s.kind for s in ep.graph_signature.output_specs] == [gp.OutputKind.USER_OUTPUT]
    assert set(ep.constants) == {"scale", "lifted_tensor_0"}
    assert ep.range_constraints == {}


def test_every_node_has_metadata():
    """val everywhere but the output; stack_trace and nn_module_stack on every op node."""
    _, ep = export_net()
    for node in ep.graph.nodes:
        if node.op == "output":
            continue
        assert "val" in node.meta, node
        if node.op == "placeholder":
            assert isinstance(node.meta["val"], torch.Tensor)
            continue
        assert node.meta.get("stack_trace"), node
        assert node.meta.get("nn_module_stack"), node
    conv = next(n for n in ep.graph.nodes if str(n.target) == "aten.conv2d.default")
    assert list(conv.meta["nn_module_stack"].values()) == [
        ("", f"{Net.__module__}.{Net.__qualname__}"), ("conv", "torch.nn.modules.conv.Conv2d")]
    assert conv.meta["val"].shape == (2, 4, 3, 3) and conv.meta["val"].dtype == torch.float32
    assert f'File "{__file__}", line {line_of(Net.forward, "self.bn(self.conv(x))")}, in forward' \
        in conv.meta["stack_trace"]


def test_parameter_and_buffer_accessors():
    model, ep = export_net()
    assert [n for n, _ in ep.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert [n for n, _ in ep.named_buffers()] == [n for n, _ in model.named_buffers()]
    assert all(a is b for a, b in zip(ep.parameters(), model.parameters()))
    assert all(a is b for a, b in zip(ep.buffers(), model.buffers()))
    assert set(ep.state_dict) == set(model.state_dict())


def test_example_inputs_and_module_call_graph():
    x = torch.randn(2, 3, 5, 5)
    ep = gp.export(Net().eval(), (x,))
    (args, kwargs) = ep.example_inputs
    assert kwargs == {} and len(args) == 1 and torch.equal(args[0], x)
    assert ep.module_call_graph[0].fqn == ""
    assert [e.fqn for e in ep.module_call_graph[1:]] == ["conv", "bn"]


def test_module_updates_buffers_like_eager_across_calls():
    model, ep = export_net(train=True)
    eager = Net().train()
    eager.load_state_dict(model.state_dict())
    mod = ep.module()
    for step in range(2):
        x = torch.randn(2, 3, 5, 5)
        torch.testing.assert_close(mod(x), eager(x))
        for name, buf in eager.named_buffers():
            torch.testing.assert_close(dict(mod.named_buffers())[name], buf, msg=f"{name} after call {step}")
    assert int(dict(mod.named_buffers())["bn.num_batches_tracked"]) == 2


def test_weights_are_not_copied():
    model, ep = export_net()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        assert ep.state_dict[name] is tensor, name
        assert ep.state_dict[name].data_ptr() == tensor.data_ptr(), name
    assert ep.constants["scale"].data_ptr() == model.scale.data_ptr()


def test_meta_device_model_exports_without_materializing():
    """Weights on `meta` are never allocated: capture needs only shapes and dtypes."""
    with torch.device("meta"):
        model = Net().eval()
    ep = gp.export(model, (torch.randn(2, 3, 5, 5, device="meta"),))
    assert all(t.device.type == "meta" for t in ep.state_dict.values())
    assert ep.state_dict["conv.weight"] is model.conv.weight
    assert "aten.conv2d.default" in {str(n.target) for n in ep.graph.nodes}
    out = next(n for n in ep.graph.nodes if n.op == "output").args[0][0]
    assert tuple(out.meta["val"].shape) == (2, 4, 3, 3)


def test_graph_module_runs_the_flat_graph():
    """graph_module takes lifted state then user inputs, and returns the flat outputs."""
    model, ep = export_net()
    x = torch.randn(2, 3, 5, 5)
    lifted = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == gp.InputKind.USER_INPUT:
            lifted.append(x)
        elif spec.kind == gp.InputKind.CONSTANT_TENSOR or spec.persistent is False:
            lifted.append(ep.constants[spec.target])
        else:
            lifted.append(ep.state_dict[spec.target])
    (out,) = ep.graph_module(*lifted)
    torch.testing.assert_close(out, model(x))

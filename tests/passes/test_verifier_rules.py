"""The verifier catches each way a program can break the IR contract (one break per test),
the signature names mutated state, and two soundness rules that wrong view/stride
bookkeeping would break: permute inverses and per-tensor strides."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

import graphport as gp


class Model(nn.Module):
    """A parameter, a buffer it mutates, and a user input."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.register_buffer("steps", torch.zeros(3))

    def forward(self, x):
        self.steps.add_(1)
        return x * self.w + self.steps


def _ep():
    ep = gp.export(Model(), (torch.randn(2, 3),))
    gp.verify(ep)          # the unbroken program passes
    return ep


def _calls(ep):
    return [n for n in ep.graph.nodes if n.op == "call_function"]


def _output(ep):
    return next(n for n in ep.graph.nodes if n.op == "output")


def _copy_meta(dst, src):
    dst.meta.update(copy.copy(src.meta))


def test_good_program_passes():
    gp.verify(_ep())


def test_outputs_in_wrong_order_graph_and_specs():
    # user output placed before the buffer mutation, in the graph and the signature alike:
    # mutations must come first
    ep = _ep()
    out = _output(ep)
    out.args = (tuple(reversed(out.args[0])),)
    ep.graph_signature.output_specs.reverse()
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_outputs_in_wrong_order_graph_only():
    ep = _ep()
    out = _output(ep)
    out.args = (tuple(reversed(out.args[0])),)
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_get_attr_node_rejected():
    ep = _ep()
    mul = next(n for n in _calls(ep) if n.target == torch.ops.aten.mul.Tensor)
    with ep.graph.inserting_before(mul):
        attr = ep.graph.get_attr("w")
    _copy_meta(attr, mul.args[1])
    mul.replace_input_with(mul.args[1], attr)
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_unused_get_attr_node_rejected():
    ep = _ep()
    first = _calls(ep)[0]
    with ep.graph.inserting_before(first):
        attr = ep.graph.get_attr("steps")
    attr.meta["val"] = first.meta["val"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_output_value_removed():
    ep = _ep()
    out = _output(ep)
    out.args = (tuple(out.args[0][:-1]),)
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_output_spec_removed():
    ep = _ep()
    ep.graph_signature.output_specs.pop()
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_parameter_state_dict_entry_deleted():
    ep = _ep()
    del ep.state_dict["w"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_buffer_state_dict_entry_deleted():
    ep = _ep()
    del ep.state_dict["steps"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_call_node_meta_val_removed():
    ep = _ep()
    del _calls(ep)[-1].meta["val"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_placeholder_meta_val_removed():
    ep = _ep()
    ph = [n for n in ep.graph.nodes if n.op == "placeholder"][-1]
    del ph.meta["val"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_user_outside_the_graph():
    ep = _ep()
    node = _calls(ep)[0]
    other = fx.Graph()
    stray = other.create_node("call_function", torch.ops.aten.neg.default, (node,))
    assert stray in node.users and stray.graph is not ep.graph
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_in_place_op_inserted():
    ep = _ep()
    x = [n for n in ep.graph.nodes if n.op == "placeholder"][-1]
    last = _calls(ep)[-1]
    with ep.graph.inserting_after(last):
        bad = ep.graph.call_function(torch.ops.aten.add_.Tensor, (x, x))
    _copy_meta(bad, last)
    bad.meta["val"] = x.meta["val"]
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


def test_in_place_op_inserted_and_used():
    ep = _ep()
    x = [n for n in ep.graph.nodes if n.op == "placeholder"][-1]
    mul = next(n for n in _calls(ep) if n.target == torch.ops.aten.mul.Tensor)
    with ep.graph.inserting_before(mul):
        bad = ep.graph.call_function(torch.ops.aten.add_.Tensor, (x, x))
    _copy_meta(bad, mul)
    bad.meta["val"] = x.meta["val"]
    mul.replace_input_with(x, bad)
    with pytest.raises(gp.InternalError):
        gp.verify(ep)


# ------------------------------------------------------------------ signature

def test_buffers_to_mutate_names_the_buffer():
    ep = _ep()
    sig = ep.graph_signature
    assert list(sig.buffers_to_mutate.values()) == ["steps"], sig.buffers_to_mutate
    kinds = [(s.kind, s.target) for s in sig.input_specs]
    assert kinds == [(gp.InputKind.PARAMETER, "w"), (gp.InputKind.BUFFER, "steps"),
                     (gp.InputKind.USER_INPUT, None)], kinds
    out_kinds = [s.kind for s in sig.output_specs]
    assert out_kinds == [gp.OutputKind.BUFFER_MUTATION, gp.OutputKind.USER_OUTPUT], out_kinds
    assert sig.parameters_to_mutate == {} if hasattr(sig, "parameters_to_mutate") else True
    # and the program applies the mutation
    m = Model()
    m.load_state_dict(ep.state_dict)
    x = torch.randn(2, 3)
    mod = ep.module()
    torch.testing.assert_close(mod(x), m(x))
    torch.testing.assert_close(mod(x), m(x))
    torch.testing.assert_close(dict(mod.named_buffers())["steps"], m.steps)


def test_nested_buffer_mutation_is_named_by_its_path():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Model()
            self.register_buffer("untouched", torch.ones(3))

        def forward(self, x):
            return self.inner(x) + self.untouched

    ep = gp.export(Outer(), (torch.randn(2, 3),))
    assert list(ep.graph_signature.buffers_to_mutate.values()) == ["inner.steps"]


def test_user_input_mutation_is_named():
    def f(x, y):
        y.mul_(2)
        return x + y
    ep = gp.export(f, (torch.randn(3), torch.randn(3)))
    sig = ep.graph_signature
    assert list(sig.user_inputs_to_mutate.values()) == ["y"], sig.user_inputs_to_mutate
    assert sig.buffers_to_mutate == {}


# ------------------------------------------------------------------ permute inverses

@pytest.mark.parametrize(
    "shape,perm",
    [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (1, 2, 0)), ((2, 3, 4, 5), (1, 3, 0, 2)),
     ((2, 3, 4, 5), (2, 0, 3, 1)), ((2, 3, 4, 5), (3, 2, 1, 0))],
    ids=str,
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_write_through_permute_uses_the_inverse(shape, perm, dynamic):
    def f(x):
        y = x.clone()
        v = y.permute(*perm)
        v.mul_(torch.ones_like(v).cumsum(-1)).add_(torch.ones_like(v).cumsum(0))   # position-dependent
        return y, v.contiguous()

    x = torch.randn(*shape)
    ds = {"x": {0: gp.Dim("n", min=2, max=16)}} if dynamic else None
    ep = gp.export(f, (x,), dynamic_shapes=ds)
    sizes = [shape[0]] + ([3, 5] if dynamic else [])
    for n in sizes:
        x = torch.randn(n, *shape[1:])
        for got, want in zip(ep.module()(x.clone()), f(x.clone())):
            assert torch.equal(got, want), f"n={n}: permute{perm} write differs from eager"


# ------------------------------------------------------------------ strides per tensor

def test_same_op_same_shape_different_strides_view_refused_like_eager():
    # relu of a contiguous tensor and of a transposed view: same op, same shape and dtype,
    # different output strides. eager refuses .view(-1) on the transposed one.
    def f(x):
        ra = x.t().contiguous().relu()
        rb = x.t().relu()
        return ra.view(-1), rb.view(-1)

    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(torch.randn(4, 4))
    with pytest.raises(gp.GraphportError):
        gp.export(f, (torch.randn(4, 4),))


def test_same_op_same_shape_other_order_view_refused_like_eager():
    def f(x):
        rb = x.t().relu()
        ra = x.t().contiguous().relu()
        return ra.view(-1), rb.view(-1)

    with pytest.raises(RuntimeError):
        f(torch.randn(4, 4))
    with pytest.raises(gp.GraphportError):
        gp.export(f, (torch.randn(4, 4),))


@pytest.mark.parametrize("order", ["contiguous_first", "transposed_first"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_output_strides_decide_reshape_view_or_copy(order, dynamic):
    # reshape of a contiguous result is a view (the write reaches it); of a transposed
    # result it is a copy (the write must not reach it). Wrong strides flip that.
    def f(x):
        y = x.clone()
        if order == "contiguous_first":
            a = y.t().contiguous().mul(2)
            b = y.t().mul(2)
        else:
            b = y.t().mul(2)
            a = y.t().contiguous().mul(2)
        ra = a.reshape(-1)
        rb = b.reshape(-1)
        ra.add_(100)
        rb.add_(100)
        return a, b, ra, rb

    x = torch.randn(4, 4)
    want = f(x.clone())
    assert want[1].stride() == (1, 4)
    assert torch.equal(want[0], want[2].view(4, 4)) and not torch.equal(want[1], want[3].view(4, 4))
    d = gp.Dim("n", min=2, max=16)
    ds = {"x": {0: d, 1: d}} if dynamic else None
    ep = gp.export(f, (x.clone(),), dynamic_shapes=ds)
    mul_strides = sorted(tuple(int(s) for s in n.meta["val"].stride())
                         for n in ep.graph.nodes
                         if n.op == "call_function" and n.target == torch.ops.aten.mul.Tensor
                         and not dynamic)
    if not dynamic:
        assert mul_strides == [(1, 4), (4, 1)], mul_strides
    for n in ([4] + ([2, 5] if dynamic else [])):
        x = torch.randn(n, n)
        for i, (got, w) in enumerate(zip(ep.module()(x.clone()), f(x.clone()))):
            assert torch.equal(got, w), f"n={n} output {i} differs from eager"

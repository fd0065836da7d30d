"""A Python branch on an undecided size predicate whose two sides compute the same values
(diffusers' upsampler: `if hidden_states.shape[0] >= 64: hidden_states = hidden_states.contiguous()`)
is exported as one graph, with no cond and no guard: both sides are captured, found to be the
same computation (copies read as their operand, nothing reading a layout, outputs of the
same sizes and strides), and the program is captured once more on the example's side.
Sides that differ in values or in an output's strides keep their cond. Every size of the
range answers like eager, values and output strides, on both sides of the predicate."""
from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphport as gp
from graphport.errors import ConstraintViolationError
from graphport.split_export import same_computation


class Upsampler(nn.Module):
    """diffusers' Upsample2D: a copy for large batches only (a kernel limit in eager)."""

    def __init__(self, transposed: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.transposed = transposed

    def forward(self, x):
        if self.transposed:
            x = x.transpose(2, 3)
        if x.shape[0] >= 64:
            x = x.contiguous()
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class CopyReturned(nn.Module):
    """The copy is the output: its strides differ from the transposed view's, so the sides differ."""

    def forward(self, x):
        x = x.transpose(1, 2)
        if x.shape[0] >= 4:
            x = x.contiguous()
        return x * 1


class CopyThenDifferent(nn.Module):
    """One side copies and also scales: different values."""

    def forward(self, x):
        if x.shape[0] >= 4:
            x = x.contiguous() * 2
        return x + 1


def _conds(ep) -> int:
    return sum(1 for n in ep.graph.nodes if n.op == "call_function" and "cond" in str(n.target))


def _answers_like_eager(ep, model, shapes):
    module = ep.module()
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            want, got = model(x), module(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        if want.numel() > 1:
            assert [s for s, n in zip(got.stride(), got.shape) if n != 1] == \
                [s for s, n in zip(want.stride(), want.shape) if n != 1], shape


def _batch_spec(low=1, high=80):
    return {"x": {0: gp.Dim("b", min=low, max=high)}}


@pytest.mark.parametrize("transposed, example", [(False, 2), (True, 70)], ids=["small-example", "large-example"])
def test_upsampler_copy_for_large_batches_needs_no_cond(transposed, example):
    """The example on either side of the predicate; the operand contiguous or transposed."""
    torch.manual_seed(0)
    model = Upsampler(transposed).eval()
    ep = gp.export(model, (torch.randn(example, 4, 6, 6),), dynamic_shapes=_batch_spec())
    assert _conds(ep) == 0
    assert not any(n.target in (operator.ge, operator.lt) for n in ep.graph.nodes)   # no predicate left
    assert {int(r.lower): int(r.upper) for r in ep.range_constraints.values()} == {1: 80}
    _answers_like_eager(ep, model, [(1, 4, 6, 6), (63, 4, 6, 6), (64, 4, 6, 6), (80, 4, 6, 6), (example, 4, 6, 6)])


def test_sides_with_different_output_strides_are_not_joined():
    """No cond joins outputs of different strides, and the copy must not be dropped either:
    the export is refused as before, with the guard's error."""
    with pytest.raises(ConstraintViolationError, match="b < 4"):
        gp.export(CopyReturned(), (torch.randn(2, 3, 5),), dynamic_shapes=_batch_spec(1, 8))


def test_sides_with_different_values_keep_the_cond():
    ep = gp.export(CopyThenDifferent(), (torch.randn(2, 3),), dynamic_shapes=_batch_spec(1, 8))
    assert _conds(ep) == 1
    _answers_like_eager(ep, CopyThenDifferent(), [(1, 3), (3, 3), (4, 3), (8, 3)])


def test_same_computation_refuses_graphs_that_read_a_layout():
    def side(copy: bool):
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        y = graph.call_function(torch.ops.aten.clone.default, (x,)) if copy else x
        graph.output((graph.call_function(torch.ops.aten.as_strided.default, (y, [2], [1])),))
        return torch.fx.GraphModule(torch.nn.Module(), graph)
    assert not same_computation(side(True), side(False))   # as_strided reads the copy's layout

    def plain(copy: bool):
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        y = graph.call_function(torch.ops.aten.clone.default, (x,)) if copy else x
        graph.output((graph.call_function(torch.ops.aten.neg.default, (y,)),))
        return torch.fx.GraphModule(torch.nn.Module(), graph)
    assert same_computation(plain(True), plain(False))


def test_same_computation_compares_output_strides():
    """The same operators, but one side returns the copy (row-major) and the other the
    transposed operand: an output's strides are observable, so they are not the same."""
    def side(copy: bool):
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        x.meta["val"] = torch.empty(3, 5, device="meta").t()
        y = graph.call_function(torch.ops.aten.clone.default, (x,), {"memory_format": torch.contiguous_format}) \
            if copy else x
        y.meta["val"] = torch.empty(5, 3, device="meta") if copy else x.meta["val"]
        graph.output((y,))
        return torch.fx.GraphModule(torch.nn.Module(), graph)
    assert not same_computation(side(True), side(False))
    assert same_computation(side(True), side(True))


@pytest.mark.slow
def test_diffusers_unet_with_a_batch_crossing_64_has_one_graph():
    """diffusers' UNet2DConditionModel (tiny config, random weights) with the batch dynamic
    across its upsampler's `shape[0] >= 64` copy: no cond, and eager's answers on both sides."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=8, attention_head_dim=2, norm_num_groups=4).eval()

    def inputs(batch):
        return torch.randn(batch, 4, 8, 8), torch.tensor(3), torch.randn(batch, 5, 8)
    batch = gp.Dim("b", min=1, max=80)
    ep = gp.export(model, inputs(2), dynamic_shapes={"sample": {0: batch}, "timestep": None,
                                                     "encoder_hidden_states": {0: batch}})
    assert _conds(ep) == 0
    module = ep.module()
    for size in (1, 2, 63, 64, 80):
        args = inputs(size)
        with torch.no_grad():
            want, got = model(*args).sample, module(*args).sample
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert got.stride() == want.stride()

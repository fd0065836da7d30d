"""A reshape whose choice between a view and a copy turns on sizes the spec cannot decide (SD3's
cropped position embedding: a slice of a buffer is viewable only where it spans the whole buffer)
is not a guard: eager's values are the same either way, so the export holds over the whole range.
Only a write through the result, or into its source, could tell the two apart: that is refused."""
import inspect

import pytest
import torch
import torch.nn as nn

import graphport as gp

torch.manual_seed(0)


class CroppedPositions(nn.Module):
    """diffusers' PatchEmbed.cropped_pos_embed, on a 16 x 16 grid of 8-channel positions."""

    def __init__(self, write: bool = False):
        super().__init__()
        self.register_buffer("pos", torch.randn(1, 256, 8))
        self.write = write

    def forward(self, x):
        h, w = x.shape[-2:]
        top, left = (16 - h) // 2, (16 - w) // 2
        grid = self.pos.reshape(1, 16, 16, -1)[:, top:top + h, left:left + w, :]
        positions = grid.reshape(1, -1, grid.shape[-1])
        if self.write:
            positions.mul_(2)   # WRITE
        return x.flatten(2).transpose(1, 2) + positions


def _spec(api):
    side = api.Dim("side", min=1, max=16)
    return ({2: side, 3: side},)


def test_a_view_or_copy_choice_no_write_observes_holds_over_the_whole_range():
    model = CroppedPositions().eval()
    ep = gp.export(model, (torch.randn(2, 8, 10, 10),), dynamic_shapes=_spec(gp))
    assert not ep.range_constraints or all(r.upper >= 16 for r in ep.range_constraints.values())
    for side in (10, 16, 1, 2, 15):   # 16: the slice spans the buffer (a view in eager), below: a copy
        x = torch.randn(2, 8, side, side)
        torch.testing.assert_close(ep.module()(x), model(x))
    # the buffer is untouched, as in eager
    torch.testing.assert_close(ep.state_dict["pos"], model.pos)


def test_torch_export_refuses_the_range_it_would_guard():
    """torch.export makes the choice a guard (8*side != 128) and refuses the spec up to 16."""
    model = CroppedPositions().eval()
    with pytest.raises(Exception, match="8\\*L\\['x'\\].size\\(\\)\\[2\\]\\) != 128"):
        torch.export.export(model, (torch.randn(2, 8, 10, 10),), dynamic_shapes=_spec(torch.export))


def test_a_write_that_would_observe_the_choice_is_refused_at_its_line():
    model = CroppedPositions(write=True).eval()
    with pytest.raises(gp.UnsupportedFeatureError) as caught:
        gp.export(model, (torch.randn(2, 8, 10, 10),), dynamic_shapes=_spec(gp))
    lines, start = inspect.getsourcelines(CroppedPositions.forward)
    assert caught.value.location.lineno == start + next(i for i, line in enumerate(lines) if "# WRITE" in line)
    assert "clone()" in caught.value.fix
    assert isinstance(caught.value, RuntimeError)


class ChunkedContraction(nn.Module):
    """Mamba-2's chunked scan in small: a sequence padded up to whole chunks of 4, split into
    chunks, and contracted over the positions in each chunk by einsum. The values come as
    (batch, heads, head_dim, seq) and are permuted to (batch, seq, heads, head_dim), as Mamba-2's
    come out of a Conv1d; padding keeps that layout (channels-last), so einsum's reshape of the
    operand for `bmm` is a view only while there is one chunk, and a copy from two chunks on."""

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)                   # (batch, seq, heads, head_dim), seq with stride 1
        batch, seq, heads, head_dim = x.shape
        x = nn.functional.pad(x, (0, 0, 0, 0, 0, (4 - seq % 4) % 4)).reshape(batch, -1, 4, heads, head_dim)
        return torch.einsum("bclhn,bclhp->bchpn", x[..., :2] * 2, x)


def _chunked_spec(api):
    return ({0: api.Dim("batch", min=1, max=8), 3: api.Dim("seq", min=1, max=32)},)


def test_a_reshape_inside_an_operator_is_a_view_or_copy_choice_not_a_guard():
    """einsum's own reshape of a permuted operand asks whether the strides allow a view; at the
    example (one chunk) they do. That is not a guard at the example's value: the call is valid
    over the whole range, across chunk boundaries, at batch 1 and at the smallest sizes."""
    model = ChunkedContraction()
    ep = gp.export(model, (torch.randn(2, 2, 3, 4),), dynamic_shapes=_chunked_spec(gp))
    for batch, seq in [(2, 4), (1, 1), (1, 4), (1, 5), (3, 8), (2, 9), (1, 31), (8, 32)]:
        x = torch.randn(batch, 2, 3, seq)
        torch.testing.assert_close(ep.module()(x), model(x))
    # torch.export guards on the strides einsum reads at the example, and refuses the range
    with pytest.raises(Exception, match="Constraints violated"):
        torch.export.export(model, (torch.randn(2, 2, 3, 4),), dynamic_shapes=_chunked_spec(torch.export))


class WritesAnOperandAfterwards(nn.Module):
    """The chunked contraction, then a write into an operand einsum reshaped internally."""

    def forward(self, x):
        x = x.permute(0, 3, 1, 2)
        batch, seq, heads, head_dim = x.shape
        x = nn.functional.pad(x, (0, 0, 0, 0, 0, (4 - seq % 4) % 4)).reshape(batch, -1, 4, heads, head_dim)
        values = x * 2
        out = torch.einsum("bclhn,bclhp->bchpn", x[..., :2], values)
        values.mul_(3)
        return out, values


def test_a_write_into_an_operand_of_a_kept_operator_is_not_refused():
    """einsum is kept as one node; its decomposition only works out the node's metadata, and the
    tensors its reshape makes are thrown away: no write can reach them, so none is refused."""
    model = WritesAnOperandAfterwards()
    ep = gp.export(model, (torch.randn(2, 2, 3, 4),), dynamic_shapes=_chunked_spec(gp))
    for batch, seq in [(1, 1), (2, 9), (3, 32)]:
        x = torch.randn(batch, 2, 3, seq)
        torch.testing.assert_close(ep.module()(x), model(x))


class ReshapeByOperator(nn.Module):
    """SD3's cropped position embedding with the reshape called as the ATen operator (as an
    operator's decomposition calls it), optionally written into afterwards."""

    def __init__(self, write: bool):
        super().__init__()
        self.register_buffer("pos", torch.randn(1, 256, 8))
        self.write = write

    def forward(self, x):
        h, w = x.shape[-2:]
        top, left = (16 - h) // 2, (16 - w) // 2
        grid = self.pos.reshape(1, 16, 16, -1)[:, top:top + h, left:left + w, :]
        positions = torch.ops.aten.reshape.default(grid, [1, -1, grid.shape[-1]])
        if self.write:
            positions.mul_(2)   # WRITE
        return x.flatten(2).transpose(1, 2) + positions


def test_an_operator_level_reshape_holds_over_the_range_and_a_write_into_it_is_refused():
    model = ReshapeByOperator(write=False).eval()
    ep = gp.export(model, (torch.randn(2, 8, 10, 10),), dynamic_shapes=_spec(gp))
    for side in (10, 16, 1, 2, 15):
        x = torch.randn(2, 8, side, side)
        torch.testing.assert_close(ep.module()(x), model(x))
    writing = ReshapeByOperator(write=True).eval()
    with pytest.raises(gp.UnsupportedFeatureError) as caught:
        gp.export(writing, (torch.randn(2, 8, 10, 10),), dynamic_shapes=_spec(gp))
    lines, start = inspect.getsourcelines(ReshapeByOperator.forward)
    assert caught.value.location.lineno == start + next(i for i, line in enumerate(lines) if "# WRITE" in line)

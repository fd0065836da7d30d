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

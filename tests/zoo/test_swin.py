"""Swin v1 as published (SwinConfig's defaults: 224 px, patch 4, window 7, 2-2-6-2 blocks) with
a dynamic batch and image side, 224 to 384 px in 32-pixel steps. At 224 px the last stage is
exactly one window: the model pads nowhere, clamps its window to the map and drops the shift
(`set_shift_and_window_size`); every larger side pads, and keeps the shift. Both sides of that
question, the ends and batch 1 must answer as eager does, for a square side (one question) and
for height and width apart (the clamp is then `Min(h, w) <= 7` inside the padded side, where
the window `min(h, w)` is 7 again by the side's facts).

Eager Swin rewrites its own window and shift when called at 224 px, so eager runs on a copy of
the module as exported for every size."""
from __future__ import annotations

import copy

import pytest
import torch
import transformers as tf

import graphport as gp


def _swin():
    torch.manual_seed(0)
    return tf.SwinModel(tf.SwinConfig()).eval()


def _matches_eager(model, ep, shapes) -> None:
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            expected = copy.deepcopy(model)(pixel_values=x).last_hidden_state
            actual = ep.module()(pixel_values=x).last_hidden_state
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=f"at {shape}")


@pytest.mark.slow
def test_square_side_224_to_384():
    model = _swin()
    blocks = gp.Dim("blocks", min=7, max=12)
    spec = {"pixel_values": {0: gp.Dim("batch", min=1, max=8), 2: 32 * blocks, 3: 32 * blocks}}
    ep = gp.export(model, (), {"pixel_values": torch.randn(2, 3, 224, 224)}, dynamic_shapes=spec)
    _matches_eager(model, ep, [(1, 3, 224, 224), (1, 3, 256, 256), (2, 3, 320, 320), (1, 3, 384, 384)])


@pytest.mark.slow
def test_height_and_width_apart():
    model = _swin()
    rows, cols = gp.Dim("rows", min=7, max=12), gp.Dim("cols", min=7, max=12)
    spec = {"pixel_values": {0: gp.Dim("batch", min=1, max=8), 2: 32 * rows, 3: 32 * cols}}
    ep = gp.export(model, (), {"pixel_values": torch.randn(2, 3, 224, 288)}, dynamic_shapes=spec)
    _matches_eager(model, ep, [(1, 3, 224, 224), (1, 3, 224, 384), (1, 3, 288, 224), (2, 3, 256, 320),
                               (1, 3, 384, 384)])

"""Windowed attention (Swin's window partition and reverse) with a dynamic image size.

The feature map is padded up to a multiple of the window (`h + Mod(-h, 7)`), cut into
windows by a view, permuted, made contiguous and viewed again; the reverse does the same
the other way; the shifted block's mask numbers regions by slice assignment on the padded
map (`[0:-7]`, empty when one window covers it). Whether those views are legal, and what their `-1` is, must be read through
the shape algebra's normal forms (the padded side is 7 times its window count), for every
size in the range, including sizes where one window covers the map: the export must not
guard on it, and must answer like eager there.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import graphport as gp

from .helpers import assert_matches_eager, torch_export

WINDOW, SHIFT = 7, 3


def _partition(x, ws):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws, ws, c)


def _reverse(windows, ws, h, w):
    c = windows.shape[-1]
    windows = windows.view(-1, h // ws, w // ws, ws, ws, c)
    return windows.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, h, w, c)


class ShiftedWindowBlock(nn.Module):
    def __init__(self, channels=4, shift=SHIFT):
        super().__init__()
        self.shift = shift
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)

    def _mask(self, hp, wp, dtype):
        """Swin's attention mask for shifted windows: regions numbered by slice assignment on the
        padded map (`[0:-7]` is empty when one window covers it), then cut into windows."""
        regions = torch.zeros((1, hp, wp, 1), dtype=dtype)
        slices = (slice(0, -WINDOW), slice(-WINDOW, -self.shift), slice(-self.shift, None))
        for i, (rows, cols) in enumerate((r, c) for r in slices for c in slices):
            regions[:, rows, cols, :] = i
        windows = _partition(regions, WINDOW).view(-1, WINDOW * WINDOW)
        differ = windows.unsqueeze(1) - windows.unsqueeze(2)
        return differ.masked_fill(differ != 0, -100.0).masked_fill(differ == 0, 0.0)

    def forward(self, x):
        b, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, (WINDOW - w % WINDOW) % WINDOW, 0, (WINDOW - h % WINDOW) % WINDOW))
        _, hp, wp, _ = x.shape
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        windows = _partition(x, WINDOW).view(-1, WINDOW * WINDOW, c)
        q, k, v = self.qkv(windows).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / c ** 0.5
        if self.shift:
            scores = scores + self._mask(hp, wp, x.dtype).repeat(b, 1, 1)
        attended = torch.softmax(scores, -1) @ v
        out = _reverse(self.proj(attended).view(-1, WINDOW, WINDOW, c), WINDOW, hp, wp)
        if self.shift:
            out = torch.roll(out, (self.shift, self.shift), (1, 2))
        return out[:, :h, :w, :].contiguous()


class TwoBlocks(nn.Module):
    """Swin's stage: a block, then an identical shifted one."""
    def __init__(self):
        super().__init__()
        self.first, self.second = ShiftedWindowBlock(shift=0), ShiftedWindowBlock()

    def forward(self, x):
        x = x + self.first(x)
        return x + self.second(x)


SIZES = [(2, 10, 17), (1, 3, 3), (1, 7, 7), (3, 8, 14), (4, 30, 30), (1, 15, 29), (2, 21, 4)]


def _spec(api):
    return {"x": {0: api.Dim("b", min=1, max=4), 1: api.Dim("h", min=3, max=30), 2: api.Dim("w", min=3, max=30)}}


def test_window_partition_exports_and_matches_eager_at_every_size():
    torch.manual_seed(0)
    model = TwoBlocks().eval()
    ep = gp.export(model, (torch.randn(2, 10, 17, 4),), dynamic_shapes=_spec(gp))
    module = ep.module()
    for size in SIZES:   # one window (h, w <= 7), several, batch 1, the smallest
        assert_matches_eager(ep, model, (torch.randn(*size, 4),), what=f"at {size}", module=module)
    declared = sorted((int(r.lower), int(r.upper)) for r in ep.range_constraints.values())
    assert declared == [(1, 4), (3, 30), (3, 30)]   # no size of the range refused


@pytest.mark.slow
def test_window_partition_against_torch_export():
    """torch.export exports window multiples only (on any other range it guards that the padded
    side divides by its window count), and its program refuses some of those sizes at call time
    (one window, batch 1); where it answers, both programs answer alike, and ours answers
    like eager everywhere."""
    torch.manual_seed(0)
    model = TwoBlocks().eval()
    example = (torch.randn(2, 14, 21, 4),)

    def multiples(api):
        return {"x": {0: api.Dim("b", min=1, max=4), 1: WINDOW * api.Dim("h", min=1, max=4),
                      2: WINDOW * api.Dim("w", min=1, max=4)}}
    ours = gp.export(model, example, dynamic_shapes=multiples(gp)).module()
    theirs = torch_export(model, example, dynamic_shapes=multiples(torch.export)).module()
    answered = 0
    for size in [(2, 14, 21), (1, 14, 14), (4, 28, 28), (3, 21, 14), (1, 7, 7), (2, 7, 28)]:
        x = torch.randn(*size, 4)
        with torch.no_grad():
            torch.testing.assert_close(ours(x), model(x), atol=1e-5, rtol=1e-5)
            try:
                reference = theirs(x)
            except AssertionError:   # a guard of torch.export's program refuses this size
                continue
            torch.testing.assert_close(ours(x), reference, atol=1e-5, rtol=1e-5)
            answered += 1
    assert answered >= 2


def _swin(version: str, depths):
    transformers = pytest.importorskip("transformers")
    config_class, model_class = {"v1": ("SwinConfig", "SwinModel"), "v2": ("Swinv2Config", "Swinv2Model")}[version]
    config = getattr(transformers, config_class)(image_size=64, patch_size=4, embed_dim=16, depths=depths,
                                                 num_heads=[1] * len(depths), window_size=WINDOW)
    torch.manual_seed(0)
    return getattr(transformers, model_class)(config).eval()


def _swin_matches_eager(model, example, spec, sizes):
    ep = gp.export(model, (), {"pixel_values": example}, dynamic_shapes=spec)
    module = ep.module()
    for size in sizes:
        assert_matches_eager(ep, model, (), {"pixel_values": torch.randn(*size)}, what=f"at {size}", module=module)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_swin_with_dynamic_batch_and_image_size_matches_eager(version):
    """transformers' Swin (the window mask built on the padded side, made contiguous and
    viewed, in every block) with the batch and the image size dynamic: image sides of 8-pixel
    steps, so both stages pad to their 7-wide windows, and the smallest stage map is 8x8."""
    model = _swin(version, [2, 2])
    spec = {"pixel_values": {0: gp.Dim("b", min=1, max=3), 2: 8 * gp.Dim("h", min=8, max=24),
                             3: 8 * gp.Dim("w", min=8, max=24)}}
    _swin_matches_eager(model, torch.randn(2, 3, 64, 96), spec,
                        [(2, 3, 64, 96), (1, 3, 64, 64), (3, 3, 192, 120), (1, 3, 104, 184)])

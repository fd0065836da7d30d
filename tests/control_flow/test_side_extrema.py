"""The program's own `min(h, w)` inside one side of a split branch, where that side's facts
make it one value, is that value there: Swin's `if min(h, w) <= window: window = min(h, w)`
with sizes >= the window makes the window the constant again on the true side. Carried as
`Min(h, w)`, the padded sides and window counts built from it were new unknowns, the
partition's views asked questions nothing could settle, and export was refused; pinned, the
side is the plain windowed computation. Every size of the range, on both sides of the
question and at the ends, answers like eager."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

import graphport as gp

WINDOW = 4


class ClampedWindows(nn.Module):
    """Windows of a padded map, the window clamped to the map's smaller side as Swin does, plus
    a table sized for the configured window (the relative position bias's role)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(WINDOW * WINDOW))

    def forward(self, x):
        b, h, w = x.shape
        ws = WINDOW
        if min(h, w) <= WINDOW:
            ws = min(h, w)
        x = F.pad(x, (0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
        _, hp, wp = x.shape
        windows = x.view(b, hp // ws, ws, wp // ws, ws).permute(0, 1, 3, 2, 4).reshape(-1, ws * ws)
        return windows + self.table


def _spec(lower: int):
    return ({0: gp.Dim("b", min=1, max=4), 1: gp.Dim("h", min=lower, max=9), 2: gp.Dim("w", min=lower, max=9)},)


def test_clamped_window_is_the_constant_on_its_side():
    model, example = ClampedWindows(), (2, 4, 6)
    ep = gp.export(model, (torch.randn(*example),), dynamic_shapes=_spec(WINDOW))
    conds = [n for n in ep.graph_module.graph.nodes if n.target is torch.ops.higher_order.cond]
    assert len(conds) == 1   # the question is a real one: the sides differ (window clamped or not)
    torch.manual_seed(0)
    for shape in [(1, 4, 4), (1, 4, 9), (3, 6, 4), (2, 9, 9), (1, 5, 7), (4, 5, 5), example]:
        x = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


def test_smaller_maps_keep_their_min():
    """Below the window (h, w from 2) the clamped window takes several values on the true side:
    it stays `Min(h, w)`; the export then stands or falls as before, never with a constant that
    is wrong somewhere. Where it exports, it answers like eager at every size tried."""
    model = ClampedWindows()
    try:
        ep = gp.export(model, (torch.randn(2, 3, 6),), dynamic_shapes=_spec(2))
    except gp.errors.GraphportError:
        return   # refused, as before this change: no wrong program
    for shape in [(1, 2, 2), (1, 3, 9), (2, 4, 4), (1, 9, 2), (2, 9, 9)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=0)


class ClampsItself(nn.Module):
    """Swin's `set_shift_and_window_size`: a small input rewrites the module's own shift, which
    the rest of the call (and, in eager, every later call) reads."""

    def __init__(self):
        super().__init__()
        self.shift = 1

    def forward(self, x):
        if x.shape[1] <= 4:
            self.shift = 0
        return torch.roll(x, self.shift, 1) * 2 if self.shift else x * 3


def test_a_side_that_rewrites_the_module_leaves_the_other_side_its_state():
    """Each side is traced as one call from the module's state at the call: the true side's
    `self.shift = 0` must not reach the false side's trace (traced after it), nor the module."""
    model = ClampsItself()
    ep = gp.export(model, (torch.randn(2, 6),), dynamic_shapes=({1: gp.Dim("n", min=1, max=9)},))
    assert model.shift == 1
    for n in (1, 3, 4, 5, 9):
        x = torch.randn(2, n)
        torch.testing.assert_close(ep.module()(x), copy.deepcopy(model)(x), rtol=0, atol=0)

"""Programs with control-flow subgraphs leave the process and come back whole."""
from __future__ import annotations

import io

import pytest
import torch

import graphport as gp


class Routed(torch.nn.Module):
    """cond over a tensor predicate closing over a parameter and a buffer, then map, on a dynamic batch."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.register_buffer("shift", torch.ones(4))

    def forward(self, x):
        y = gp.cond(x.sum() > 0, lambda x: self.linear(x) + self.shift, lambda x: x.cos() - self.shift, (x,))
        return gp.map(lambda row: row * 2, y), x.shape[0] * 2


def _round_trip(ep):
    first = io.BytesIO()
    gp.save(ep, first)
    first.seek(0)
    loaded = gp.load(first)
    again = io.BytesIO()
    gp.save(loaded, again)
    return loaded, first.getvalue(), again.getvalue()


def test_cond_and_map_round_trip_print_run_and_resave_identically():
    model = Routed().eval()
    ep = gp.export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: gp.Dim("n", min=1, max=16)}})
    loaded, first, again = _round_trip(ep)
    assert str(loaded) == str(ep)
    assert first == again
    for n in (1, 2, 16):
        for sign in (1.0, -1.0):
            x = sign * (torch.rand(n, 4) + 0.1)
            out, size = loaded.module()(x)
            expected, expected_size = model(x)
            torch.testing.assert_close(out, expected)
            assert size == expected_size
    with pytest.raises(gp.InputGuardError):
        loaded.module()(torch.randn(17, 4))

"""Unflattening survives the artifact: a loaded program unflattens as the original does."""
from __future__ import annotations

import io

import torch
from torch import nn

import graphport as gp


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn, self.ff = nn.Linear(8, 8), nn.Linear(8, 8)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, scale: float = 1.0):
        self.calls += 1
        return {"out": self.ff(self.attn(x).relu()) * scale}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.shared = self.layers[0]     # one module under two paths

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)["out"]
        return x


def _loaded(ep):
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    buffer.seek(0)
    return gp.load(buffer)


def test_unflatten_after_load_keeps_hierarchy_state_and_preserved_calls():
    model = Net().eval()
    ep = gp.export(model, (torch.randn(3, 8),), dynamic_shapes={"x": {0: gp.Dim("n", max=32)}},
                   preserve_module_call_signature=("layers.1",))
    loaded = gp.unflatten(_loaded(ep))
    original = gp.unflatten(ep)
    assert type(loaded.layers[0]).__name__ == type(original.layers[0]).__name__ == "Block"
    assert loaded.shared is loaded.layers[0]
    assert dict(loaded.named_parameters()).keys() == dict(original.named_parameters()).keys()
    for n in (1, 5):
        x = torch.randn(n, 8)
        torch.testing.assert_close(loaded(x), model(x))
    assert loaded.layers[1].calls.item() == 2    # buffer updates land at their original names

    class Swapped(nn.Module):   # the preserved convention: (x) -> {"out": tensor}
        def forward(self, x, scale: float = 1.0):
            return {"out": x * 0}
    loaded.set_submodule("layers.1", Swapped())
    assert loaded(torch.randn(2, 8)).abs().sum() == 0

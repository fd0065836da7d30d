"""Per-call cost of ep.module(): graphport vs torch.export vs eager, side by side in one process.

The module checks every call (structure, dtypes, sizes, relations) before running the
graph; this measures what that costs on a model small enough for the checks to show.
Run: PYTHONPATH=src python bench/module_call.py
"""
from __future__ import annotations

import timeit

import torch
import torch.export

import graphport as gp


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x, *, mask):
        return self.b(torch.relu(self.a(x))) * mask


def per_call_us(fn, *args, **kwargs) -> float:
    timer = timeit.Timer(lambda: fn(*args, **kwargs))
    number = 2000
    return min(timer.repeat(repeat=5, number=number)) / number * 1e6


def main() -> None:
    model = Small().eval()
    x, mask = torch.randn(8, 16), torch.ones(8, 4)
    spec = {"x": {0: gp.Dim("b", max=64)}, "mask": {0: gp.Dim("b", max=64)}}
    torch_spec = {"x": {0: torch.export.Dim("b", max=64)}, "mask": {0: torch.export.Dim("b", max=64)}}
    ours = gp.export(model, (x,), {"mask": mask}, dynamic_shapes=spec).module()
    theirs = torch.export.export(model, (x,), {"mask": mask}, dynamic_shapes=torch_spec).module()
    with torch.no_grad():
        eager = per_call_us(model, x, mask=mask)
        gp_us = per_call_us(ours, x, mask=mask)
        te_us = per_call_us(theirs, x, mask=mask)
    print(f"eager {eager:.1f} us/call; graphport {gp_us:.1f} us/call ({gp_us / eager:.2f}x eager, "
          f"{gp_us / te_us:.2f}x torch.export); torch.export {te_us:.1f} us/call ({te_us / eager:.2f}x eager)")


if __name__ == "__main__":
    main()

"""Capturing a torch.cond costs no more than capturing both branches inline.

The same two branches are exported two ways, in one process, static and dynamic: as a
torch.cond on a tensor predicate, and inline (both computed, chosen with torch.where).
Rounds export both in alternating order; prints the median export time of each, the
median of the per-round ratios cond / inline and the ratio of the fastest exports, for
graphport and for torch.export side by side.

    PYTHONPATH=src:. python -m bench.control_flow [--repeat N] [--torch-repeat N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch

import graphport as gp


class Branches(torch.nn.Module):
    def __init__(self, d: int = 32, depth: int = 4):
        super().__init__()
        self.a = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU()) for _ in range(depth)])
        self.b = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh()) for _ in range(depth)])


class WithCond(Branches):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.a(x), lambda x: self.b(x), (x,))


class Inline(Branches):
    def forward(self, x):
        return torch.where(x.sum() > 0, self.a(x), self.b(x))


def _ratios(export, args, dynamic, repeat: int) -> tuple[float, float, float, float]:
    """(median cond export s, median inline export s, median of the per-round ratios cond /
    inline, ratio of the fastest of each). Each round exports both, in alternating order,
    so load that comes and goes on a shared machine hits both alike."""
    cond, inline = [], []
    for i in range(repeat):
        for model, out in ((WithCond, cond), (Inline, inline)) if i % 2 == 0 else ((Inline, inline), (WithCond, cond)):
            m = model()
            start = time.perf_counter()
            export(m, args, dynamic_shapes=dynamic)
            out.append(time.perf_counter() - start)
    return (statistics.median(cond), statistics.median(inline),
            statistics.median(c / i for c, i in zip(cond, inline)), min(cond) / min(inline))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--torch-repeat", type=int, default=5, help="rounds for torch.export (it is slow)")
    options = parser.parse_args()
    torch.manual_seed(0)
    args = (torch.randn(8, 32),)
    rows = []
    for label, gp_dyn, torch_dyn in [("static", None, None),
                                     ("dynamic", {"x": {0: gp.Dim("b")}}, {"x": {0: torch.export.Dim("b")}})]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for exporter, name, dyn, repeat in [(gp.export, "graphport", gp_dyn, options.repeat),
                                                (torch.export.export, "torch.export", torch_dyn, options.torch_repeat)]:
                exporter(WithCond(), args, dynamic_shapes=dyn)   # warm up
                exporter(Inline(), args, dynamic_shapes=dyn)
                rows.append((label, name, *_ratios(exporter, args, dyn, repeat)))
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| shapes | exporter | cond export (s) | inline export (s) | cond / inline (median of rounds) "
          "| cond / inline (fastest) |")
    print("|---|---|---|---|---|---|")
    for label, name, cond, inline, ratio, fastest in rows:
        print(f"| {label} | {name} | {cond:.4f} | {inline:.4f} | {ratio:.2f} | {fastest:.2f} |")


if __name__ == "__main__":
    main()

"""Capturing a torch.cond costs no more than capturing both branches inline.

The same two branches are exported three ways, in one process, static and dynamic: as a
torch.cond on a tensor predicate, and inline (both computed, chosen with torch.where).
Prints the median export time of each and the ratio cond / inline, for graphport and for
torch.export side by side.

    PYTHONPATH=src python -m bench.control_flow [--repeat N]
"""
from __future__ import annotations

import argparse
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


def _median_time(export, model, args, dynamic, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        export(model, args, dynamic_shapes=dynamic)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    torch.manual_seed(0)
    args = (torch.randn(8, 32),)
    rows = []
    for label, gp_dyn, torch_dyn in [("static", None, None),
                                     ("dynamic", {"x": {0: gp.Dim("b")}}, {"x": {0: torch.export.Dim("b")}})]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for exporter, name, dyn in [(gp.export, "graphport", gp_dyn), (torch.export.export, "torch.export", torch_dyn)]:
                exporter(WithCond(), args, dynamic_shapes=dyn)   # warm up
                cond = _median_time(exporter, WithCond(), args, dyn, repeat)
                inline = _median_time(exporter, Inline(), args, dyn, repeat)
                rows.append((label, name, cond, inline, cond / inline))
    print("| shapes | exporter | cond export (s) | inline export (s) | cond / inline |")
    print("|---|---|---|---|---|")
    for label, name, cond, inline, ratio in rows:
        print(f"| {label} | {name} | {cond:.4f} | {inline:.4f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

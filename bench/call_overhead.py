"""What `ep.module()` adds to a call over eager, on the smallest model that checks anything:
`Linear(4, 4)(x) + y` with `x` and `y` sharing one dynamic batch dim (the call checks both
shapes and their equality).

Eager, graphport's module and torch.export's module are called in rotated order, in blocks of
calls, one process; each figure is the median of the per-block means, in microseconds per
call, with and without autograd recording. The overhead is (module - eager).

    PYTHONPATH=src .venv/bin/python bench/call_overhead.py [--blocks 41] [--calls 2000]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import graphport as gp


class LinearPlus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, y):
        return self.lin(x) + y


def per_call_us(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls * 1e6


def measure(callables: dict, args: tuple, blocks: int, calls: int) -> dict[str, float]:
    for fn in callables.values():   # warm-up: generated code, caches, allocator
        per_call_us(fn, args, calls)
    times: dict[str, list[float]] = {name: [] for name in callables}
    names = list(callables)
    for block in range(blocks):
        for name in names[block % len(names):] + names[:block % len(names)]:
            times[name].append(per_call_us(callables[name], args, calls))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=41)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    torch.set_num_threads(1)
    model = LinearPlus().eval()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    ours = gp.export(model, (x, y), dynamic_shapes=({0: gp.Dim("b", max=512)}, {0: gp.Dim("b", max=512)}))
    batch = torch.export.Dim("b", max=512)
    theirs = torch.export.export(model, (x, y), dynamic_shapes=({0: batch}, {0: batch}))
    callables = {"eager": model, "graphport": ours.module(), "torch.export": theirs.module()}
    print(f"torch {torch.__version__}, {options.blocks} blocks of {options.calls} calls, one thread; "
          "microseconds per call (median of blocks)")
    print(f"{'autograd':9s} {'eager':>7s} {'graphport':>10s} {'torch.export':>13s} {'gp overhead':>12s} "
          f"{'torch overhead':>15s}")
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            t = measure(callables, (x, y), options.blocks, options.calls)
        print(f"{'on' if grad else 'off':9s} {t['eager']:7.1f} {t['graphport']:10.1f} {t['torch.export']:13.1f} "
              f"{t['graphport'] - t['eager']:12.1f} {t['torch.export'] - t['eager']:15.1f}")


if __name__ == "__main__":
    main()

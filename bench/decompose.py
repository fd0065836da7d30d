"""run_decompositions speed: graphport's against torch.export's, on the model zoo.

Both exporters export each model once (static shapes, not timed), then each program is
lowered to Core ATen with `run_decompositions()`, graphport and torch.export alternating
round by round in this one process so machine drift hits both alike. The figure is the
median over models of graphport's time / torch.export's time (target: <= 0.1x).

    .venv/bin/python bench/decompose.py [--models bert,gpt2] [--repeats 3]

Prints a markdown table and the median ratio (bench/RESULTS.md, section "run_decompositions").
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness, measure, zoo  # noqa: E402


def lower_times(name: str, repeats: int) -> tuple[float, float]:
    """(graphport, torch.export) median seconds of run_decompositions() on one zoo model."""
    gp, _ = harness.load_graphport()
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    ours = gp.export(built.module, args, kwargs)
    theirs = measure.torch_exporter(built.module, args, kwargs)
    times: dict[str, list[float]] = {"gp": [], "torch": []}
    for _ in range(repeats):
        for key, program in (("gp", ours), ("torch", theirs)):
            t0 = time.perf_counter()
            program.run_decompositions()
            times[key].append(time.perf_counter() - t0)
    return statistics.median(times["gp"]), statistics.median(times["torch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(n for n, m in zoo.MODELS.items() if not m.meta))
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    measure.warm_up_exporters()
    gp, _ = harness.load_graphport()
    tiny = gp.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    tiny.run_decompositions()        # one-time costs (building the default table) out of the figures
    torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),)).run_decompositions()
    rows, ratios = [], []
    for name in opts.models.split(","):
        try:
            ours, theirs = lower_times(name, opts.repeats)
        except Exception as exc:   # one exporter refusing a model: a row saying so, no ratio
            rows.append(f"| {name} | - | - | {type(exc).__name__}: {harness.first_line(str(exc))[:80]} |")
        else:
            ratios.append(ours / theirs)
            rows.append(f"| {name} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.3f} |")
        print(rows[-1], flush=True)
    print("\n| model | graphport s | torch.export s | ratio |\n|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nmedian ratio graphport / torch.export: {statistics.median(ratios):.3f} over {len(ratios)} models "
          f"({opts.repeats} repeats each)")


if __name__ == "__main__":
    main()

"""Interop speed: converting a graphport program to torch.export's form, against exporting
the same model with torch.export.

A backend that takes torch.export programs (ONNX, AOTInductor, ...) pays torch.export's
export time when it starts from a model; starting from a graphport program it pays
graphport's export plus `graphport.interop.to_torch`. Target: to_torch <= 0.2x
torch.export's export time of the same model (static and dynamic). from_torch (the way
back) is timed too. All three are measured in one process, alternating round by round, so
machine drift hits them alike; the figure is the median over rounds.

    .venv/bin/python bench/interop.py [--models bert,gpt2] [--repeats 3]

Writes the "interop" section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import harness, measure, zoo  # noqa: E402
from bench.harness import fmt  # noqa: E402

TARGET = 0.2


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure_model(name: str, dynamic: bool, repeats: int) -> dict[str, Any]:
    import graphport as gp
    from graphport.interop import from_torch, to_torch

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    gp_spec = measure.dynamic_spec(built, "graphport") if dynamic else None
    torch_spec = measure.dynamic_spec(built, "torch") if dynamic else None
    ep = gp.export(built.module, args, kwargs, dynamic_shapes=gp_spec)
    tep = to_torch(ep)  # warm-up round, not timed
    from_torch(tep)
    rounds: dict[str, list[float]] = {"torch_export": [], "to_torch": [], "from_torch": []}
    for _ in range(repeats):
        seconds, _ = _timed(lambda: measure.torch_exporter(built.module, args, kwargs, torch_spec))
        rounds["torch_export"].append(seconds)
        seconds, tep = _timed(lambda: to_torch(ep))
        rounds["to_torch"].append(seconds)
        seconds, _ = _timed(lambda: from_torch(tep))
        rounds["from_torch"].append(seconds)
    row = {key: statistics.median(values) for key, values in rounds.items()}
    row["nodes"] = len(ep.graph.nodes)
    row["ratio"] = row["to_torch"] / row["torch_export"]
    return row


def render(rows: list[tuple[str, str, dict[str, Any]]], repeats: int) -> str:
    lines = ["## Interop: graphport -> torch.export", "", harness.stamp(), "",
             f"Each figure is the median of {repeats} rounds after one warm-up conversion, in one process, "
             "alternating torch.export's export of the model, `to_torch` of graphport's program of it, and "
             "`from_torch` of the result. Target: to_torch / torch.export <= "
             f"{TARGET}.", "",
             "| model | kind | nodes | torch.export s | to_torch s | from_torch s | to_torch / torch.export | notes |",
             "|---|---|---|---|---|---|---|---|"]
    ratios = []
    for name, kind, row in rows:
        if "error" in row:
            lines.append(f"| {name} | {kind} | - | - | - | - | - | {row['error']} |")
            continue
        ratios.append(row["ratio"])
        lines.append(f"| {name} | {kind} | {row['nodes']} | {fmt(row['torch_export'])} | {fmt(row['to_torch'])} | "
                     f"{fmt(row['from_torch'])} | {fmt(row['ratio'])} | |")
    if ratios:
        worst = max(ratios)
        lines += ["", "Summary:", "",
                  f"- median to_torch / torch.export: **{fmt(statistics.median(ratios))}**, worst **{fmt(worst)}** "
                  f"over {len(ratios)}/{len(rows)} exports (target <= {TARGET}: "
                  f"{'meets' if worst <= TARGET else 'misses'})"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(n for n, m in zoo.MODELS.items() if not m.meta))
    parser.add_argument("--kinds", default="static,dynamic")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    measure.warm_up_exporters()
    rows = []
    for name in opts.models.split(","):
        for kind in opts.kinds.split(","):
            try:
                row = measure_model(name, kind == "dynamic", opts.repeats)
            except Exception as exc:  # a model that fails is a row, not an abort
                row = {"error": f"{type(exc).__name__}: {harness.first_line(str(exc))}"}
            rows.append((name, kind, row))
            print(name, kind, {k: fmt(v) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    body = render(rows, opts.repeats)
    print(body)
    if not opts.no_write:
        harness.write_section(harness.RESULTS_MD, "interop", body, "Benchmark results")


if __name__ == "__main__":
    main()

"""run_decompositions speed: graphport's against torch.export's, on the model zoo.

Both exporters export each model once (static shapes, not timed), then each program is
lowered to Core ATen with `run_decompositions()`, graphport and torch.export alternating
round by round in this one process so machine drift hits both alike. The figure is the
median over models of graphport's time / torch.export's time (target: <= 0.1x).

    .venv/bin/python bench/decompose.py [--models bert,gpt2] [--repeats 3]

Prints a markdown table and the median ratio, and rewrites its section of bench/RESULTS.md
("run-decompositions"; --no-write to leave it).
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


def lower_times(name: str, repeats: int) -> dict[str, float | str]:
    """Median seconds of run_decompositions() on one zoo model, per exporter ("gp", "torch");
    an exporter whose export or lowering fails gets its error instead (the other is still timed)."""
    gp, _ = harness.load_graphport()
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    programs: dict[str, object] = {}
    result: dict[str, float | str] = {}
    for key, export in (("gp", gp.export), ("torch", measure.torch_exporter)):
        try:
            programs[key] = export(built.module, args, kwargs)
        except Exception as exc:
            result[key] = f"{type(exc).__name__}: {harness.first_line(str(exc))[:80]}"
    times: dict[str, list[float]] = {key: [] for key in programs}
    for _ in range(repeats):
        for key, program in programs.items():
            if key in result:
                continue
            t0 = time.perf_counter()
            try:
                program.run_decompositions()
            except Exception as exc:   # torch.export's own lowering fails on gpt2
                result[key] = f"{type(exc).__name__}: {harness.first_line(str(exc))[:80]}"
                continue
            times[key].append(time.perf_counter() - t0)
    result.update({key: statistics.median(found) for key, found in times.items() if key not in result})
    return result


def render(rows: list[tuple[str, dict]], repeats: int) -> str:
    ratios = [r["gp"] / r["torch"] for _, r in rows if isinstance(r.get("gp"), float)
              and isinstance(r.get("torch"), float)]
    lines = ["## run_decompositions", "", harness.stamp(), "",
             "`ep.run_decompositions()` (Core ATen, the default table) on each zoo model, static shapes: "
             f"both exporters export the model once (untimed), then lower it in alternation, {repeats} rounds, "
             "in this one process; each figure is the median of the rounds. Target: graphport / torch.export "
             "<= 0.1x, median over the models both lower.", "",
             "| model | graphport s | torch.export s | ratio | note |", "|---|---|---|---|---|"]
    for name, r in rows:
        cells = [f"{r[k]:.3f}" if isinstance(r.get(k), float) else "-" for k in ("gp", "torch")]
        both = all(isinstance(r.get(k), float) for k in ("gp", "torch"))
        note = "; ".join(f"{'graphport' if k == 'gp' else 'torch.export'}: {r[k]}" for k in ("gp", "torch")
                         if isinstance(r.get(k), str))
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {r['gp'] / r['torch']:.3f} |" if both
                     else f"| {name} | {cells[0]} | {cells[1]} | - |")
        lines[-1] += f" {note} |"
    if ratios:
        median = statistics.median(ratios)
        lines += ["", f"- median ratio graphport / torch.export: {median:.3f} over {len(ratios)} models "
                      f"({sum(x <= 0.1 for x in ratios)} at or under 0.1x, worst {max(ratios):.3f}); "
                      f"target <= 0.1x: {'met' if median <= 0.1 else 'not met'}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(n for n, m in zoo.MODELS.items() if not m.meta))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    measure.warm_up_exporters()
    gp, _ = harness.load_graphport()
    tiny = gp.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    tiny.run_decompositions()        # one-time costs (building the default table) out of the figures
    torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),)).run_decompositions()
    rows = []
    for name in opts.models.split(","):
        rows.append((name, lower_times(name, opts.repeats)))
        print(name, rows[-1][1], flush=True)
    body = render(rows, opts.repeats)
    print(body)
    if not opts.no_write:
        harness.write_section(harness.RESULTS_MD, "run-decompositions", body, "Benchmark results")


if __name__ == "__main__":
    main()

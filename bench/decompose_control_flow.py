"""run_decompositions speed on control-flow programs whose subgraphs compute with sizes they
receive (SymInt operands, dynamic dims read inside a branch or loop body): graphport's
against torch.export's.

Both exporters export each program of the control-flow corpus once (dynamic shapes, not
timed); then each program is lowered to Core ATen with `run_decompositions()`, graphport
and torch.export alternating round by round in this one process, so machine drift hits
both alike. Prints the median seconds of each and the median of the per-round ratios
graphport / torch.export; `int_and_symint_operands` is timed for graphport only (torch.export
refuses it).

    PYTHONPATH=src:. .venv/bin/python bench/decompose_control_flow.py [--repeats 7] [--no-write]

Rewrites its section of bench/RESULTS.md ("run-decompositions-control-flow"; --no-write to leave it).
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

from bench import harness  # noqa: E402
from tests.control_flow.corpus import CASES  # noqa: E402
from tests.control_flow.test_corpus import _export  # noqa: E402

PROGRAMS = ["dynamic_dims_inside_branch", "symint_operand", "int_and_symint_operands", "map_symint_operand",
            "scan_closes_over_size"]


def lower_times(name: str, repeats: int) -> dict[str, float]:
    """Median seconds of run_decompositions() per exporter ("gp", "torch"), and the median of
    the per-round ratios ("ratio") where both lower the program."""
    case = next(c for c in CASES if c.name == name)
    programs = {"gp": _export(case)[1]}
    if case.torch_exports:
        torch.manual_seed(0)
        programs["torch"] = torch.export.export(case.make().eval(), case.args, dynamic_shapes=case.dynamic)
    times: dict[str, list[float]] = {key: [] for key in programs}
    for i in range(repeats):
        for key in (list(programs) if i % 2 == 0 else list(reversed(programs))):
            t0 = time.perf_counter()
            programs[key].run_decompositions()
            times[key].append(time.perf_counter() - t0)
    result = {key: statistics.median(found) for key, found in times.items()}
    if "torch" in times:
        result["ratio"] = statistics.median(g / t for g, t in zip(times["gp"], times["torch"]))
    return result


def render(rows: list[tuple[str, dict]], repeats: int) -> str:
    lines = ["## run_decompositions on control flow with received sizes", "", harness.stamp(), "",
             "`ep.run_decompositions()` (Core ATen) on the control-flow corpus programs whose branches or loop "
             "bodies compute with sizes they receive, dynamic shapes: both exporters export once (untimed), then "
             f"lower in alternation, {repeats} rounds, in this one process; seconds are medians of the rounds, "
             "the ratio the median of the per-round ratios.", "",
             "| program | graphport s | torch.export s | graphport / torch.export |", "|---|---|---|---|"]
    for name, r in rows:
        theirs = f"{r['torch']:.4f}" if "torch" in r else "- (torch.export refuses the program)"
        ratio = f"{r['ratio']:.3f}" if "ratio" in r else "-"
        lines.append(f"| {name} | {r['gp']:.4f} | {theirs} | {ratio} |")
    ratios = [r["ratio"] for _, r in rows if "ratio" in r]
    lines += ["", f"- median ratio over the {len(ratios)} programs both lower: {statistics.median(ratios):.3f}."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md as it is")
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for name in PROGRAMS:
        lower_times(name, 1)   # one-time costs (the default table, torch's first lowering) out of the figures
        rows.append((name, lower_times(name, opts.repeats)))
        print(name, rows[-1][1], flush=True)
    body = render(rows, opts.repeats)
    print(body)
    if not opts.no_write:
        harness.write_section(harness.RESULTS_MD, "run-decompositions-control-flow", body, "Benchmark results")


if __name__ == "__main__":
    main()

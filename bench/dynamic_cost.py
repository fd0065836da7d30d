"""Dynamic export against static export, for each way users write a dynamic_shapes spec.

Why this script: a dynamic dim whose range reaches 0 or 1 makes graphport prove the program
at those sizes (passes/small_sizes.py, capture/local_proofs.py), and that proof may trace the
model again. The zoo's own specs start at 1 or 2; users write `Dim("b", max=512)` first. Each
model's spec is rewritten in every style below and exported side by side with the static
export in one process, rounds interleaved; the figure is the median over the rounds after a
warm-up one, in CPU time of the process (`time.process_time`: on a shared machine, waiting for
a core is not counted). "traces" counts how many times the export traced the model (the capture plus
the small-size proofs' re-traces), read from graphport's own debug line on the
`graphport.shapes` logger.

Styles (a zoo minimum above 2, such as an image side of 64 the architecture needs, is kept):
  name      Dim(name): from 0, no maximum        max      Dim(name, max=...): from 0
  min1      Dim(name, min=1, max=...)             min2     Dim(name, min=2, max=...)
  auto      Dim.AUTO                              dynamic  Dim.DYNAMIC
  derived   2 * Dim(name_half, max=max // 2): every dim a derived one

Models: the zoo (bench/zoo.py) and, with `real:` prefixed names, real sizes (a 12-layer
BERT-base, GPT-2 124M; bench/real_sizes.py). Results accumulate in bench/dynamic_cost.json
by model, so a run can take a subset; the section is rendered from every model measured
(`--models ''` renders it again without measuring).

    PYTHONPATH=src python bench/dynamic_cost.py [--models bert,gpt2,real:bert_base] [--styles max,auto]
                                                [--repeats 3] [--threads 1] [--no-write]
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import graphport as gp  # noqa: E402
from bench import harness, zoo  # noqa: E402

STYLES = ("name", "max", "min1", "min2", "auto", "dynamic", "derived")
DEFAULT_MODELS = ("bert", "distilbert", "gpt2", "llama", "t5", "vit", "whisper_encoder", "resnet50", "mlp",
                  "real:bert_base", "real:gpt2_124m")
TARGET, WORST = 1.5, 2.5
RESULTS_JSON = Path(__file__).resolve().parent / "dynamic_cost.json"


def style_dim(style: str) -> Callable[..., Any]:
    """A Dim factory (name, min=, max=) -> the spec entry the style writes for that dim."""
    def make(name: str, min: int | None = None, max: int | None = None) -> Any:
        kept_min = min if min is not None and min > 2 else None   # the architecture's own minimum
        if style == "auto":
            return gp.Dim.AUTO
        if style == "dynamic":
            return gp.Dim.DYNAMIC
        if style == "name":
            return gp.Dim(name, **({"min": kept_min} if kept_min else {}))
        if style == "derived":
            half = gp.Dim(f"{name}_half", min=(kept_min + 1) // 2 if kept_min else 0,
                          **({"max": max // 2} if max else {}))
            return 2 * half
        least = {"max": kept_min, "min1": kept_min or 1, "min2": kept_min or 2}[style]
        return gp.Dim(name, **({"min": least} if least is not None else {}), **({"max": max} if max else {}))
    return make


class TraceCount(logging.Handler):
    """The number of traces graphport's last export reported on `graphport.shapes`."""

    PATTERN = re.compile(r"traced the program (\d+) times")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        found = self.PATTERN.search(record.getMessage())
        if found:
            self.last = int(found.group(1))


def _zoo_model(name: str) -> tuple[torch.nn.Module, tuple, dict, Callable]:
    built = zoo.ALL_MODELS[name].build()
    args, kwargs = built.example_inputs()
    return built.module, args, kwargs, built.dynamic_shapes


def _real_model(name: str) -> tuple[torch.nn.Module, tuple, dict, Callable]:
    from bench import real_sizes
    torch.manual_seed(0)
    model = real_sizes.MODELS[name][0]("cpu")
    model.module.eval()
    args, kwargs = model.inputs
    return model.module, args, kwargs, model.dynamic_shapes


def measure(name: str, styles: list[str], repeats: int, counter: TraceCount) -> dict[str, Any]:
    module, args, kwargs, spec_of = _real_model(name[5:]) if name.startswith("real:") else _zoo_model(name)
    times: dict[str, list[float]] = {s: [] for s in ["static", *styles]}
    traces: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    for round_ in range(repeats + 1):
        for style in ["static", *styles]:
            if style in errors:
                continue
            try:
                spec = None if style == "static" else spec_of(harness.DimFactory(style_dim(style)))
                counter.last = None
                start = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with torch.no_grad():
                        gp.export(module, args, kwargs, dynamic_shapes=spec)
                elapsed = time.process_time() - start
            except Exception as e:   # a style the model's spec cannot take, or a refusal: reported as such
                errors[style] = f"{type(e).__name__}: {harness.first_line(str(e))[:100]}"
                continue
            if round_:
                times[style].append(elapsed)
            traces[style] = 1 if style == "static" else counter.last
    static = statistics.median(times["static"])
    row: dict[str, Any] = {"model": name, "static_s": static, "styles": {}}
    for style in styles:
        if style in errors:
            row["styles"][style] = {"error": errors[style]}
        else:
            t = statistics.median(times[style])
            row["styles"][style] = {"seconds": t, "ratio": t / static, "traces": traces.get(style)}
    return row


def render(rows: dict[str, dict[str, Any]], styles: list[str], repeats: int) -> str:
    lines = [harness.stamp(), "",
             f"Dynamic export time / static export time (CPU time), same process, rounds interleaved, median of {repeats} "
             f"after a warm-up; in brackets the traces per export (1: the capture alone). Target: median "
             f"<= {TARGET}x for each style, no model over {WORST}x. `real:` models at published sizes.", "",
             "| model | static s | " + " | ".join(styles) + " |",
             "|---|---|" + "---|" * len(styles)]
    for name, row in rows.items():
        cells = []
        for style in styles:
            found = row["styles"].get(style)
            if found is None:
                cells.append("")
            elif "error" in found:
                cells.append(f"refused ({found['error'].split(':')[0]})")
            else:
                cells.append(f"{found['ratio']:.2f}x [{found['traces']}]")
        lines.append(f"| {name} | {row['static_s']:.3f} | " + " | ".join(cells) + " |")
    medians, worst = [], []
    for style in styles:
        ratios = [r["styles"][style]["ratio"] for r in rows.values() if "ratio" in r["styles"].get(style, {})]
        medians.append(f"{statistics.median(ratios):.2f}x" if ratios else "-")
        worst.append(f"{max(ratios):.2f}x" if ratios else "-")
    lines.append("| **median** | | " + " | ".join(medians) + " |")
    lines.append("| **worst** | | " + " | ".join(worst) + " |")
    commands = sorted({row.get("command", "") for row in rows.values()} - {""})
    lines += ["", "Rows measured by (each run kept under 3 minutes; rows kept in bench/dynamic_cost.json):", "",
              *[f"- `{c}`" for c in commands]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--styles", default=",".join(STYLES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch's intra-op threads (1 on a loaded machine: idle threads spinning count as CPU time)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md and the json alone")
    opts = parser.parse_args()
    styles = [s for s in opts.styles.split(",") if s]
    if opts.threads:
        torch.set_num_threads(opts.threads)
    shapes_log = logging.getLogger("graphport.shapes")
    counter = TraceCount()
    shapes_log.addHandler(counter)
    saved_level = shapes_log.level
    shapes_log.setLevel(logging.DEBUG)
    shapes_log.propagate = False
    rows = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() and not opts.no_write else {}
    try:
        for name in [m for m in opts.models.split(",") if m]:
            start = time.perf_counter()
            row = measure(name, styles, opts.repeats, counter)
            row["command"] = harness.command_line()
            previous = rows.get(name, {}).get("styles", {})
            row["styles"] = {**previous, **row["styles"]}
            rows[name] = row
            cells = ", ".join(f"{s} {v['ratio']:.2f}x/{v['traces']}" if "ratio" in v else f"{s} {v['error'][:40]}"
                              for s, v in row["styles"].items() if s in styles)
            print(f"{name}: static {row['static_s'] * 1e3:.0f} ms; {cells} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
    finally:
        shapes_log.removeHandler(counter)
        shapes_log.setLevel(saved_level)
        shapes_log.propagate = True
    body = render(rows, list(STYLES), opts.repeats)
    print(body)
    if not opts.no_write:
        RESULTS_JSON.write_text(json.dumps(rows, indent=1) + "\n")
        harness.write_section(harness.RESULTS_MD, "dynamic-cost", body, "Benchmark results")


if __name__ == "__main__":
    main()

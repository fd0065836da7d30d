"""Export speed: graphport against torch.export and against a plain meta-tensor forward.

Models: a slice of the zoo plus the project's examples (examples/models.py), if present.

The meta forward runs the model's Python code on shape-only tensors: the cheapest trace any
exporter could do. Targets (medians over models): graphport <= 0.2x torch.export's time
and <= 3x the meta forward; with the model's natural dynamic dims, graphport's dynamic
export <= 1.5x its static export and <= 0.2x torch.export's dynamic export. Each model runs
in its own process; inside it the measurements alternate round by round so machine drift
hits all of them alike.

    .venv/bin/python bench/export_speed.py [--models bert,gpt2] [--repeats 5]

Writes the "export-speed" section of bench/RESULTS.md and bench/export_speed.csv.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness  # noqa: E402
from bench.harness import OK, fmt, median  # noqa: E402

MODELS = ("mlp", "lstm", "bert", "gpt2", "llama", "t5", "vit", "resnet50")
CSV_PATH = harness.REPO_ROOT / "bench" / "export_speed.csv"
TARGET_VS_TORCH, TARGET_VS_META, TARGET_DYN_VS_STATIC = 0.2, 3.0, 1.5
COLUMNS = ["model", "process", "gp_s", "torch_s", "meta_s", "gp_over_torch", "gp_over_meta", "gp_dyn_s",
           "torch_dyn_s", "gp_dyn_over_static", "gp_dyn_over_torch_dyn", "error"]


def example_models() -> list[str]:
    """The project's own examples (examples/models.py classes with `example_inputs`), if present."""
    path = harness.REPO_ROOT / "examples" / "models.py"
    if not path.exists():
        return []
    module = _load_examples(path)
    return [f"examples.{name}" for name, obj in vars(module).items()
            if isinstance(obj, type) and hasattr(obj, "example_inputs") and obj.__module__ == module.__name__]


def _load_examples(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("graphport_examples_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(name: str) -> Any:
    """A zoo model, or `examples.<Class>` from examples/models.py, as a zoo.Built."""
    from bench import zoo

    if not name.startswith("examples."):
        return zoo.MODELS[name].build()
    torch.manual_seed(0)
    model = getattr(_load_examples(harness.REPO_ROOT / "examples" / "models.py"), name.split(".", 1)[1])().eval()
    return zoo.Built(model, lambda: (model.example_inputs(), {}), {}, {}, lambda dim: None)


def measure_model(name: str, repeats: int) -> dict[str, Any]:
    from bench import measure

    built = build(name)
    measure.warm_up_exporters()
    export, import_err = measure.graphport_exporter()
    row: dict[str, Any] = {"model": name, "error": ""}
    times: dict[str, list[float]] = {"gp": [], "torch": [], "meta": [], "gp_dyn": [], "torch_dyn": []}
    steps = {
        "gp": lambda a, k: export(built.module, a, k),
        "torch": lambda a, k: measure.torch_exporter(built.module, a, k),
        "meta": lambda a, k: measure.meta_forward_seconds(built, repeats=1),
    }
    gp_spec = measure.dynamic_spec(built, "graphport") if export is not None else None
    if gp_spec is not None:   # a model with dynamic dims (derived ones included: the spec does arithmetic on Dims)
        torch_spec = measure.dynamic_spec(built, "torch")
        steps["gp_dyn"] = lambda a, k: export(built.module, a, k, dynamic_shapes=gp_spec)
        steps["torch_dyn"] = lambda a, k: measure.torch_exporter(built.module, a, k, dynamic_shapes=torch_spec)
    if export is None:
        row["error"] = f"graphport: {import_err}"
        del steps["gp"]
    for _ in range(repeats + 1):  # the first round is a warm-up of this model's code paths
        for key, step in list(steps.items()):
            args, kwargs = built.example_inputs()
            t0 = time.perf_counter()
            try:
                if key == "meta":
                    seconds, error = step(args, kwargs)
                    if error:
                        raise RuntimeError(error)
                else:
                    step(args, kwargs)
                    seconds = time.perf_counter() - t0
            except Exception as exc:
                row["error"] += f"{key}: {type(exc).__name__}: {harness.first_line(str(exc))}; "
                del steps[key]
                continue
            times[key].append(seconds)
    for key, values in times.items():
        row[f"{key}_s"] = statistics.median(values[1:]) if len(values) > 1 else None
    row["gp_over_torch"] = row["gp_s"] / row["torch_s"] if row["gp_s"] and row["torch_s"] else None
    row["gp_over_meta"] = row["gp_s"] / row["meta_s"] if row["gp_s"] and row["meta_s"] else None
    row["gp_dyn_over_static"] = row["gp_dyn_s"] / row["gp_s"] if row["gp_dyn_s"] and row["gp_s"] else None
    row["gp_dyn_over_torch_dyn"] = (row["gp_dyn_s"] / row["torch_dyn_s"]
                                    if row["gp_dyn_s"] and row["torch_dyn_s"] else None)
    return row


def render(rows: list[dict[str, Any]], repeats: int) -> str:
    lines = ["| model | graphport s | torch.export s | meta forward s | graphport / torch.export | "
             "graphport / meta forward | graphport dynamic s | torch.export dynamic s | graphport dynamic / static "
             "| graphport dynamic / torch.export dynamic | notes |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        note = r.get("error") or ("" if r["process"] == OK else f"worker {r['process']}")
        lines.append(f"| {r['model']} | {fmt(r.get('gp_s'))} | {fmt(r.get('torch_s'))} | {fmt(r.get('meta_s'))} | "
                     f"{fmt(r.get('gp_over_torch'))} | {fmt(r.get('gp_over_meta'))} | {fmt(r.get('gp_dyn_s'))} | "
                     f"{fmt(r.get('torch_dyn_s'))} | {fmt(r.get('gp_dyn_over_static'))} | "
                     f"{fmt(r.get('gp_dyn_over_torch_dyn'))} | {note.replace('|', '/')} |")
    vs_torch = median([r.get("gp_over_torch") for r in rows])
    vs_meta = median([r.get("gp_over_meta") for r in rows])
    dyn_vs_static = median([r.get("gp_dyn_over_static") for r in rows])
    dyn_vs_torch = median([r.get("gp_dyn_over_torch_dyn") for r in rows])

    def verdict(value: float | None, target: float) -> str:
        return "no data" if value is None else ("meets" if value <= target else "misses")

    measured = sum(r.get("gp_over_torch") is not None for r in rows)
    summary = (f"- median graphport / torch.export: **{fmt(vs_torch)}** over {measured}/{len(rows)} models "
               f"(target <= {TARGET_VS_TORCH}: {verdict(vs_torch, TARGET_VS_TORCH)})\n"
               f"- median graphport / meta forward: **{fmt(vs_meta)}** "
               f"(target <= {TARGET_VS_META}: {verdict(vs_meta, TARGET_VS_META)})\n"
               f"- median graphport dynamic / graphport static: **{fmt(dyn_vs_static)}** "
               f"(target <= {TARGET_DYN_VS_STATIC}: {verdict(dyn_vs_static, TARGET_DYN_VS_STATIC)})\n"
               f"- median graphport dynamic / torch.export dynamic: **{fmt(dyn_vs_torch)}** "
               f"(target <= {TARGET_VS_TORCH}: {verdict(dyn_vs_torch, TARGET_VS_TORCH)})")
    return "\n\n".join([
        "## Export speed",
        harness.stamp() + "  \nCSV: `bench/export_speed.csv`",
        f"Each figure is the median of {repeats} exports (or meta forwards) after one warm-up round, "
        "alternating the measurements, one process per model; dynamic exports use the zoo's dynamic dims.",
        "\n".join(lines),
        "Summary:\n\n" + summary,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated zoo model names (default: a zoo slice and the examples)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0, help="per-model time limit, seconds")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT_JSON"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    torch.set_num_threads(1)  # stable timings on a shared 2-core machine
    if opts.worker:
        name, out = opts.worker
        Path(out).write_text(json.dumps(measure_model(name, opts.repeats)))
        return
    from tqdm import tqdm

    rows = []
    out = harness.REPO_ROOT / "bench" / "out" / "export_speed_worker.json"
    out.parent.mkdir(exist_ok=True)
    names = opts.models.split(",") if opts.models else [*MODELS, *example_models()]
    bar = tqdm(names, unit="model", file=sys.stderr)
    for name in bar:
        bar.set_description(f"export speed: {name}")
        argv = [sys.executable, __file__, "--repeats", str(opts.repeats), "--worker", name, str(out)]
        row = harness.run_isolated(argv, opts.timeout)
        row.setdefault("model", name)
        rows.append(row)
    with CSV_PATH.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    harness.write_section(harness.RESULTS_MD, "export-speed", render(rows, opts.repeats), "Benchmark results")
    print(render(rows, opts.repeats).split("Summary:")[1])


if __name__ == "__main__":
    main()

"""Model-zoo benchmark: graphport and torch.export side by side on every zoo model.

Each model runs in a fresh worker process with a time limit, so a crash, hang or memory
blow-up in one model is a row in the table, never the end of the run. Within a worker
both exporters see freshly built, identically seeded models, after a warm-up export of
each so one-time import costs are not charged to the first model.
torch.export runs before graphport, so it cannot inherit state a graphport bug leaves behind.

    .venv/bin/python bench/run_zoo.py [--models bert,gpt2] [--timeout 300]

Writes the "model-zoo" section of bench/RESULTS.md and bench/zoo_results.csv.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402

from bench import harness  # noqa: E402
from bench.harness import OK, fmt, median  # noqa: E402

CSV_PATH = harness.REPO_ROOT / "bench" / "zoo_results.csv"
LATENCY_REPEATS = 10
COLUMNS = [
    "model", "family", "params_m", "process",
    "gp_static", "torch_static", "gp_dynamic", "torch_dynamic",
    "gp_export_s", "torch_export_s", "gp_over_torch", "meta_forward_s", "gp_over_meta",
    "gp_dyn_export_s", "torch_dyn_export_s",
    "eager_ms", "gp_run_ms", "gp_latency_ratio", "torch_run_ms", "torch_latency_ratio",
    "gp_rss_mib", "torch_rss_mib", "gp_nodes", "torch_nodes",
    "gp_max_abs_diff", "gp_dyn_max_abs_diff", "torch_max_abs_diff",
    "gp_static_error_type", "gp_static_error", "gp_dynamic_error_type", "gp_dynamic_error",
    "torch_static_error_type", "torch_static_error", "torch_dynamic_error_type", "torch_dynamic_error",
    "meta_forward_error",
]


def measure_model(name: str) -> dict[str, Any]:
    """Everything for one model, measured in this (fresh) process."""
    from bench import measure, zoo

    entry = zoo.MODELS[name]
    built = entry.build()
    run = not entry.meta
    row: dict[str, Any] = {"model": name, "family": entry.family,
                           "params_m": sum(p.numel() for p in built.module.parameters()) / 1e6}
    measure.warm_up_exporters()
    row["meta_forward_s"], row["meta_forward_error"] = measure.meta_forward_seconds(built)
    if run:
        row["eager_ms"] = measure.eager_ms(built, LATENCY_REPEATS)
    for exporter, prefix in (("torch", "torch"), ("graphport", "gp")):
        for dynamic in (False, True):
            try:
                rec = measure.attempt(exporter, entry.build(), dynamic, run,
                                      latency_repeats=0 if dynamic else LATENCY_REPEATS)
            except Exception as exc:  # one broken attempt must not cost the model's whole row
                rec = {**measure.empty_record(), "status": harness.CRASH, "error_type": type(exc).__name__,
                       "error": f"harness: {harness.first_line(str(exc))}"}
            kind = "dynamic" if dynamic else "static"
            row[f"{prefix}_{kind}"] = rec["status"]
            row[f"{prefix}_{kind}_error_type"] = rec["error_type"]
            row[f"{prefix}_{kind}_error"] = rec["error"]
            if dynamic:
                row[f"{prefix}_dyn_export_s"] = rec["export_s"]
                if exporter == "graphport":
                    row["gp_dyn_max_abs_diff"] = rec["max_abs_diff"]
            else:
                row.update({f"{prefix}_export_s": rec["export_s"], f"{prefix}_rss_mib": rec["rss_mib"],
                            f"{prefix}_nodes": rec["nodes"], f"{prefix}_run_ms": rec["run_ms"],
                            f"{prefix}_max_abs_diff": rec["max_abs_diff"]})
    row["gp_over_torch"] = _ratio(row.get("gp_export_s"), row.get("torch_export_s"))
    row["gp_over_meta"] = _ratio(row.get("gp_export_s"), row.get("meta_forward_s"))
    row["gp_latency_ratio"] = _ratio(row.get("gp_run_ms"), row.get("eager_ms"))
    row["torch_latency_ratio"] = _ratio(row.get("torch_run_ms"), row.get("eager_ms"))
    return row


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def run_all(names: list[str], timeout: float) -> list[dict[str, Any]]:
    from tqdm import tqdm

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bar = tqdm(names, unit="model", file=sys.stderr)
        for name in bar:
            bar.set_description(f"zoo: {name}")
            out = Path(tmp) / f"{name}.json"
            result = harness.run_isolated([sys.executable, __file__, "--worker", name, str(out)], timeout)
            result.setdefault("model", name)
            if result["process"] != OK:
                bar.write(f"{name}: worker {result['process']}\n{result.get('log_tail', '')[-600:]}")
            rows.append(result)
    return rows


def write_csv(rows: list[dict[str, Any]]) -> None:
    with CSV_PATH.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _status(row: dict[str, Any], key: str) -> str:
    """A table cell: ok, or the failure kind and error type; a dead worker shows its fate."""
    if row["process"] != OK:
        return row["process"]
    status, error_type = row.get(key), row.get(f"{key}_error_type", "")
    return f"{status}: {error_type}" if status != OK and error_type else str(status)


def render(rows: list[dict[str, Any]]) -> str:
    header = ["model", "params (M)", "gp static", "torch static", "gp dynamic", "torch dynamic",
              "gp export s", "torch export s", "gp/torch", "meta fwd s", "gp/meta",
              "eager ms", "gp run / eager", "torch run / eager", "gp +RSS MiB", "torch +RSS MiB",
              "gp nodes", "torch nodes", "gp max diff", "gp dyn max diff"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["model"], fmt(r.get("params_m")), _status(r, "gp_static"), _status(r, "torch_static"),
                 _status(r, "gp_dynamic"), _status(r, "torch_dynamic"), fmt(r.get("gp_export_s")),
                 fmt(r.get("torch_export_s")), fmt(r.get("gp_over_torch")), fmt(r.get("meta_forward_s")),
                 fmt(r.get("gp_over_meta")), fmt(r.get("eager_ms")), fmt(r.get("gp_latency_ratio")),
                 fmt(r.get("torch_latency_ratio")), fmt(r.get("gp_rss_mib")), fmt(r.get("torch_rss_mib")),
                 fmt(r.get("gp_nodes")), fmt(r.get("torch_nodes")), fmt(r.get("gp_max_abs_diff")),
                 fmt(r.get("gp_dyn_max_abs_diff"))]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    n = len(rows)

    def count(key: str) -> str:
        return f"{sum(r.get(key) == OK for r in rows)}/{n}"

    def med(key: str) -> str:
        return fmt(median([r.get(key) for r in rows]))

    return "\n".join([
        f"- export ok (exported, verified, matched eager): graphport static {count('gp_static')}, "
        f"torch.export static {count('torch_static')}; graphport dynamic {count('gp_dynamic')}, "
        f"torch.export dynamic {count('torch_dynamic')}",
        f"- median export time ratio graphport / torch.export: {med('gp_over_torch')} "
        f"(graphport {med('gp_export_s')} s, torch.export {med('torch_export_s')} s)",
        f"- median export time ratio graphport / meta forward: {med('gp_over_meta')} "
        f"(meta forward {med('meta_forward_s')} s)",
        f"- median `ep.module()` latency / eager: graphport {med('gp_latency_ratio')}, "
        f"torch.export {med('torch_latency_ratio')}",
        f"- median peak RSS increase during export: graphport {med('gp_rss_mib')} MiB, "
        f"torch.export {med('torch_rss_mib')} MiB",
        f"- median node count: graphport {med('gp_nodes')}, torch.export {med('torch_nodes')}",
        f"- median max abs difference against eager: graphport {med('gp_max_abs_diff')}, "
        f"torch.export {med('torch_max_abs_diff')}",
    ])


def failures(rows: list[dict[str, Any]]) -> str:
    """Every non-ok cell with its message, identical failures grouped into one line."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        if r["process"] != OK:
            groups.setdefault(f"worker {r['process']}", []).append(r["model"])
            continue
        for key in ("gp_static", "gp_dynamic", "torch_static", "torch_dynamic"):
            if r.get(key) != OK:
                what = f"{key.replace('_', ' ')}: {_status(r, key)}: {r.get(key + '_error', '')}"
                groups.setdefault(what, []).append(r["model"])
    lines = [f"- {what} ({', '.join(f'`{m}`' for m in models)})" for what, models in groups.items()]
    return "\n".join(lines) or "- none"


def main() -> None:
    from bench import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated subset of: " + ",".join(zoo.MODELS))
    parser.add_argument("--timeout", type=float, default=300.0, help="per-model time limit, seconds")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT_JSON"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    torch.set_num_threads(1)  # stable timings on a shared 2-core machine; inherited by the record
    if opts.worker:
        name, out = opts.worker
        Path(out).write_text(json.dumps(measure_model(name)))
        return
    names = opts.models.split(",") if opts.models else list(zoo.MODELS)
    rows = run_all(names, opts.timeout)
    write_csv(rows)
    body = "\n\n".join([
        "## Model zoo",
        harness.stamp() + f"  \nper-model time limit {opts.timeout:g} s; CSV: `bench/zoo_results.csv`",
        "Status: `ok` = exported, verified and matched eager (dynamic: also at a second in-range shape); "
        "`error` = a user-facing exporter error; `crash` = an internal error (a bug); `wrong` = exported but "
        "failed the verifier or the comparison; `unsupported` = no dynamic-shape API yet. Times are one "
        "export after a warm-up export of a tiny model; the meta forward is the median of 3; latencies are "
        f"medians of {LATENCY_REPEATS} runs under `torch.no_grad()`; +RSS is the peak resident-memory increase "
        "while exporting; nodes are `call_function` nodes.",
        render(rows),
        "Summary:\n\n" + summary(rows),
        "Failures:\n\n" + failures(rows),
    ])
    harness.write_section(harness.RESULTS_MD, "model-zoo", body, "Benchmark results")
    print(summary(rows))


if __name__ == "__main__":
    main()

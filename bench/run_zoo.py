"""Model-zoo benchmark: graphport and torch.export side by side on every zoo model.

Each model runs in a fresh worker process with a time limit, so a crash, hang or memory
blow-up in one model is a row in the table, never the end of the run. Within a worker
both exporters see freshly built, identically seeded models, after a warm-up export of
each so one-time import costs are not charged to the first model.
torch.export runs before graphport, so it cannot inherit state a graphport bug leaves behind.

    .venv/bin/python bench/run_zoo.py [--models bert,gpt2] [--timeout 300]
    .venv/bin/python bench/run_zoo.py --models families --keep /tmp/zoo-rows [--timeout 600]

Writes the "model-zoo" section of bench/RESULTS.md and bench/zoo_results.csv; with
`--models families`, the "model-zoo-families" section and bench/zoo_results_model-zoo-families.csv.
A long run can be made in parts: run some models with `--keep DIR --no-write` (in the background),
then the full command with the same `--keep DIR` measures only what is missing and writes the table.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import importlib
import json
import sys
from unittest import mock
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
    "gp_dyn_export_s", "torch_dyn_export_s", "gp_dyn_over_static", "gp_retraces",
    "batch_dim", "gp_batch1", "gp_batch1_error", "gp_batch1_max_abs_diff", "gp_batch_valid_from",
    "gp_batch_reason", "gp_shape_report", "torch_batch1", "torch_batch1_error", "torch_batch1_max_abs_diff",
    "gp_sizes", "gp_sizes_error", "torch_sizes", "torch_sizes_error",
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

    entry = zoo.ALL_MODELS[name]
    built = entry.build()
    run = not entry.meta
    row: dict[str, Any] = {"model": name, "family": entry.family,
                           "params_m": sum(p.numel() for p in built.module.parameters()) / 1e6}
    measure.warm_up_exporters()
    row["meta_forward_s"], row["meta_forward_error"] = measure.meta_forward_seconds(built)
    if run:
        row["eager_ms"] = measure.eager_ms(built, LATENCY_REPEATS)
    batch = batch_dim(built)
    row["batch_dim"] = batch["cell"]
    for exporter, prefix in (("torch", "torch"), ("graphport", "gp")):
        for dynamic in (False, True):
            attempt_built = entry.build()
            with captured_programs(measure) as captured:
                try:
                    rec = measure.attempt(exporter, attempt_built, dynamic, run,
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
                    row["gp_retraces"] = captured["retraces"]
                    row.update(small_size_contract(captured["ep"], batch["name"]))
                row.update(at_batch_one(prefix, exporter, captured["ep"], attempt_built, batch, entry.meta))
                row.update(at_sizes(prefix, exporter, captured["ep"], attempt_built, entry.meta))
            else:
                row.update({f"{prefix}_export_s": rec["export_s"], f"{prefix}_rss_mib": rec["rss_mib"],
                            f"{prefix}_nodes": rec["nodes"], f"{prefix}_run_ms": rec["run_ms"],
                            f"{prefix}_max_abs_diff": rec["max_abs_diff"]})
    row["gp_dyn_over_static"] = _ratio(row.get("gp_dyn_export_s"), row.get("gp_export_s"))
    row["gp_over_torch"] = _ratio(row.get("gp_export_s"), row.get("torch_export_s"))
    row["gp_over_meta"] = _ratio(row.get("gp_export_s"), row.get("meta_forward_s"))
    row["gp_latency_ratio"] = _ratio(row.get("gp_run_ms"), row.get("eager_ms"))
    row["torch_latency_ratio"] = _ratio(row.get("torch_run_ms"), row.get("eager_ms"))
    return row


# --- Dynamic programs at batch 1 -------------------------------------------------------------
# A program exported with a batch Dim whose range includes 1 must, at batch 1, either run and
# match eager or have been refused at export time; a refusal at call time inside the declared
# range is a completeness gap, a different result a soundness bug.

BATCH1_OK, BATCH1_WRONG, BATCH1_REFUSED, BATCH1_ERROR = "ok", "wrong", "refused-call", "error"
BATCH1_NA = "n/a"


def batch_dim(built: Any) -> dict[str, Any]:
    """The model's batch Dim (the spec's Dim named like "batch"): name, range, the inputs'
    axes it sizes, and a table cell; name None when the spec has none or it cannot be set."""
    made: dict[str, Any] = {}

    def make(name: str, min: int | None = None, max: int | None = None) -> Any:
        made[name] = harness.torch_dim(name, min=min, max=max)
        return made[name]

    try:
        spec = built.dynamic_shapes(harness.DimFactory(make))
    except Exception as exc:
        return {"name": None, "cell": f"n/a (spec: {type(exc).__name__})"}
    names = [n for n in made if "batch" in n.lower()]
    if not names or "batch" not in built.sizes:
        return {"name": None, "cell": "n/a"}
    name = names[0]
    axes: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, torch.export.Dim) and getattr(node, "__name__", None) == name:
            axes.append(path)
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.shape[{k}]" if isinstance(k, int) else f"{path}{k}")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]" if path else f"args[{i}]")

    walk(spec, "")
    lo, hi = made[name].min, made[name].max
    return {"name": name, "min": lo, "max": hi,
            "cell": f"{name} [{lo}, {hi}]: " + ", ".join(axes)}


@contextlib.contextmanager
def captured_programs(measure: Any):
    """Keep the program `measure.attempt` exports, and count graphport's pinned small-size traces.

    The retrace count is `SmallSizeReport.traces`, which the ExportedProgram does not carry;
    it is read by wrapping `graphport.export.prove_small_sizes` (None if that is gone).
    """
    store: dict[str, Any] = {"ep": None, "retraces": None}
    orig_torch, orig_gp = measure.torch_exporter, measure.graphport_exporter

    def torch_exporter(*args: Any, **kwargs: Any) -> Any:
        store["ep"] = orig_torch(*args, **kwargs)
        return store["ep"]

    def graphport_exporter() -> tuple[Any, Any]:
        export, err = orig_gp()
        if export is None:
            return export, err

        def keep(*args: Any, **kwargs: Any) -> Any:
            store["ep"] = export(*args, **kwargs)
            return store["ep"]
        return keep, err

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(measure, "torch_exporter", torch_exporter))
        stack.enter_context(mock.patch.object(measure, "graphport_exporter", graphport_exporter))
        try:
            gp_export_module = importlib.import_module("graphport.export")
            prove = gp_export_module.prove_small_sizes
        except Exception:
            prove = None
        if prove is not None:
            def counted(*args: Any, **kwargs: Any) -> Any:
                report = prove(*args, **kwargs)
                store["retraces"] = (store["retraces"] or 0) + getattr(report, "traces", 0)
                return report
            stack.enter_context(mock.patch.object(gp_export_module, "prove_small_sizes", counted))
            store["retraces"] = 0
        yield store
    if store["ep"] is None:
        store["retraces"] = None


def small_size_contract(ep: Any, batch: str | None) -> dict[str, Any]:
    """graphport's own account of the batch Dim's small sizes: valid_from, reason, shape_report."""
    out: dict[str, Any] = {"gp_batch_valid_from": None, "gp_batch_reason": "", "gp_shape_report": ""}
    if ep is None:
        return out
    out["gp_shape_report"] = " | ".join(map(str, getattr(ep, "shape_report", []) or []))
    contract = getattr(ep, "shape_contract", None)
    for fact in (getattr(contract, "symbols", {}) or {}).values():
        if batch is not None and fact.name == batch:
            out["gp_batch_valid_from"], out["gp_batch_reason"] = fact.valid_from, fact.reason
    return out


def at_batch_one(prefix: str, exporter: str, ep: Any, built: Any, batch: dict[str, Any], meta: bool) -> dict[str, Any]:
    """Call the dynamic program with the batch Dim at 1 (other sizes at the example) and judge it
    against eager: ok, wrong, refused-call, error; n/a without a batch Dim, a program, or 1 in range."""
    keys = (f"{prefix}_batch1", f"{prefix}_batch1_error", f"{prefix}_batch1_max_abs_diff")

    def result(status: str, error: str = "", diff: float | None = None) -> dict[str, Any]:
        return dict(zip(keys, (status, error, diff)))

    if batch["name"] is None:
        return result(BATCH1_NA, "no batch Dim in the spec")
    if ep is None:
        return result(BATCH1_NA, "no dynamic program")
    if batch["min"] > 1:
        return result(BATCH1_NA, f"batch Dim min {batch['min']}")
    return result(*judged_call(exporter, ep, built, {**built.sizes, "batch": 1}, meta))


def judged_call(exporter: str, ep: Any, built: Any, sizes: dict[str, int], meta: bool = False
                ) -> tuple[str, str, float | None]:
    """Call the program at `sizes` and judge it against eager: (status, error, max abs diff)."""

    def result(status: str, error: str = "", diff: float | None = None) -> tuple[str, str, float | None]:
        return status, error, diff

    args, kwargs = built.make_inputs(**sizes)
    # A meta model never runs real kernels: compare output shapes with its meta forward instead.
    patches = (mock.patch("torch.compiler.is_compiling", return_value=True),
               mock.patch("torch.compiler.is_exporting", return_value=True)) if meta else ()
    try:
        with torch.no_grad(), contextlib.ExitStack() as stack:
            for p in patches:
                stack.enter_context(p)
            eager = copy.deepcopy(built.module)   # the module as exported (see measure.check_against_eager)
            expected = eager(*harness.clone_inputs(args), **harness.clone_inputs(kwargs))
    except Exception as exc:
        return result(BATCH1_NA, f"eager fails at {sizes}: {type(exc).__name__}: {harness.first_line(str(exc))}")
    try:
        module = ep.module()
        with torch.no_grad():
            actual = module(*args, **kwargs)
    except Exception as exc:
        status = BATCH1_REFUSED if harness.is_call_refusal(exc, exporter) else BATCH1_ERROR
        return result(status, f"{type(exc).__name__}: {harness.first_line(str(exc), limit=600)}")
    if meta:
        same = _same_shapes(expected, actual)
        return result(BATCH1_OK if not same else BATCH1_WRONG, same)
    ok, diff, reason = harness.compare(expected, actual)
    return result(BATCH1_OK if ok else BATCH1_WRONG, reason, diff)


def at_sizes(prefix: str, exporter: str, ep: Any, built: Any, meta: bool) -> dict[str, Any]:
    """Call the dynamic program at every Dim's smallest size and at the model's other in-range
    points (`Built.smallest_sizes`, `range_sizes`), each judged against eager like batch 1.
    The cell counts the points that ran and matched; the first other outcome is kept with its sizes."""
    keys = (f"{prefix}_sizes", f"{prefix}_sizes_error")
    points = ([built.smallest_sizes] if built.smallest_sizes else []) + list(built.range_sizes)
    if not points:
        return dict(zip(keys, (BATCH1_NA, "no sizes listed")))
    if ep is None:
        return dict(zip(keys, (BATCH1_NA, "no dynamic program")))
    outcomes = [(sizes, judged_call(exporter, ep, built, sizes, meta)) for sizes in points]
    ok = sum(status == BATCH1_OK for _, (status, _, _) in outcomes)
    bad = [(sizes, status, error) for sizes, (status, error, _) in outcomes if status != BATCH1_OK]
    cell = f"{BATCH1_OK} {ok}/{len(points)}"
    if bad:
        kinds = sorted({status for _, status, _ in bad})
        cell += ", " + ", ".join(f"{k} {sum(status == k for _, status, _ in bad)}" for k in kinds)
    error = "; ".join(f"{_sizes_label(sizes)}: {status}: {error}" for sizes, status, error in bad[:2])
    return dict(zip(keys, (cell, error)))


def _sizes_label(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _same_shapes(expected: Any, actual: Any) -> str:
    """'' when two output trees have the same structure, shapes and dtypes; else the difference."""
    import torch.utils._pytree as pytree
    exp, exp_spec = pytree.tree_flatten(expected)
    act, act_spec = pytree.tree_flatten(actual)
    if len(exp) != len(act):
        return f"output structure differs: {exp_spec} vs {act_spec}"
    for e, a in zip(exp, act):
        if isinstance(e, torch.Tensor) and (not isinstance(a, torch.Tensor) or e.shape != a.shape
                                            or e.dtype != a.dtype):
            return f"output {tuple(e.shape)}/{e.dtype} vs {getattr(a, 'shape', a)}"
    return ""


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def run_all(names: list[str], timeout: float, keep: Path | None = None) -> list[dict[str, Any]]:
    """One row per model, each measured in a fresh worker. With `keep`, rows are kept there as
    MODEL.json and a model whose row is there already is not measured again: a long run can be
    made in parts (each its own `--models`, run in the background) and then assembled."""
    from tqdm import tqdm

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bar = tqdm(names, unit="model", file=sys.stderr)
        for name in bar:
            kept = keep / f"{name}.json" if keep is not None else None
            if kept is not None and kept.exists():
                rows.append(json.loads(kept.read_text()))
                continue
            bar.set_description(f"zoo: {name}")
            out = Path(tmp) / f"{name}.json"
            result = harness.run_isolated([sys.executable, __file__, "--worker", name, str(out)], timeout)
            result.setdefault("model", name)
            if result["process"] != OK:
                bar.write(f"{name}: worker {result['process']}\n{result.get('log_tail', '')[-600:]}")
            elif kept is not None:
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_text(json.dumps(result))
            rows.append(result)
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path = CSV_PATH) -> None:
    with path.open("w", newline="") as f:
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
              "gp static export s", "torch export s", "gp/torch", "meta fwd s", "gp/meta",
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


def _batch1_cell(row: dict[str, Any], prefix: str) -> str:
    if row["process"] != OK:
        return row["process"]
    status = row.get(f"{prefix}_batch1") or "-"
    if status == BATCH1_WRONG and row.get(f"{prefix}_batch1_max_abs_diff") is not None:
        return f"wrong (diff {fmt(row[f'{prefix}_batch1_max_abs_diff'])})"
    return status


def _sizes_cell(row: dict[str, Any], prefix: str) -> str:
    return row["process"] if row["process"] != OK else str(row.get(f"{prefix}_sizes") or "-")


def render_batch_one(rows: list[dict[str, Any]]) -> str:
    """Dynamic programs at batch 1, and what dynamic export costs over static."""
    header = ["model", "batch dim (range: axes)", "gp dynamic", "gp batch 1", "torch batch 1", "gp sizes",
              "torch sizes", "gp valid_from",
              "gp static export s", "gp dyn export s", "gp dyn / static", "retraces", "torch dyn export s",
              "gp dyn / torch dyn"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["model"], str(r.get("batch_dim") or "-"), _status(r, "gp_dynamic"), _batch1_cell(r, "gp"),
                 _batch1_cell(r, "torch"), _sizes_cell(r, "gp"), _sizes_cell(r, "torch"),
                 fmt(r.get("gp_batch_valid_from")), fmt(r.get("gp_export_s")),
                 fmt(r.get("gp_dyn_export_s")), fmt(r.get("gp_dyn_over_static")), fmt(r.get("gp_retraces")),
                 fmt(r.get("torch_dyn_export_s")),
                 fmt(_ratio(r.get("gp_dyn_export_s"), r.get("torch_dyn_export_s")))]
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
        f"- batch 1 (dynamic program called at batch 1): graphport {_tally(rows, 'gp_batch1')}; "
        f"torch.export {_tally(rows, 'torch_batch1')}",
        f"- dynamic programs at their smallest sizes and other in-range points, all matching eager: graphport "
        f"{_all_sizes_ok(rows, 'gp_sizes')}, torch.export {_all_sizes_ok(rows, 'torch_sizes')}",
        f"- median graphport dynamic / static export time: {med('gp_dyn_over_static')} "
        f"(dynamic {med('gp_dyn_export_s')} s, static {med('gp_export_s')} s, torch.export dynamic "
        f"{med('torch_dyn_export_s')} s); median pinned small-size retraces per dynamic export: {med('gp_retraces')}",
    ])


def _all_sizes_ok(rows: list[dict[str, Any]], key: str) -> str:
    listed = [r for r in rows if r["process"] != OK or not str(r.get(key) or BATCH1_NA).startswith(BATCH1_NA)
              or r.get(key + "_error") == "no dynamic program"]
    good = sum(1 for r in listed if r["process"] == OK and str(r.get(key, "")).startswith(BATCH1_OK)
               and not r.get(key + "_error"))
    return f"{good}/{len(listed)}"


def _tally(rows: list[dict[str, Any]], key: str) -> str:
    order = [BATCH1_OK, BATCH1_WRONG, BATCH1_REFUSED, BATCH1_ERROR, BATCH1_NA]
    counts: dict[str, int] = {}
    for r in rows:
        status = r.get(key) if r["process"] == OK else r["process"]
        counts[str(status)] = counts.get(str(status), 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
    return ", ".join(f"{status} {n}/{len(rows)}" for status, n in ranked)


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
        for prefix, who in (("gp", "gp"), ("torch", "torch")):
            status = r.get(f"{prefix}_batch1")
            if status not in (BATCH1_OK, BATCH1_NA, None):
                what = f"{who} batch 1: {status}: {r.get(f'{prefix}_batch1_error', '')}"
                groups.setdefault(what, []).append(r["model"])
            sizes = r.get(f"{prefix}_sizes")
            if sizes and not str(sizes).startswith(BATCH1_NA) and r.get(f"{prefix}_sizes_error"):
                what = f"{who} sizes ({sizes}): {r.get(f'{prefix}_sizes_error')}"
                groups.setdefault(what, []).append(r["model"])
    lines = [f"- {what} ({', '.join(f'`{m}`' for m in models)})" for what, models in groups.items()]
    return "\n".join(lines) or "- none"


def main() -> None:
    from bench import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma-separated subset of: " + ",".join(zoo.ALL_MODELS)
                        + " (default: the main zoo, " + ",".join(zoo.MODELS) + "); `families`: "
                        + ",".join(zoo.FAMILIES) + ", written to the model-zoo-families section")
    parser.add_argument("--keep", type=Path, help="folder keeping each model's row (MODEL.json); a model with a "
                        "row there is not measured again, so a run can be made in parts and then assembled")
    parser.add_argument("--no-write", action="store_true", help="measure (and --keep) only: leave RESULTS.md "
                        "and the CSV as they are (for the parts of a run made in pieces)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-model time limit, seconds")
    parser.add_argument("--section", default="model-zoo",
                        help="RESULTS.md section to write (another name keeps the main table; its CSV is "
                             "bench/zoo_results_SECTION.csv)")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT_JSON"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    torch.set_num_threads(1)  # stable timings on a shared 2-core machine; inherited by the record
    if opts.worker:
        name, out = opts.worker
        Path(out).write_text(json.dumps(measure_model(name)))
        return
    if opts.models == "families":
        names, opts.section = list(zoo.FAMILIES), "model-zoo-families"
    else:
        names = opts.models.split(",") if opts.models else list(zoo.MODELS)
    rows = run_all(names, opts.timeout, opts.keep)
    if opts.no_write:
        print(summary(rows))
        return
    csv_path = CSV_PATH if opts.section == "model-zoo" else CSV_PATH.with_name(f"zoo_results_{opts.section}.csv")
    write_csv(rows, csv_path)
    body = "\n\n".join([
        "## Model zoo" + ("" if opts.section == "model-zoo" else f" ({opts.section})"),
        harness.stamp() + f"  \nper-model time limit {opts.timeout:g} s; CSV: `bench/{csv_path.name}`",
        "Status: `ok` = exported, verified and matched eager (dynamic: also at a second in-range shape); "
        "`error` = a user-facing exporter error; `crash` = an internal error (a bug); `wrong` = exported but "
        "failed the verifier or the comparison; `unsupported` = no dynamic-shape API yet. Times are one "
        "export after a warm-up export of a tiny model; the meta forward is the median of 3; latencies are "
        f"medians of {LATENCY_REPEATS} runs under `torch.no_grad()`; +RSS is the peak resident-memory increase "
        "while exporting; nodes are `call_function` nodes.",
        render(rows),
        "Dynamic programs at batch 1. Each model's dynamic export (the spec's Dim named `batch`) is called "
        "with that Dim at 1 and the other sizes at the example, and compared with eager: `ok` = ran and "
        "matched; `wrong` = ran and differed (a soundness bug); `refused-call` = the program's input checks "
        "refused a size inside the declared range (a completeness gap: it should have run, or export should "
        "have refused); `error` = another failure; `n/a` = no batch Dim or no dynamic program. "
        "`gp valid_from` is `ep.shape_contract` for the batch symbol (`-` = valid over the whole range). "
        "Retraces are graphport's pinned small-size traces (`SmallSizeReport.traces`, read by wrapping "
        "`graphport.export.prove_small_sizes` from the harness). Export times are single exports, as above. "
        "`sizes`: the dynamic program called with every Dim at its smallest and at the model's other listed "
        "in-range points (`Built.smallest_sizes`, `range_sizes` in bench/zoo.py), each judged as at batch 1; "
        "`ok k/n` counts those that ran and matched eager.",
        render_batch_one(rows),
        "Summary:\n\n" + summary(rows),
        "Failures:\n\n" + failures(rows),
    ])
    harness.write_section(harness.RESULTS_MD, opts.section, body, "Benchmark results")
    print(summary(rows))


if __name__ == "__main__":
    main()

"""Measuring one export attempt, for graphport and torch.export alike.

Why a single code path for both exporters: the ratios in bench/RESULTS.md are only
meaningful if both sides are timed, memory-sampled, counted and compared the same way,
in the same process, on the same module and inputs.
"""
from __future__ import annotations

import copy

import time
from unittest import mock
from typing import Any, Callable

import torch

from bench import harness
from bench.harness import CRASH, ERROR, OK, UNSUPPORTED, WRONG, Outcome
from bench.zoo import Built, Inputs, meta_copy


def graphport_exporter() -> tuple[Callable[..., Any] | None, str | None]:
    gp, err = harness.load_graphport()
    return (gp.export if gp else None), err


def torch_exporter(module: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any = None) -> Any:
    return torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes)


def warm_up_exporters() -> None:
    """Pay both exporters' one-time import and initialisation costs before any timing."""
    tiny, x = torch.nn.Linear(4, 4), (torch.randn(2, 4),)
    torch_exporter(tiny, x, {})
    export, _ = graphport_exporter()
    if export is not None:
        try:
            export(tiny, x)
        except Exception:  # recorded later, per model
            pass


def meta_forward_seconds(built: Built, repeats: int = 3) -> tuple[float | None, str]:
    """The cheapest possible trace: the model's Python forward on meta tensors.

    Libraries are told they are being exported (as both exporters tell them), so they take
    the same traceable code paths, e.g. transformers' mask construction without `.item()`.
    """
    try:
        module, (args, kwargs) = meta_copy(built.module, built.example_inputs())
        with torch.no_grad(), mock.patch("torch.compiler.is_compiling", return_value=True), \
                mock.patch("torch.compiler.is_exporting", return_value=True):
            return harness.median_seconds(lambda: module(*args, **kwargs), repeats), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {harness.first_line(str(exc))}"


def dynamic_spec(built: Built, exporter: str) -> Any:
    """The model's dynamic_shapes spec built with the exporter's own Dim class."""
    make = harness.graphport_dim if exporter == "graphport" else harness.torch_dim
    return built.dynamic_shapes(harness.DimFactory(make))


def empty_record() -> dict[str, Any]:
    return {"status": None, "error_type": "", "error": "", "export_s": None, "rss_mib": None, "nodes": None,
            "max_abs_diff": None, "run_ms": None}


def attempt(exporter: str, built: Built, dynamic: bool, run: bool, latency_repeats: int = 0) -> dict[str, Any]:
    """Export once (timed, memory-sampled), then verify and compare with eager.

    Returns a flat record: status, error, export_s, rss_mib (peak increase during export),
    nodes, max_abs_diff, and run_ms when latency_repeats > 0.
    """
    rec = empty_record()
    args, kwargs = built.example_inputs()
    try:
        spec = dynamic_spec(built, exporter) if dynamic else None
    except harness.DynamicUnsupported as exc:
        rec.update(status=UNSUPPORTED, error_type="no Dim", error=str(exc))
        return rec
    except Exception as exc:  # e.g. a Dim without the arithmetic derived dims need
        rec.update(status=CRASH, error_type=type(exc).__name__,
                   error=f"building dynamic_shapes: {harness.first_line(str(exc))}")
        return rec
    if exporter == "graphport":
        export, import_err = graphport_exporter()
        if export is None:
            rec.update(status=CRASH, error_type="ImportError", error=f"import graphport: {import_err}")
            return rec
    else:
        export = torch_exporter

    try:
        with harness.PeakRSS() as rss:
            t0 = time.perf_counter()
            ep = export(built.module, args, kwargs, dynamic_shapes=spec)
            rec["export_s"] = time.perf_counter() - t0
        rec["rss_mib"] = rss.peak_mib - rss.start_mib
    except Exception as exc:
        outcome = harness.classify_graphport_exception(exc) if exporter == "graphport" else \
            Outcome(ERROR, type(exc).__name__, harness.first_line(str(exc)))
        rec.update(status=outcome.status, error_type=outcome.error_type, error=outcome.message)
        return rec

    try:
        rec["nodes"] = harness.count_nodes(ep.graph)
    except Exception as exc:
        rec.update(status=WRONG, error_type=type(exc).__name__, error=f"ep.graph: {harness.first_line(str(exc))}")
        return rec
    if exporter == "graphport":
        problem = _verify(ep)
        if problem:
            rec.update(status=WRONG, error_type="verifier", error=problem)
            return rec
    if not run:
        rec["status"] = OK
        return rec
    outcome = check_against_eager(ep, built, [built.example_inputs()] + ([built.other_inputs()] if dynamic else []))
    rec.update(status=outcome.status, error_type=outcome.error_type, error=outcome.message,
               max_abs_diff=outcome.max_abs_diff)
    if outcome.status == OK and latency_repeats:
        module = ep.module()
        with torch.no_grad():  # the same inputs already ran correctly in check_against_eager
            rec["run_ms"] = 1e3 * harness.median_seconds(lambda: module(*args, **kwargs), latency_repeats)
    return rec


def _verify(ep: Any) -> str:
    gp, _ = harness.load_graphport()
    if gp is None or not hasattr(gp, "verify"):
        return ""
    try:
        gp.verify(ep)
    except Exception as exc:
        return f"{type(exc).__name__}: {harness.first_line(str(exc))}"
    return ""


def check_against_eager(ep: Any, built: Built, input_sets: list[Inputs]) -> Outcome:
    """Run the exported program and eager on each input set; the worst difference wins."""
    worst = 0.0
    try:
        module = ep.module()
    except Exception as exc:
        return Outcome(CRASH, type(exc).__name__, f"ep.module(): {harness.first_line(str(exc))}")
    exported_from = copy.deepcopy(built.module)
    for args, kwargs in input_sets:
        # each eager call starts from the module as exported: a model that rewrites its own
        # attributes when called (Swin clamps its window and drops the shift at a small image)
        # would otherwise answer a later size from the state an earlier call left
        eager = copy.deepcopy(exported_from)
        with torch.no_grad():
            expected = eager(*harness.clone_inputs(args), **harness.clone_inputs(kwargs))
            try:
                actual = module(*args, **kwargs)
            except Exception as exc:
                shape = [tuple(a.shape) for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
                return Outcome(WRONG, type(exc).__name__, f"run at {shape}: {harness.first_line(str(exc))}")
        ok, diff, reason = harness.compare(expected, actual)
        if not ok:
            return Outcome(WRONG, "mismatch", reason, max_abs_diff=diff)
        worst = max(worst, diff)
    return Outcome(OK, max_abs_diff=worst)


def eager_ms(built: Built, repeats: int) -> float:
    args, kwargs = built.example_inputs()
    with torch.no_grad():
        eager = copy.deepcopy(built.module)   # timing calls leave the module as exported
        return 1e3 * harness.median_seconds(lambda: eager(*args, **kwargs), repeats)

"""Running PyTorch's ExportDB cases (`torch._export.db.examples`) through an exporter.

Why here and not in the test: the conformance test and the generator of
docs/conformance.md must judge each case identically, so both call `run_case`.
A case is judged on a fresh copy of its module and inputs, because several cases mutate
their inputs or their own attributes, and a mutated input must be checked too.
"""
from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from bench import harness
from bench.harness import CRASH, ERROR, OK, UNSUPPORTED, WRONG, Outcome


def all_cases() -> dict[str, Any]:
    """Every registered ExportDB case, by name, sorted."""
    from torch._export.db.examples import all_examples
    return dict(sorted(all_examples().items()))


def is_supported_by_torch(case: Any) -> bool:
    from torch._export.db.case import SupportLevel
    return case.support_level == SupportLevel.SUPPORTED


def _named_inputs(case: Any, args: tuple) -> dict[str, Any]:
    return inspect.signature(case.model.forward).bind(*args, **case.example_kwargs).arguments


def second_inputs(case: Any) -> tuple[tuple, dict] | None:
    """Inputs at another shape inside the case's dynamic ranges (each dynamic dim + 1), or None."""
    if not case.dynamic_shapes:
        return None
    named = _named_inputs(case, case.example_args)
    for name, axes in case.dynamic_shapes.items():
        if not axes:
            continue
        tensor = named[name]
        shape = list(tensor.shape)
        for axis, dim in axes.items():
            grown = shape[axis] + 1
            shape[axis] = grown if grown <= dim.max else shape[axis] - 1
        named[name] = torch.randn(shape, dtype=tensor.dtype) if tensor.is_floating_point() \
            else torch.randint(0, 10, shape, dtype=tensor.dtype)
    params = inspect.signature(case.model.forward).parameters
    args = tuple(named[p] for p in list(params)[: len(case.example_args)])
    kwargs = {k: v for k, v in named.items() if k in case.example_kwargs}
    return args, kwargs


def run_case(case: Any, exporter: str) -> Outcome:
    """Export one case with "graphport" or "torch", then check it against eager.

    `ok` means exported, verified (graphport), and equal to eager in outputs and in input
    mutations on the example inputs and, for cases with dynamic dims, at a second shape.
    """
    spec = case.dynamic_shapes
    if exporter == "graphport":
        gp, err = harness.load_graphport()
        if gp is None:
            return Outcome(CRASH, "ImportError", err or "")
        try:
            spec = harness.to_graphport_spec(spec)
        except harness.DynamicUnsupported as exc:
            return Outcome(UNSUPPORTED, "no Dim", str(exc))
        except Exception as exc:  # graphport's Dim rejected a spec torch.export accepts
            return Outcome(CRASH, type(exc).__name__, f"building dynamic_shapes: {harness.first_line(str(exc))}")
        export = gp.export
    else:
        export = torch.export.export

    model = copy.deepcopy(case.model)
    args, kwargs = harness.clone_inputs((case.example_args, case.example_kwargs))
    try:
        ep = export(model, args, kwargs, dynamic_shapes=spec)
    except Exception as exc:
        if exporter == "graphport":
            return harness.classify_graphport_exception(exc)
        return Outcome(ERROR, type(exc).__name__, harness.first_line(str(exc)))

    if exporter == "graphport" and hasattr(gp, "verify"):
        try:
            gp.verify(ep)
        except Exception as exc:
            return Outcome(WRONG, "verifier", f"{type(exc).__name__}: {harness.first_line(str(exc))}")

    input_sets = [(case.example_args, case.example_kwargs)]
    other = second_inputs(case)
    if other is not None:
        input_sets.append(other)
    worst = 0.0
    for inputs in input_sets:
        result = _compare_with_eager(case, ep, inputs)
        if result.status != OK:
            if inputs is not input_sets[0]:
                result.message = f"at the second shape: {result.message}"
            return result
        worst = max(worst, result.max_abs_diff or 0.0)
    return Outcome(OK, max_abs_diff=worst)


def _compare_with_eager(case: Any, ep: Any, inputs: tuple[tuple, dict]) -> Outcome:
    eager_inputs, exported_inputs = harness.clone_inputs(inputs), harness.clone_inputs(inputs)
    expected = copy.deepcopy(case.model)(*eager_inputs[0], **eager_inputs[1])
    try:
        actual = ep.module()(*exported_inputs[0], **exported_inputs[1])
    except Exception as exc:
        return Outcome(WRONG, type(exc).__name__, f"running ep.module(): {harness.first_line(str(exc))}")
    ok, diff, reason = harness.compare((expected, eager_inputs), (actual, exported_inputs))
    if not ok:
        return Outcome(WRONG, "mismatch", f"outputs or mutated inputs differ from eager: {reason}", diff)
    return Outcome(OK, max_abs_diff=diff)

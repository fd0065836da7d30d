"""The model zoo as interop test cases: graphport exports, static or dynamic, built once per
(model, kind) in a test process (an export of a zoo model takes seconds)."""
from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench/ helpers live at the repo root

from bench import harness, measure, zoo  # noqa: E402

import graphport as gp  # noqa: E402

slow = pytest.mark.slow

NAMES = [name for name, entry in zoo.MODELS.items() if not entry.meta]


@functools.lru_cache(maxsize=4)
def exported(name: str, kind: str) -> tuple[zoo.Built, gp.ExportedProgram]:
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    spec = measure.dynamic_spec(built, "graphport") if kind == "dynamic" else None
    return built, gp.export(built.module, args, kwargs, dynamic_shapes=spec)


def input_sets(built: zoo.Built, kind: str) -> list[tuple[tuple, dict]]:
    return [built.example_inputs()] + ([built.other_inputs()] if kind == "dynamic" else [])


def eager(built: zoo.Built, args: tuple, kwargs: dict) -> Any:
    with torch.no_grad():
        return built.module(*harness.clone_inputs(args), **harness.clone_inputs(kwargs))


def assert_matches(expected: Any, actual: Any) -> None:
    ok, diff, reason = harness.compare(expected, actual)
    assert ok, f"max abs diff {diff}: {reason}"

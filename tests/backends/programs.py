"""The programs every consumer test takes: graphport's (converted by to_torch, directly or after
gp.save/gp.load) and torch.export's of the same model, built once per test process. The
consumers themselves are called through bench/consumers.py, which the table in
docs/backends.md is made with."""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench/ helpers live at the repo root

from bench import consumer_models, consumers  # noqa: E402

slow = pytest.mark.slow

# (model, dynamic batch): a CNN, a transformer, and the same two with a dynamic batch
KINDS = [("cnn", False), ("transformer", False), ("cnn", True), ("transformer", True)]


def kind_id(model: str, dynamic: bool) -> str:
    return f"{model}-{'dynamic' if dynamic else 'static'}"


def params(fast: set[tuple[str, bool, bool]] = frozenset()) -> list:
    """(model, dynamic, through_file) for each kind, each directly and after gp.save/gp.load;
    all slow but the `fast` ones."""
    return [pytest.param(m, d, f, marks=[] if (m, d, f) in fast else [slow],
                         id=kind_id(m, d) + ("-gp.save" if f else ""))
            for m, d in KINDS for f in (False, True)]


def requires(package: str):
    return pytest.mark.skipif(importlib.util.find_spec(package) is None,
                              reason=f"{package} is not installed (pip install -e '.[backends]')")


@functools.lru_cache(maxsize=None)
def case(model: str) -> consumer_models.Case:
    return consumer_models.build(model)


@functools.lru_cache(maxsize=8)
def graphport_program(model: str, dynamic: bool, through_file: bool) -> torch.export.ExportedProgram:
    return consumers.converted(consumers.graphport_program(case(model), dynamic), through_file)


@functools.lru_cache(maxsize=4)
def torch_program(model: str, dynamic: bool) -> torch.export.ExportedProgram:
    return consumers.torch_program(case(model), dynamic)

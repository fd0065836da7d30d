"""Joint forward-backward export time: graphport's `_export_forward_backward` against
torch's, on the training corpus of the tests (a CNN with BatchNorm, an MLP, a small
transformer), static and dynamic, measured side by side in one process.

    PYTHONPATH=src python bench/joint_export.py

Prints, per program, the median seconds of each (export + joint export) over a few runs and
their ratio. Ratios are what to read: the machine may be shared.
"""
from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.export.experimental import _export_forward_backward as torch_joint

import graphport as gp
from graphport.experimental import _export_forward_backward as graphport_joint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.compat.training_corpus import CASES  # noqa: E402

RUNS = 3


def _time(make) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        make()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    warnings.simplefilter("ignore")
    print(f"{'program':<22}{'graphport s':>12}{'torch s':>10}{'ratio':>8}")
    ratios = []
    for name, case in CASES.items():
        for dynamic in (False, True):
            torch.manual_seed(0)
            model, args = case.make().train(), case.inputs(3)
            ours = _time(lambda: graphport_joint(gp.export(
                model, args, dynamic_shapes=case.dims(gp.Dim) if dynamic else None)))
            theirs = _time(lambda: torch_joint(torch.export.export(
                model, args, dynamic_shapes=case.dims(torch.export.Dim) if dynamic else None)))
            ratios.append(ours / theirs)
            label = f"{name} {'dynamic' if dynamic else 'static'}"
            print(f"{label:<22}{ours:>12.3f}{theirs:>10.3f}{ours / theirs:>7.2f}x")
    print(f"median ratio graphport / torch: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()

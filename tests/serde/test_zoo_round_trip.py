"""Every model of the zoo round-trips, static and dynamic, with bit-identical outputs on the
example inputs and on inputs of other sizes (the CI subset by default, the rest with
GRAPHPORT_SLOW=1)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import graphport as gp
from .helpers import round_trip

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the bench/ helpers live at the repo root
from bench import harness, zoo  # noqa: E402

FAST = {(name, "static") for name in zoo.CI_SUBSET} | {("mlp", "dynamic")}


def _params():
    return [pytest.param(name, kind, marks=[] if (name, kind) in FAST else [pytest.mark.slow],
                         id=f"{name}-{kind}")
            for name, entry in zoo.MODELS.items() if not entry.meta for kind in ("static", "dynamic")]


@pytest.mark.parametrize("name,kind", _params())
def test_zoo_model_round_trips(name, kind, tmp_path):
    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    spec = built.dynamic_shapes(harness.DimFactory(harness.graphport_dim)) if kind == "dynamic" else None
    ep = gp.export(built.module, args, kwargs, dynamic_shapes=spec)
    with torch.no_grad():   # as the zoo runs its models (with grad, t5's and swin's attention layouts differ)
        round_trip(ep, tmp_path, *([built.other_inputs()] if kind == "dynamic" else []))

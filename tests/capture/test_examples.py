"""The example models (examples/models.py) go through the same differential check."""
from __future__ import annotations

import importlib.util
import pathlib

import torch

from .helpers import check_against_eager_and_torch_export as check

_spec = importlib.util.spec_from_file_location(
    "graphport_examples_models", pathlib.Path(__file__).resolve().parents[2] / "examples" / "models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)


def test_small_resnet_eval():
    torch.manual_seed(0)
    model = models.SmallResNet().eval()
    check(model, model.example_inputs())


def test_tiny_lm_eval():
    # Operators only: torch.export lifts the tied embedding/LM-head weight twice (one
    # placeholder unused); graphport lifts it once.
    torch.manual_seed(0)
    model = models.TinyLM().eval()
    ep = check(model, model.example_inputs(seq=8), torch_export_check="ops")
    assert [s.target for s in ep.graph_signature.input_specs].count("lm_head.weight") == 0

"""torch.export.save / torch.export.load of graphport's programs: every metadata value the
converter emits is one torch's serializer writes, and the loaded program runs like eager."""
from __future__ import annotations

import io

import pytest
import torch

from .programs import consumers, case, graphport_program, params

FAST = {("cnn", True, False), ("cnn", True, True), ("transformer", False, False)}


@pytest.mark.parametrize("model,dynamic,through_file", params(FAST))
def test_saved_and_loaded_program_runs_like_eager(model, dynamic, through_file):
    consumers.save_load(graphport_program(model, dynamic, through_file), case(model), dynamic)


def test_loaded_program_keeps_node_metadata_and_dialect():
    ep = graphport_program("cnn", True, False)
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    assert loaded.dialect == ep.dialect == "TRAINING"
    before = {n.name: n for n in ep.graph.nodes if n.op == "call_function"}
    for node in loaded.graph.nodes:
        if node.name in before:
            assert node.meta.get("nn_module_stack") == before[node.name].meta.get("nn_module_stack"), node.name
            assert node.meta.get("torch_fn") == before[node.name].meta.get("torch_fn"), node.name
    assert str(loaded.range_constraints) == str(ep.range_constraints)

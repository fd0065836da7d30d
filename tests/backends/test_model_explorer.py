"""Model Explorer's PyTorch adapter reads graphport's programs, in memory and from a .pt2
file, wherever it reads torch.export's program of the same model.

The adapter cannot show a node whose value is a SymInt (`sym_size`, which dynamic programs
that read sizes have, torch.export's as well) nor, in a program loaded from .pt2, the output
node of a dynamic program (a tuple of tensors with symbolic sizes, not JSON): limits of the
adapter that fail torch.export's program the same way, so there both must fail alike.

All slow: importing model_explorer alone takes about 20 s."""
from __future__ import annotations

import pytest

from .programs import case, consumers, graphport_program, params, requires, slow, torch_program

pytestmark = [requires("model_explorer"), slow]


def _as_torch_exports(adapter, model, dynamic, through_file):
    ours = consumers.attempt(adapter, graphport_program(model, dynamic, through_file), case(model), dynamic)
    theirs = consumers.attempt(adapter, torch_program(model, dynamic), case(model), dynamic)
    assert ours == theirs


@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_adapter_reads_the_program_in_memory_as_torch_exports(model, dynamic, through_file):
    _as_torch_exports(consumers.model_explorer, model, dynamic, through_file)


@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_adapter_reads_the_pt2_file_as_torch_exports(model, dynamic, through_file):
    _as_torch_exports(consumers.model_explorer_file, model, dynamic, through_file)


def test_dynamic_cnn_with_batch_norm_is_read_in_memory():
    """BatchNorm as one `batch_norm` node: no tuple-valued node with symbolic sizes."""
    assert consumers.model_explorer(graphport_program("cnn", True, False), case("cnn"), True) == "ok"

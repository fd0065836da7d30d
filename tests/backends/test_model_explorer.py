"""Model Explorer's PyTorch adapter reads graphport's programs in memory and from a .pt2 file."""
from __future__ import annotations

import pytest

from .programs import consumers, case, graphport_program, params, requires, torch_program

pytestmark = requires("model_explorer")

FAST = {("cnn", True, False), ("transformer", False, True)}


@pytest.mark.parametrize("model,dynamic,through_file", params(FAST))
def test_adapter_reads_the_program_in_memory(model, dynamic, through_file):
    consumers.model_explorer(graphport_program(model, dynamic, through_file), case(model), dynamic)


@pytest.mark.parametrize("model,dynamic,through_file", [p for p in params({("cnn", False, False)})
                                                         if not p.values[1]])
def test_adapter_reads_the_program_from_a_pt2_file(model, dynamic, through_file):
    consumers.model_explorer_file(graphport_program(model, dynamic, through_file), case(model), dynamic)


def test_pt2_file_of_a_dynamic_program_fails_in_the_adapter_as_torch_exports_does():
    """The adapter cannot show the output node of a loaded dynamic program (its value, a tuple
    of tensors with symbolic sizes, is not JSON): a limit of the adapter, the same for
    torch.export's program. If the adapter learns it, this test says so."""
    for ep in (graphport_program("cnn", True, False), torch_program("cnn", True)):
        with pytest.raises(TypeError, match="SymInt is not JSON serializable"):
            consumers.model_explorer_file(ep, case("cnn"), True)

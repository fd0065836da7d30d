"""torch.compile of the converted program's module() runs like eager."""
from __future__ import annotations

import pytest

from .programs import consumers, case, graphport_program, params


@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_compiled_module_runs_like_eager(model, dynamic, through_file):
    consumers.torch_compile(graphport_program(model, dynamic, through_file), case(model), dynamic)

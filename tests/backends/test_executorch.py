"""ExecuTorch: graphport's program lowered with the XNNPACK partitioner
(to_edge_transform_and_lower, to_executorch) and the .pte run by ExecuTorch's runtime, like eager."""
from __future__ import annotations

import pytest

from .programs import consumers, case, graphport_program, params, requires

pytestmark = requires("executorch")


@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_pte_runs_like_eager(model, dynamic, through_file):
    consumers.executorch_xnnpack(graphport_program(model, dynamic, through_file), case(model), dynamic)

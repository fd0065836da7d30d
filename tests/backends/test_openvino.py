"""OpenVINO converts graphport's programs (convert_model) and runs them on CPU like eager."""
from __future__ import annotations

import pytest

from .programs import consumers, case, graphport_program, params, requires

pytestmark = requires("openvino")

FAST = {("cnn", True, False)}


@pytest.mark.parametrize("model,dynamic,through_file", params(FAST))
def test_openvino_runs_the_program_like_eager(model, dynamic, through_file):
    consumers.openvino(graphport_program(model, dynamic, through_file), case(model), dynamic)

"""torchao's PT2E quantization (prepare_pt2e / convert_pt2e) annotates graphport's programs as
it annotates torch.export's: the same number of quantize/dequantize nodes, with the X86
Inductor quantizer and with ExecuTorch's XNNPACK quantizer."""
from __future__ import annotations

import pytest

from .programs import consumers, case, graphport_program, params, requires, slow, torch_program

pytestmark = requires("torchao")

FAST = {("cnn", True, False)}


def _same_coverage(quantize, model, dynamic, through_file):
    ours = quantize(graphport_program(model, dynamic, through_file), case(model), dynamic)
    theirs = quantize(torch_program(model, dynamic), case(model), dynamic)
    assert int(ours.split()[0]) > 0
    assert ours == theirs


@pytest.mark.parametrize("model,dynamic,through_file", params(FAST))
def test_x86_quantizer_covers_as_much_as_on_torch_export(model, dynamic, through_file):
    _same_coverage(consumers.quantize_x86, model, dynamic, through_file)


@requires("executorch")
@pytest.mark.parametrize("model,dynamic,through_file", params())
def test_xnnpack_quantizer_covers_as_much_as_on_torch_export(model, dynamic, through_file):
    _same_coverage(consumers.quantize_xnnpack, model, dynamic, through_file)


@slow
@pytest.mark.parametrize("quantize", [consumers.quantize_x86, consumers.quantize_xnnpack], ids=["x86", "xnnpack"])
def test_mobilenet_like_stack_gets_the_same_coverage(quantize):
    """Residual adds, pooling and flatten after BatchNorm and in-place ReLU6: the patterns the
    quantizers match on torch.export's spelling of these operators."""
    pytest.importorskip("executorch")
    _same_coverage(quantize, "mobilenet", True, False)

"""graphport -> torch.export -> ONNX: the converted program exports with torch.onnx (dynamo)
and runs in onnxruntime like eager, at the example sizes and at other sizes, with the
program's dynamic dimensions as ONNX symbolic dimensions."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import graphport as gp
from graphport.interop import to_torch

from .zoo_cases import assert_matches, eager, exported, input_sets, slow

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# Models torch's own ONNX exporter cannot take (checked by exporting the model with
# torch.export directly and passing that program to torch.onnx.export): name -> its error.
TORCH_ONNX_CANNOT: dict[str, str] = {}


def onnx_session(tep: torch.export.ExportedProgram, path) -> "ort.InferenceSession":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(tep, dynamo=True, verbose=False)
    program.save(str(path))
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_onnx(session, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    leaves = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), leaves)}
    return [torch.from_numpy(o) for o in session.run(None, feeds)]


def tensor_leaves(value) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        h = self.conv(x).relu().mean(dim=(2, 3))
        return self.head(self.norm(h)).softmax(-1)


def test_a_dynamic_program_runs_in_onnxruntime_at_two_batch_sizes(tmp_path):
    model = SmallNet().eval()
    ep = gp.export(model, (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: gp.Dim("batch", min=1, max=32)},))
    session = onnx_session(to_torch(ep), tmp_path / "small.onnx")
    assert isinstance(session.get_inputs()[0].shape[0], str)   # a symbolic ONNX dim
    assert session.get_inputs()[0].shape[1:] == [3, 16, 16]
    for batch in (2, 7):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            assert_matches([model(x)], run_onnx(session, (x,), {}))


ZOO_ONNX = ["bert", "gpt2", "llama", "t5", "vit", "resnet50", "convnext", "swin", "whisper_encoder", "wav2vec2",
            "lstm", "mlp"]


@slow
@pytest.mark.parametrize("name", ZOO_ONNX)
def test_zoo_dynamic_runs_in_onnxruntime_like_eager(name, tmp_path):
    if name in TORCH_ONNX_CANNOT:
        pytest.skip(f"torch.onnx cannot export torch.export's own program: {TORCH_ONNX_CANNOT[name]}")
    built, ep = exported(name, "dynamic")
    session = onnx_session(to_torch(ep), tmp_path / f"{name}.onnx")
    symbolic = [d for i in session.get_inputs() for d in i.shape if isinstance(d, str)]
    assert symbolic, "the dynamic dims must stay symbolic in the ONNX model"
    for args, kwargs in input_sets(built, "dynamic"):
        assert_matches(tensor_leaves(eager(built, args, kwargs)), run_onnx(session, args, kwargs))

"""Programs on a CUDA device: exported there, moved there by `move_to_device_pass`, saved and
loaded there, and compiled there by AOTInductor from graphport's converted program.

Skipped where torch sees no CUDA device (CI has none); run on a GPU machine with
`python -m pytest -q tests/gpu`. Each case compares the program with eager on the device, on
the example and on fresh inputs across the declared range, sizes 1 and 0 included where eager
answers there."""
from __future__ import annotations

import pytest
import torch

import graphport as gp
from graphport.passes import move_to_device_pass

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


class Block(torch.nn.Module):
    """State of every kind, factories with `device=` taken from the input and spelled "cpu",
    a `.to` and a batch norm in eval mode."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 8))

    def forward(self, x):
        ramp = torch.arange(8, device=x.device, dtype=x.dtype)
        mask = torch.ones(x.shape[0], 8, device=x.device).tril(diagonal=2)
        y = self.bn(self.norm(self.proj(x)) * self.scale + ramp) * mask
        return torch.softmax(y.to(torch.float64), dim=-1).to(x.dtype).sum(0)


def _batch(size: int, device) -> tuple[torch.Tensor]:
    return (torch.randn(size, 8, device=device),)


def _same_everywhere(program, eager, device, sizes=(3, 1, 0, 7, 16)):
    for size in sizes:
        args = _batch(size, device)
        expected = eager(*args)
        got = program.module()(*args)
        assert got.device.type == device.type
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_export_on_cuda_matches_eager_across_the_range():
    model = Block().eval().to(CUDA)
    ep = gp.export(model, _batch(3, CUDA), dynamic_shapes=({0: gp.Dim("b", max=16)},))
    assert {t.device.type for t in ep.state_dict.values()} == {"cuda"}
    _same_everywhere(ep, model, CUDA)


def test_program_exported_on_cpu_moves_to_cuda_and_back():
    model = Block().eval()
    ep = gp.export(model, _batch(3, "cpu"), dynamic_shapes=({0: gp.Dim("b", max=16)},))
    on_gpu = move_to_device_pass(ep, "cuda")
    assert {t.device.type for t in on_gpu.state_dict.values()} == {"cuda"}
    _same_everywhere(on_gpu, model.to(CUDA), CUDA)
    back = move_to_device_pass(on_gpu, {"cuda:0": "cpu"})
    _same_everywhere(back, model.to("cpu"), torch.device("cpu"))


def test_cuda_program_round_trips_through_the_artifact(tmp_path):
    model = Block().eval().to(CUDA)
    ep = gp.export(model, _batch(3, CUDA), dynamic_shapes=({0: gp.Dim("b", max=16)},))
    gp.save(ep, tmp_path / "block.gport")
    loaded = gp.load(tmp_path / "block.gport")
    _same_everywhere(loaded, model, CUDA)


def test_aotinductor_compiles_the_converted_program_on_cuda(tmp_path):
    from graphport.interop import to_torch

    model = Block().eval().to(CUDA)
    ep = gp.export(model, _batch(4, CUDA), dynamic_shapes=({0: gp.Dim("b", min=2, max=16)},))
    path = torch._inductor.aoti_compile_and_package(to_torch(ep), package_path=str(tmp_path / "block.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    for size in (4, 2, 9, 16):
        args = _batch(size, CUDA)
        torch.testing.assert_close(runner(*args), model(*args), rtol=1e-3, atol=1e-4)

"""Export leaves little for Python's cyclic collector, and its shortcuts for that change nothing.

- Capture's own state (the recorder, its scopes, the tracers it bound, capture's frame) is
  freed by reference counting when capture returns, not left in reference cycles.
- The shortcuts that make fewer objects per node (one `source_fn_stack` entry and `torch_fn`
  tuple per torch function call, one `torch.Size` per static shape in `tensor_meta`, a plain
  tensor `val` finished without mapping over it) and a node made without fx's walk of its
  arguments (`recorder.call_node`) give the program the plain forms give: printed program,
  every node's metadata, and the saved file byte for byte.
"""
from __future__ import annotations

import gc
import io
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch.fx.passes.shape_prop import TensorMetadata

import graphport as gp
from graphport import capture as capture_package, values
from graphport.capture import recorder
from graphport.capture.tracer import TracerTensor
from graphport.op_args import map_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ lives at the repo root


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.proj = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.proj(self.norm(x)).view(x.shape[0], -1, 2).transpose(1, 2)
        return x + y.reshape(x.shape)


def _with_collector_paused(fn):
    """Run `fn` with the cyclic collector off, so what it leaves in cycles stays (and is
    found); the collector's state is given back as it was."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return fn()
    finally:
        if was_enabled:
            gc.enable()


def test_capture_state_is_freed_by_reference_counting(monkeypatch):
    made: list[weakref.ref] = []

    class WatchedRecorder(recorder.Recorder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    model = torch.nn.Sequential(_Layer(), _Layer()).eval()
    # once first: torch imports modules lazily the first time, and an import can keep the
    # frames that ran it (capture's among them) in a module-level traceback
    gp.export(model, (torch.randn(3, 4, 8),))
    monkeypatch.setattr(capture_package, "Recorder", WatchedRecorder)

    def alive_tracers() -> list:
        return [o for o in gc.get_objects() if type(o) is TracerTensor]

    def export_and_look():
        before = {id(t) for t in alive_tracers()}   # other tests' tracers, kept on purpose
        ep = gp.export(model, (torch.randn(3, 4, 8),))
        return ep, [ref() is None for ref in made], [t for t in alive_tracers() if id(t) not in before]

    ep, freed, left_behind = _with_collector_paused(export_and_look)
    assert freed == [True]
    assert left_behind == []
    assert torch.allclose(ep.module()(x := torch.randn(3, 4, 8)), model(x))


def _plain_on_device(val, device):
    return map_args(lambda v: values.RuntimeValue(v, device) if isinstance(v, torch.Tensor) and v.is_meta
                    and not isinstance(v, values.RuntimeValue) else v, val)


def _plain_tensor_meta(val, sizes=None):
    if isinstance(val, torch.Tensor):
        return TensorMetadata(val.shape, val.dtype, val.requires_grad, val.stride(), values._memory_format(val),
                              False, {})
    if isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val):
        return type(val)(_plain_tensor_meta(v) for v in val)
    return None


class _FreshEachNode:
    """The torch function's metadata made anew for every node, as the plain form made it."""

    def __init__(self, torch_fn: tuple) -> None:
        self.torch_fn = torch_fn

    def __iter__(self):
        label, qualified, func = self.torch_fn
        return iter(((label, qualified), (label, func)))


def _plain_enter_torch_fn(self, torch_fn):
    self.torch_fn = torch_fn
    self._torch_fn_meta = None if torch_fn is None else _FreshEachNode(torch_fn)


def _described(ep) -> list:
    out = [str(ep)]
    for node in ep.graph.nodes:
        meta = {k: (v.gp_meta.shape, v.gp_meta.stride(), v.gp_meta.dtype, str(v.device))
                if isinstance(v, values.RuntimeValue) else v for k, v in node.meta.items() if k != "val"}
        val = node.meta.get("val")
        out.append((node.name, repr(meta), repr(val)))
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    out.append(buffer.getvalue())
    return out


@pytest.mark.parametrize("name,dynamic", [("bert", False), ("gpt2", True)])
def test_fewer_objects_same_program(name, dynamic, monkeypatch):
    from bench import measure, zoo

    built = zoo.MODELS[name].build()
    args, kwargs = built.example_inputs()
    shapes = measure.dynamic_spec(built, "graphport") if dynamic else None
    export = lambda: _described(gp.export(built.module, args, kwargs, dynamic_shapes=shapes))  # noqa: E731
    fast = export()
    monkeypatch.setattr(values, "_on_device", _plain_on_device)
    monkeypatch.setattr(values, "_tensor_meta", _plain_tensor_meta)
    monkeypatch.setattr(recorder.Recorder, "enter_torch_fn", _plain_enter_torch_fn)
    monkeypatch.setattr(recorder, "call_node", lambda graph, target, args, kwargs, name: graph.create_node(
        "call_function", target, args, kwargs, name=name))
    assert export() == fast

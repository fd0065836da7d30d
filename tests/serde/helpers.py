"""Round-trip checks shared by the serde tests."""
from __future__ import annotations

import io

import torch

import graphport as gp
from graphport import _torch


def saved(ep, **kw) -> bytes:
    buf = io.BytesIO()
    gp.save(ep, buf, **kw)
    return buf.getvalue()


def assert_same_outputs(a, b) -> None:
    la, sa = _torch.pytree.tree_flatten(a)
    lb, sb = _torch.pytree.tree_flatten(b)
    assert sa == sb
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride()
            assert torch.equal(_bytes(x), _bytes(y))
        else:
            assert x == y


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as raw bytes: bit for bit, NaNs and signed zeros included."""
    return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() else t


def round_trip(ep, tmp_path, *inputs: tuple) -> gp.ExportedProgram:
    """Save and load `ep` (through a path: memory-mapped weights); check it prints the
    same, saves to the same bytes, passes the verifier and computes bit-identical outputs
    on the example inputs and on each extra (args, kwargs)."""
    first = saved(ep)
    path = tmp_path / "program.gport"
    gp.save(ep, path)
    assert path.read_bytes() == first
    loaded = gp.load(path)
    assert str(loaded) == str(ep)
    assert saved(loaded) == first
    assert saved(gp.load(io.BytesIO(first))) == first
    gp.verify(loaded)
    for args, kwargs in [ep.example_inputs, *inputs]:
        expected = ep.module()(*_clone(args), **_clone(kwargs))
        got = loaded.module()(*_clone(args), **_clone(kwargs))
        assert_same_outputs(expected, got)
    return loaded


def _clone(tree):
    return _torch.pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), tree)

"""Parameters, buffers, constants and example tensors: described in JSON, stored once.

Every tensor gets a description (dtype, shape, strides, whether it is a Parameter and
requires grad) and the key of its data in weights.safetensors. Names that share one
tensor (tied embeddings) share the key, and loading gives them one tensor object again.
A tensor on the meta device has no data (key null): the program is saved as structure
only and its weights are bound at load (`weights=`).
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import ArtifactError, short as _short
from .values import dtype_from_name, dtype_name
from .weights import storable


def dense_permutation(shape: list[int], stride: list[int]) -> bool:
    """Whether the strides lay the tensor out densely (a permutation of contiguous): its
    data then fills exactly numel elements and can be rebuilt from a contiguous copy."""
    expected = 1
    for size, st in sorted(((s, st) for s, st in zip(shape, stride) if s != 1), key=lambda p: p[1]):
        if st != expected:
            return False
        expected *= size
    return True


class TensorTable:
    """The tensors being saved, deduplicated by identity (same storage, same view)."""

    def __init__(self):
        self.data: dict[str, torch.Tensor] = {}
        self._keys: dict[tuple, str] = {}

    def describe(self, tensor: torch.Tensor, key: str, what: str) -> dict:
        if not isinstance(tensor, torch.Tensor):
            raise ArtifactError(f"cannot save {what}: it is a {type(tensor).__qualname__}, not a tensor")
        if tensor.layout is not torch.strided or not storable(tensor.dtype):
            raise ArtifactError(f"cannot save {what}: a {tensor.layout} {tensor.dtype} tensor has no safetensors "
                                "encoding", fix="convert it to a dense tensor of a standard dtype before export")
        shape, stride = list(tensor.shape), list(tensor.stride())
        out: dict[str, Any] = {"key": None, "dtype": dtype_name(tensor.dtype), "shape": shape}
        if not tensor.is_contiguous() and dense_permutation(shape, stride):
            out["stride"] = stride
        out["parameter"] = isinstance(tensor, torch.nn.Parameter)
        out["requires_grad"] = tensor.requires_grad
        if tensor.device.type == "meta":
            return out
        identity = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(shape), tuple(stride),
                    tensor.dtype) if tensor.numel() else ("empty", key)
        found = self._keys.get(identity)
        if found is None:
            found = self._keys[identity] = key
            self.data[key] = tensor.detach()
        out["key"] = found
        return out


class TensorBinder:
    """Rebuilds described tensors from the stored data (and `weights` given at load)."""

    def __init__(self, stored: dict[str, torch.Tensor]):
        self.stored = stored
        self._made: dict[tuple, torch.Tensor] = {}

    def make(self, desc: Any, what: str, supplied: torch.Tensor | None = None) -> torch.Tensor:
        if not isinstance(desc, dict):
            raise ArtifactError(f"malformed description of {what}: {_short(desc)}")
        dtype = dtype_from_name(desc.get("dtype"))
        shape, stride = desc.get("shape"), desc.get("stride")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise ArtifactError(f"{what}: malformed shape {_short(shape)}")
        if stride is not None and (not isinstance(stride, list) or len(stride) != len(shape)
                                   or not all(type(s) is int for s in stride) or not dense_permutation(shape, stride)):
            raise ArtifactError(f"{what}: malformed strides {_short(stride)} for shape {shape}")
        key = desc.get("key")
        identity = (key, repr(desc)) if supplied is None else (id(supplied), repr(desc))
        if key is not None or supplied is not None:
            found = self._made.get(identity)
            if found is not None:
                return found
        if supplied is not None:
            data = supplied.detach()
        elif key is None:
            data = torch.empty(shape, dtype=dtype, device="meta")
        else:
            data = self.stored.get(key) if isinstance(key, str) else None
            if data is None:
                raise ArtifactError(f"{what}: its data {_short(key)} is not in weights.safetensors")
        if list(data.shape) != shape or data.dtype != dtype:
            raise ArtifactError(f"{what}: weights.safetensors holds {data.dtype} {list(data.shape)} under "
                                f"{_short(key)}, but the program describes {dtype} {shape}")
        if stride is not None and list(data.stride()) != stride:
            data = torch.empty_strided(shape, stride, dtype=dtype, device=data.device).copy_(data)
        requires_grad = desc.get("requires_grad") is True
        tensor = torch.nn.Parameter(data, requires_grad=requires_grad) if desc.get("parameter") is True \
            else data.requires_grad_(requires_grad) if requires_grad else data
        if key is not None or supplied is not None:
            self._made[identity] = tensor
        return tensor

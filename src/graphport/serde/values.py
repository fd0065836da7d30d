"""Node arguments and metadata as JSON, without pickle.

JSON's own values stand for themselves (null, booleans, integers, strings, lists, finite
floats); every other value is an object with exactly one key naming its kind:
{"tuple": [...]}, {"dict": [[key, value], ...]}, {"node": name}, {"dtype": "float32"},
{"device": "cpu"}, {"layout": "strided"}, {"memory_format": "contiguous_format"},
{"float": "inf"}, {"slice": [start, stop, step]}, {"sym": symbolic value} and
{"tensor": description} (a meta value: dtype, symbolic shape and strides, no data).
Decoding rebuilds values only from these fixed tables: nothing in the file names code.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..errors import ArtifactError, short as _short
from ..values import RuntimeValue
from .targets import target_from_json, target_to_json

if TYPE_CHECKING:   # annotations only: a static program's load does not import the shape algebra (sympy)
    from ..shapes.env import ShapeEnv

DTYPES: dict[str, torch.dtype] = {name: v for name, v in sorted(vars(torch).items()) if isinstance(v, torch.dtype)}
_DTYPE_NAMES = {v: k for k, v in reversed(list(DTYPES.items()))}
_LAYOUTS = {name: v for name, v in sorted(vars(torch).items()) if isinstance(v, torch.layout)}
_LAYOUT_NAMES = {v: k for k, v in _LAYOUTS.items()}
_FORMATS = {name: v for name, v in sorted(vars(torch).items()) if isinstance(v, torch.memory_format)}
_FORMAT_NAMES = {v: k for k, v in _FORMATS.items()}
_META = torch.device("meta")
_PLAIN = frozenset({type(None), bool, int, str, float})   # JSON values that stand for themselves


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES[dtype]


def dtype_from_name(name: Any) -> torch.dtype:
    if not isinstance(name, str) or name not in DTYPES:
        raise ArtifactError(f"unknown dtype {_short(name)}")
    return DTYPES[name]


def encode(value: Any, where: str) -> Any:
    """`value` as JSON; `where` names it in the error if it has no encoding."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if isinstance(value, (list, tuple)) and type(value) not in (list, tuple) and hasattr(value, "_fields"):
        raise ArtifactError(f"cannot save {where}: it holds a {type(value).__qualname__} (a named tuple)")
    if isinstance(value, torch.Size):
        return {"tuple": [encode(v, where) for v in value]}
    if isinstance(value, tuple):
        return {"tuple": [encode(v, where) for v in value]}
    if isinstance(value, list):
        return [encode(v, where) for v in value]
    if isinstance(value, dict):
        return {"dict": [[encode(k, where), encode(v, where)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"dtype": _DTYPE_NAMES[value]}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": _LAYOUT_NAMES[value]}
    if isinstance(value, torch.memory_format):
        return {"memory_format": _FORMAT_NAMES[value]}
    if isinstance(value, slice):
        return {"slice": [encode(value.start, where), encode(value.stop, where), encode(value.step, where)]}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        from .symbolic import sym_to_json   # symbolic values: the shape algebra
        return {"sym": sym_to_json(value)}
    if isinstance(value, (_torch.OpOverload, _torch.HigherOrderOperator)):   # the call `with_effects` orders
        return {"operator": target_to_json(value, where)}
    if isinstance(value, RuntimeValue):   # its sizes, and the device it reports
        return {"tensor": {**_tensor_meta(value.gp_meta, where), "device": str(value.device)}}
    if isinstance(value, torch.Tensor):
        return {"tensor": _tensor_meta(value, where)}
    raise ArtifactError(f"cannot save {where}: it holds a value of type {type(value).__qualname__}, which the "
                        "artifact format has no encoding for",
                        fix="keep node arguments and metadata to tensors, sizes, Python scalars, strings and "
                            "containers of them")


def _tensor_meta(t: torch.Tensor, where: str) -> dict:
    if t.device.type != "meta":
        raise ArtifactError(f"cannot save {where}: it holds a tensor with data on {t.device}; node values must be "
                            "meta tensors")
    return {"dtype": _DTYPE_NAMES[t.dtype], "shape": [encode(s, where) for s in t.shape],
            "stride": [encode(s, where) for s in t.stride()], "offset": encode(t.storage_offset(), where),
            "requires_grad": t.requires_grad}


class Decoder:
    """Decodes values of one graph: node names resolve to the nodes made so far."""

    def __init__(self, env: ShapeEnv | None, nodes: dict[str, fx.Node] | None = None, context: str = ""):
        self.env = env
        self.nodes = nodes if nodes is not None else {}
        self.context = context

    def decode(self, data: Any) -> Any:
        kind = type(data)
        if kind in _PLAIN:
            return data
        if kind is list:
            return [self.decode(v) for v in data]
        if kind is not dict or len(data) != 1:
            raise ArtifactError(f"{self.context}: malformed value {_short(data)}")
        (kind, body), = data.items()
        handler = _HANDLERS.get(kind)
        if handler is None:
            raise ArtifactError(f"{self.context}: unknown value kind {_short(kind)}")
        return handler(self, body)

    def _tuple(self, body):
        return tuple(self.decode(v) for v in _as_list(body, self.context))

    def _dict(self, body):
        out = {}
        for pair in _as_list(body, self.context):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ArtifactError(f"{self.context}: malformed dict entry {_short(pair)}")
            key = self.decode(pair[0])
            try:
                out[key] = self.decode(pair[1])
            except TypeError:
                raise ArtifactError(f"{self.context}: a dict key {_short(pair[0])} that is not hashable") from None
        return out

    def _node(self, body):
        found = self.nodes.get(body) if isinstance(body, str) else None
        if found is None:
            raise ArtifactError(f"{self.context}: refers to node {_short(body)}, which is not defined before it")
        return found

    def _float(self, body):
        if body not in ("inf", "-inf", "nan"):
            raise ArtifactError(f"{self.context}: malformed float {_short(body)}")
        return float(body)

    def _device(self, body):
        if not isinstance(body, str) or len(body) > 32:
            raise ArtifactError(f"{self.context}: malformed device {_short(body)}")
        try:
            return torch.device(body)
        except RuntimeError:
            raise ArtifactError(f"{self.context}: malformed device {_short(body)}") from None

    def _slice(self, body):
        parts = _as_list(body, self.context)
        if len(parts) != 3:
            raise ArtifactError(f"{self.context}: malformed slice {_short(body)}")
        return slice(*(self.decode(p) for p in parts))

    def _sym(self, body):
        from .symbolic import sym_from_json   # symbolic values: the shape algebra
        return sym_from_json(body, self.env)

    def size(self, data: Any):
        value = self.decode(data)
        if type(value) is not int and not isinstance(value, torch.SymInt):
            raise ArtifactError(f"{self.context}: a tensor size {_short(data)} that is not an integer")
        if type(value) is int and value < 0:
            raise ArtifactError(f"{self.context}: a negative tensor size {value}")
        return value

    def _tensor(self, body):
        if not isinstance(body, dict):
            raise ArtifactError(f"{self.context}: malformed tensor description")
        shape = [self.size(s) for s in _as_list(body.get("shape"), self.context)]
        stride = [self.size(s) for s in _as_list(body.get("stride"), self.context)]
        if len(shape) != len(stride):
            raise ArtifactError(f"{self.context}: a tensor with {len(shape)} sizes and {len(stride)} strides")
        offset = self.size(body.get("offset", 0))
        meta = torch.empty_strided(shape, stride, dtype=dtype_from_name(body.get("dtype")), device=_META)
        if not (type(offset) is int and offset == 0):
            meta = meta.as_strided(shape, stride, offset)
        if body.get("requires_grad") is True:
            meta.requires_grad_(True)
        if "device" in body:
            return RuntimeValue(meta, self._device(body["device"]))
        return meta


def _as_list(body, context: str) -> list:
    if not isinstance(body, list):
        raise ArtifactError(f"{context}: expected a list, found {_short(body)}")
    return body


_HANDLERS: dict[str, Callable] = {
    "tuple": Decoder._tuple, "dict": Decoder._dict, "node": Decoder._node, "float": Decoder._float,
    "device": Decoder._device, "slice": Decoder._slice, "sym": Decoder._sym, "tensor": Decoder._tensor,
    "dtype": lambda self, body: dtype_from_name(body),
    "operator": lambda self, body: _operator(self, body),
}


def _operator(decoder: Decoder, body: Any) -> Any:
    found = target_from_json(body, decoder.context)
    if not isinstance(found, (_torch.OpOverload, _torch.HigherOrderOperator)):
        raise ArtifactError(f"{decoder.context}: an operator argument names {_short(body)}, which is no operator")
    return found


def _table_handler(table: dict, what: str) -> Callable:
    def decode(self, body):
        if not isinstance(body, str) or body not in table:
            raise ArtifactError(f"{self.context}: unknown {what} {_short(body)}")
        return table[body]
    return decode


_HANDLERS["layout"] = _table_handler(_LAYOUTS, "layout")
_HANDLERS["memory_format"] = _table_handler(_FORMATS, "memory format")

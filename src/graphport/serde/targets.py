"""Call targets as JSON, and back from fixed tables and the process's registries only.

A target is an ATen or custom operator overload ({"op": "aten::add.Tensor"}), one of
torch's higher-order operators ({"hop": "cond"}), or a Python function from a fixed
allow-list ({"python": "operator.getitem"}). Loading looks operators up among those
registered in this process; it never imports a module named in the file.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from .. import _torch
from ..errors import ArtifactError, short as _short
from ..ops.vocabulary import PYTHON_TARGETS

_PYTHON_NAMES = {id(fn): name for name, fn in PYTHON_TARGETS.items()}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_quantized", "rngprims", "debugprims"})


def qualified_name(op: Any) -> str:
    """`ns::name.overload`, with `.default` spelled out."""
    return op.name() if "." in op.name() else f"{op.name()}.default"


def target_to_json(target: Any, node: str) -> dict:
    if isinstance(target, _torch.OpOverload):
        return {"op": qualified_name(target)}
    if isinstance(target, _torch.HigherOrderOperator):
        return {"hop": target.name()}
    name = _PYTHON_NAMES.get(id(target))
    if name is not None and PYTHON_TARGETS[name] is target:
        return {"python": name}
    raise ArtifactError(f"cannot save node '{node}': its target {target!r} is not an operator overload, a "
                        "higher-order operator or a supported Python function",
                        fix="call torch operators (or torch.library custom ops) in the program instead")


def custom_namespace(target: Any) -> str | None:
    """The namespace of a custom operator (not one of torch's own), else None."""
    if isinstance(target, _torch.OpOverload) and target.namespace not in _BUILTIN_NAMESPACES:
        return target.namespace
    return None


def target_from_json(data: Any, node: str) -> Any:
    if not isinstance(data, dict) or len(data) != 1:
        raise ArtifactError(f"node '{node}': malformed target {_short(data)}")
    (kind, name), = data.items()
    if not isinstance(name, str):
        raise ArtifactError(f"node '{node}': malformed target {_short(data)}")
    if kind == "python" and name in PYTHON_TARGETS:
        return PYTHON_TARGETS[name]
    if kind == "hop":
        for hop in _torch.higher_order_operators():
            if hop.name() == name:
                return hop
        raise ArtifactError(f"node '{node}' calls the higher-order operator {_short(name)}, which this process "
                            "does not have", fix="load the program with the torch version that saved it")
    if kind == "op":
        return lookup_operator(name, node)
    raise ArtifactError(f"node '{node}': unknown target {_short(data)}")


def lookup_operator(qualname: str, node: str) -> Any:
    """`ns::name.overload` among the operators registered in this process."""
    ns, sep, rest = qualname.partition("::")
    name, _, overload = rest.partition(".")
    if not sep or not all(_IDENT.match(p) for p in (ns, name, overload)) or ns.startswith("__") \
            or hasattr(type(torch.ops), ns):
        raise ArtifactError(f"node '{node}': malformed operator name {_short(qualname)}")
    found = None
    try:
        found = getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError):
        pass
    if not isinstance(found, _torch.OpOverload) or found.name() not in (qualname, qualname.removesuffix(".default")):
        if ns in _BUILTIN_NAMESPACES:
            raise ArtifactError(f"node '{node}' calls {qualname}, which this torch ({torch.__version__}) does not "
                                "have", fix="load the program with the torch version that saved it")
        raise ArtifactError(f"node '{node}' calls the custom operator {qualname}, which is not registered in this "
                            "process", fix=f"import the module that defines the '{ns}' operators "
                                           "(torch.library.custom_op or TORCH_LIBRARY) before graphport.load")
    return found

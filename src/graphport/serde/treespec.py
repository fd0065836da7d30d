"""Pytree specs (the structure of a program's inputs and outputs) as JSON.

A container type is written by the name pytree registered it under; loading finds it
among the types registered in this process (torch's builtin containers, graphport's
register_dataclass, transformers' ModelOutput classes, ...) or, for a named tuple, among
the modules already imported. Nothing is imported by name. A type this process has not
registered whose context is its list of keys (ModelOutput, diffusers' BaseOutput,
dataclasses) loads as a Record (records.py), which saves back as the original type; any
other missing type is an error that names it and says what to import.
"""
from __future__ import annotations

import sys
from typing import Any

from .. import _torch
from ..errors import ArtifactError, short as _short
from .records import Record, record_spec_parts, saved_type_and_context
from .values import Decoder, encode

pytree = _torch.pytree
_NAMEDTUPLE = "collections.namedtuple"
LEAF = "*"


def _type_name(typ: type) -> str:
    entry = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
    name = getattr(entry, "serialized_type_name", None)
    if name is None or name == "NO_SERIALIZED_TYPE_NAME_FOUND":
        return f"{typ.__module__}.{typ.__qualname__}"
    return name


def treespec_to_json(spec: Any) -> Any:
    if spec.is_leaf():
        return LEAF
    typ = spec.type
    name = _type_name(typ)
    if typ is Record:   # a type the loading process had not registered: saved back as itself
        name, context = saved_type_and_context(spec.context)
    elif name == _NAMEDTUPLE:   # one pytree node type for all named tuples; the class is the context
        cls = spec.context
        context = {"class": f"{cls.__module__}.{cls.__qualname__}", "fields": list(cls._fields)}
    else:
        context = encode(spec.context, f"the pytree context of a {typ.__qualname__}")
    return {"type": name, "context": context, "children": [treespec_to_json(c) for c in spec.children()]}


def treespec_from_json(data: Any) -> Any:
    if data == LEAF:
        return pytree.treespec_leaf()
    if not isinstance(data, dict) or not isinstance(data.get("type"), str) or not isinstance(data.get("children"), list):
        raise ArtifactError(f"malformed pytree spec {_short(data)}")
    name = data["type"]
    children = [treespec_from_json(c) for c in data["children"]]
    if name == _NAMEDTUPLE:
        typ, context = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[_NAMEDTUPLE], _namedtuple(data.get("context"))
    else:
        typ = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.get(name)
        context = Decoder(None, context="pytree spec").decode(data.get("context"))
        if typ is None or typ not in pytree.SUPPORTED_NODES or typ is Record:
            stand_in = record_spec_parts(name, context, children)
            if stand_in is None:
                raise ArtifactError(f"the program's inputs or outputs use the container type {name}, which is not "
                                    "registered as a pytree node in this process",
                                    fix=f"import the module that defines {name} (and registers it with pytree) "
                                        "before graphport.load")
            typ, context = stand_in
    try:
        return pytree.TreeSpec(typ, context, children)
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"malformed pytree spec for {name}: {e}") from None


def _namedtuple(context: Any) -> type:
    if not isinstance(context, dict) or not isinstance(context.get("class"), str) \
            or not isinstance(context.get("fields"), list):
        raise ArtifactError(f"malformed named tuple in a pytree spec: {_short(context)}")
    qualified = context["class"]
    for i in range(qualified.count("."), 0, -1):   # the longest imported module prefix
        module_name = qualified.rsplit(".", i)[0]
        module = sys.modules.get(module_name)
        if module is None:
            continue
        found: Any = module
        for part in qualified[len(module_name) + 1:].split("."):
            found = vars(found).get(part) if hasattr(found, "__dict__") else None
        if isinstance(found, type) and pytree.is_namedtuple_class(found):
            if list(found._fields) != context["fields"]:
                raise ArtifactError(f"the named tuple {qualified} has fields {list(found._fields)} in this process, "
                                    f"but the program was saved with {context['fields']}")
            return found
        break
    raise ArtifactError(f"the program's inputs or outputs use the named tuple {qualified}, which is not defined in "
                        "this process", fix=f"import the module that defines {qualified} before graphport.load")

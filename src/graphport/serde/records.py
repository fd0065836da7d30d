"""Record: what a container type this process has not registered loads as.

A program's inputs and outputs may be library containers (transformers' ModelOutput
classes, diffusers' BaseOutput, a dataclass registered with graphport.register_dataclass).
Loading finds the type among those registered with pytree in this process; it never
imports a module named in the file, so in a fresh process (`graphport run file.gport`)
such a type is usually not there. When its saved pytree context is the list of its keys,
as it is for all of those, the container loads as a Record: a plain dict of the same keys
in the same order, with the access the library types give (`out.logits`, `out["logits"]`,
`out[0]`, `out.to_tuple()`), which remembers the type's name (`type_name`) so that saving
the program again writes the original type. Import the library before graphport.load to
get its own classes back.
"""
from __future__ import annotations

from typing import Any

from .. import _torch

pytree = _torch.pytree
SERIALIZED_NAME = "graphport.serde.records.Record"


class Record(dict):
    """A dict of the saved container's keys, in order, standing in for a type this process
    has not registered. Keys read as attributes; an integer or a slice indexes the values,
    as ModelOutput does."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str, items: Any = ()):
        super().__init__(items)
        self.type_name = type_name

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{self.type_name} (loaded as a Record) has no field {name!r}") from None

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)) and not isinstance(key, bool):
            return self.to_tuple()[key]
        return super().__getitem__(key)

    def to_tuple(self) -> tuple:
        return tuple(self.values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.items())
        return f"Record({self.type_name!r}, {fields})" if fields else f"Record({self.type_name!r})"

    def __reduce__(self):
        return Record, (self.type_name, list(self.items()))


def _flatten(record: Record) -> tuple[list, tuple]:
    return list(record.values()), (record.type_name, tuple(record.keys()))


def _unflatten(values: Any, context: tuple) -> Record:
    type_name, keys = context
    return Record(type_name, zip(keys, values))


def _flatten_with_keys(record: Record) -> tuple[list, tuple]:
    return [(pytree.MappingKey(k), v) for k, v in record.items()], (record.type_name, tuple(record.keys()))


pytree.register_pytree_node(Record, _flatten, _unflatten, serialized_type_name=SERIALIZED_NAME,
                            flatten_with_keys_fn=_flatten_with_keys)


def record_spec_parts(type_name: str, context: Any, children: list) -> tuple[type, tuple] | None:
    """(Record, its pytree context) standing in for the unregistered type `type_name`, when
    its saved `context` is the list of its keys (distinct strings, one per child); else None."""
    if isinstance(context, list) and len(context) == len(children) and all(isinstance(k, str) for k in context) \
            and len(set(context)) == len(context):
        return Record, (type_name, tuple(context))
    return None


def saved_type_and_context(context: tuple) -> tuple[str, list]:
    """The original type's name and key list, from a Record spec's context."""
    type_name, keys = context
    return type_name, list(keys)

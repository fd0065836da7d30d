"""The format's JSON Schema (schema.json, beside this file) and the check of graphport.json
against it.

The schema is the one source of truth for the document's form: every key the loader reads,
its type, whether it may be null, and the shapes the runtime relies on (the program's own
call takes a (positional tuple, keyword dict) and has an output structure). load validates
the parsed document against it before any decoder reads a field, so a damaged or hostile
document is an ArtifactError that names the first offending field; what a schema cannot
say (node references, operator names, symbols, expressions, cross-field agreement) the
decoders check as they go. docs/format.md shows this file (a test checks the copy).

The validator is jsonschema-rs (JSON Schema 2020-12, compiled): the pure-Python `jsonschema`
takes about 4 s on a 24-layer transformer's document, four times the rest of the load,
where jsonschema-rs takes milliseconds. The test suite checks the schema itself against the
2020-12 meta-schema, and that both validators agree, with `jsonschema`.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from ..errors import ArtifactError

SCHEMA_FILE = "schema.json"
_MESSAGE_CHARS = 200


@functools.cache
def schema() -> dict:
    return json.loads(resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


@functools.cache
def _validator():
    import jsonschema_rs   # here, not at import: only a load needs it
    return jsonschema_rs.Draft202012Validator(schema())


def schema_errors(doc: Any) -> list[tuple[str, str]]:
    """Every violation of the schema by `doc`, as (JSON path, message) pairs."""
    return [(_path(e.instance_path), e.message) for e in _validator().iter_errors(doc)]


def validate_document(doc: Any) -> None:
    """Refuse a graphport.json that breaks the schema, naming the first field at fault."""
    if _validator().is_valid(doc):
        return
    where, message = schema_errors(doc)[0]
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS] + "..."
    raise ArtifactError(f"graphport.json breaks the format's schema at {where}: {message}",
                        fix="the file is damaged or was not written by graphport.save; save the program again")


def _path(parts) -> str:
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    return text or "the top level"

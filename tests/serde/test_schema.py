"""The format's JSON Schema (src/graphport/serde/schema.json): a valid 2020-12 schema, the
one docs/format.md shows, satisfied by every graphport.json graphport writes, and applied
at load, where a document that breaks it is refused with the field named. `jsonschema`
(the reference implementation) checks the same documents as the loader's validator."""
from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import jsonschema
import pytest
import torch

import graphport as gp
from graphport.serde.schema import schema, schema_errors
from .helpers import saved
from .test_hostile import Small, refused, with_doc
from .test_round_trip import AllDtypes, Counter, Derived, Structured, Tied, Pair

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"


def _doc(data: bytes) -> dict:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return json.loads(zf.read("graphport.json"))


def _programs():
    b = gp.Dim("b", min=2, max=64)
    pair = Pair(torch.randn(3, 2), torch.randn(3, 2))
    yield gp.export(Derived(), (torch.randn(5, 4), torch.randn(6, 4)), dynamic_shapes={"x": {0: b}, "y": {0: b + 1}})
    yield gp.export(Counter(), (torch.randn(2, 3),))
    yield gp.export(Tied(), (torch.tensor([[1, 2, 3]]),))
    yield gp.export(AllDtypes(), (torch.randn(2),))
    yield gp.export(Structured(), (pair, {"k": [torch.randn(2)]}), {"scale": 3.0})


@pytest.fixture(scope="module")
def documents() -> list[dict]:
    docs = [_doc(saved(ep, extra_files={"a.txt": "x"})) for ep in _programs()]
    return docs + [_doc(p.read_bytes()) for p in (Path(__file__).parent / "golden").glob("*.gport")]


def test_the_schema_is_a_valid_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(schema())


def test_docs_show_the_schema_file():
    block = re.search(r"<!-- BEGIN schema.json -->\n```json\n(.*?)```\n<!-- END schema.json -->", DOC.read_text(), re.S)
    assert block is not None and json.loads(block.group(1)) == schema()


def test_written_documents_follow_the_schema(documents):
    reference = jsonschema.Draft202012Validator(schema())
    for doc in documents:
        assert schema_errors(doc) == []
        assert list(reference.iter_errors(doc)) == []


@pytest.mark.parametrize("edit,where", [
    (lambda d: d["graph"]["nodes"][0].update(op="call_module"), "graph.nodes[0].op"),
    (lambda d: d["signature"].pop("inputs"), "signature"),
    (lambda d: d.update(input_aliases=[[1]]), "input_aliases[0]"),
    (lambda d: d["signature"]["outputs"][0].update(arg=None), "signature.outputs[0].arg"),
    (lambda d: d["module_call_graph"][0]["signature"].update(out_spec=None), "module_call_graph[0].signature.out_spec"),
    (lambda d: d["module_call_graph"][0].update(signature=None), "module_call_graph[0].signature"),
    (lambda d: d["module_call_graph"][0].update(fqn="lin"), "module_call_graph[0].fqn"),
    (lambda d: d["signature"]["inputs"][0].update(target=None), "signature.inputs[0].target"),
    (lambda d: d["state_dict"]["lin.weight"].update(shape=[3, -4]), "state_dict.lin.weight.shape[1]"),
    (lambda d: d["graph"]["nodes"][-1]["meta"].update(stack_trace=3), "graph.nodes"),
    (lambda d: d["graph"]["nodes"][1]["meta"]["val"]["tensor"].update(dtype=None), "graph.nodes[1].meta.val"),
    (lambda d: d.update(shape_env={"symbols": []}), "shape_env"),
], ids=["op", "inputs", "aliases", "null argument", "null out_spec", "null root signature", "root fqn",
        "null parameter target", "negative size", "stack trace", "null dtype", "shape_env"])
def test_a_document_breaking_the_schema_is_refused_at_load_with_the_field_named(edit, where):
    archive = saved(gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", max=32)}}))
    broken = _doc(archive)
    edit(broken)
    assert not jsonschema.Draft202012Validator(schema()).is_valid(broken)
    err = refused(with_doc(archive, edit), "schema", where)
    assert "save the program again" in err.fix

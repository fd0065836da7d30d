"""docs/format.md's JSON Schema holds for every graphport.json graphport writes, and
rejects documents that break it."""
from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pytest
import torch

import graphport as gp
from .helpers import saved
from .schema_check import errors
from .test_round_trip import AllDtypes, Counter, Derived, Structured, Tied, Pair

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"


@pytest.fixture(scope="module")
def schema() -> dict:
    block = re.search(r"```json\n(.*?)```", DOC.read_text(), re.S).group(1)
    return json.loads(block)


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


def test_written_documents_follow_the_schema(schema):
    docs = [_doc(saved(ep, extra_files={"a.txt": "x"})) for ep in _programs()]
    docs += [_doc(p.read_bytes()) for p in (Path(__file__).parent / "golden").glob("*.gport")]
    for doc in docs:
        assert errors(doc, schema) == []


def test_the_schema_rejects_broken_documents(schema):
    doc = _doc(saved(next(_programs())))
    broken = json.loads(json.dumps(doc))
    broken["graph"]["nodes"][0]["op"] = "call_module"
    del broken["signature"]["inputs"]
    broken["version"] = [1]
    found = errors(broken, schema)
    assert any("call_module" in e for e in found) and any("inputs" in e for e in found)
    assert any("version" in e for e in found)

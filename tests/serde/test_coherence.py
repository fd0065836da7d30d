"""Sections of graphport.json that each satisfy the schema but disagree with one another
(numbers that point past the inputs, specs that disagree with the signature) are refused
at load, not met inside a call."""
from __future__ import annotations

import pytest
import torch

import graphport as gp
from .helpers import saved
from .test_hostile import Small, refused, with_doc


@pytest.fixture(scope="module")
def archive() -> bytes:
    return saved(gp.export(Small(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: gp.Dim("n", max=32)}}))


def _placeholder(doc, name: str) -> dict:
    return next(n for n in doc["graph"]["nodes"] if n["name"] == name)["meta"]


def _source(doc) -> dict:
    return doc["shape_contract"]["symbols"][0]["source"]


@pytest.mark.parametrize("edit,words", [
    (lambda d: _source(d).update(input=2 ** 63), ["input 9223372036854775808", "1 inputs"]),
    (lambda d: _source(d).update(dim=2), ["dimension 2 of input 0"]),
    (lambda d: _source(d).update(dim=None), ["not an integer input"]),
    (lambda d: _source(d).update(coeff=0), ["coefficient 0"]),
    (lambda d: d["shape_contract"]["dims"][0].update(input=1), ["input 1"]),
    (lambda d: d["shape_contract"]["symbols"][0].update(symbol="t0"), ["symbol s0"]),
    (lambda d: d.update(input_aliases=[[0, 0]]), ["input_aliases"]),
    (lambda d: _placeholder(d, "x").update(val=None), ["input x", "NoneType"]),
    (lambda d: _placeholder(d, "p_lin_weight").update(val=["sym", "s0"]), ["input p_lin_weight", "list"]),
    (lambda d: d.update(input_paths=["x", "y"]), ["input_paths"]),
    (lambda d: d["module_call_graph"][0]["signature"].update(out_spec={"type": "builtins.tuple", "context": None,
                                                                       "children": ["*", "*"]}), ["2 leaves"]),
], ids=["source input", "source dim", "int source", "coefficient", "dims input", "undefined symbol", "alias", "null value", "list value", "paths", "out leaves"])
def test_sections_that_disagree_are_refused_at_load(archive, edit, words):
    err = refused(with_doc(archive, edit), "does not hold together", *words)
    assert "save the program again" in err.fix

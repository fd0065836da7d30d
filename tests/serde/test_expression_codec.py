"""The one size-expression codec (shapes/expr_json.py), shared by the artifact and the shape
contract: data-dependent symbols keep their assumptions, and hostile input (deep, large,
huge powers, huge integers) is refused quickly with an ArtifactError on both paths: the
archive's and a contract carried by a torch program (interop.from_torch)."""
from __future__ import annotations

import copy
import json

import pytest
import sympy
import torch

import graphport as gp
from graphport.interop import from_torch, to_torch
from graphport.interop.to_torch import CONTRACT_META_KEY
from graphport.shapes.contract import ShapeContract
from graphport.shapes.expr_json import (MAX_DEPTH, MAX_NODES, expr_from_json, expr_to_json, size_symbol,
                                        symbol_kind, symbol_of_kind)

from .test_hostile import refused, with_doc
from .helpers import saved

s0 = size_symbol("s0")
HOSTILE = {
    "huge power": ["pow", ["sym", "s0"], ["int", 10 ** 9]],
    "powers merged by sympy": ["pow", ["pow", ["pow", ["sym", "s0"], ["int", 64]], ["int", 64]], ["int", 64]],
    "products merged by sympy": ["mul", *[["pow", ["sym", "s0"], ["int", 64]]] * 8],
    "huge integer": ["int", 10 ** 40],
    "huge rational": ["rational", 1, 10 ** 40],
    "unknown operation": ["exec", ["int", 1]],
    "wrong arity": ["mod", ["sym", "s0"]],
    "not a list": {"sym": "s0"},
    "bad symbol name": ["sym", "s0; import os"],
}


def _deep(levels: int) -> list:
    expr: list = ["sym", "s0"]
    for _ in range(levels):
        expr = ["add", expr, ["int", 1]]
    return expr


HOSTILE["deep"] = ["abs", _deep(MAX_DEPTH + 5)]
HOSTILE["large"] = ["add", *[["sym", f"s{i}"] for i in range(MAX_NODES + 1)]]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_expression_is_refused(name):
    with pytest.raises(gp.ArtifactError):
        expr_from_json(HOSTILE[name])


@pytest.mark.parametrize("kind,assumptions", [("size", {"integer": True, "nonnegative": True}),
                                              ("integer", {"integer": True}), ("real", {"real": True})])
def test_data_dependent_symbols_keep_their_assumptions(kind, assumptions):
    u0 = sympy.Symbol("u0", **assumptions)
    assert symbol_kind(u0) == kind and symbol_of_kind("u0", kind) == u0
    expr = 2 * u0 + s0
    table = {"u0": u0}
    back = expr_from_json(json.loads(json.dumps(expr_to_json(expr, table))), table)
    assert back == expr


def test_a_symbol_the_program_does_not_define_is_not_saved():
    with pytest.raises(gp.ArtifactError, match="u7"):
        expr_to_json(sympy.Symbol("u7", integer=True) + 1)
    with pytest.raises(gp.ArtifactError, match="kind"):
        symbol_of_kind("u0", "complex")


def _contract_json():
    def f(x):
        return x[1:] * 2
    ep = gp.export(f, (torch.randn(6, 3),), dynamic_shapes=({0: gp.Dim("n", min=2, max=32)},))
    return ep, ep.shape_contract.to_json()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_relation_in_a_contract_is_refused(name):
    _, data = _contract_json()
    data["relations"].append({"rel": ["ge", HOSTILE[name], ["int", 1]], "location": None})
    with pytest.raises(gp.ArtifactError):
        ShapeContract.from_json(data)


@pytest.mark.parametrize("edit", [
    lambda d: d.pop("dims"),
    lambda d: d["symbols"][0].update(range=[0]),
    lambda d: d["symbols"][0].update(source={"input": "0", "dim": 0, "coeff": 1, "offset": 0}),
    lambda d: d["symbols"][0].update(kind="complex"),
    lambda d: d["symbols"].append(copy.deepcopy(d["symbols"][0])),
    lambda d: d["relations"].append({"rel": ["ge", ["sym", "s0"], ["int", 1]], "location": ["f", "x", 1]}),
    lambda d: d.update(symbols="s0"),
], ids=["no dims", "short range", "string index", "unknown kind", "symbol twice", "bad location", "not a list"])
def test_malformed_contract_is_an_artifact_error(edit):
    _, data = _contract_json()
    edit(data)
    with pytest.raises(gp.ArtifactError, match="contract|range|kind|symbol|location"):
        ShapeContract.from_json(data)


def test_hostile_contract_carried_by_a_torch_program_is_refused():
    ep, _ = _contract_json()
    tep = to_torch(ep)
    tep.graph_module.meta[CONTRACT_META_KEY]["relations"].append(
        {"rel": ["ge", HOSTILE["powers merged by sympy"], ["int", 1]], "location": None})
    with pytest.raises(gp.ArtifactError, match="power"):
        from_torch(tep)


def test_hostile_relation_in_an_archive_is_refused():
    ep, _ = _contract_json()
    data = saved(ep)
    refused(with_doc(data, lambda d: d["shape_contract"]["relations"].append(
        {"rel": ["ge", HOSTILE["huge power"], ["int", 1]], "location": None})), "power")

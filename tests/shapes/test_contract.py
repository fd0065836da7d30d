"""The shape contract: one typed record of a program's shape facts, serializable as JSON
without str()/eval of sympy, from which range constraints and call-time checks derive."""
import json

import pytest
import sympy
import torch

import graphport as gp
from graphport.shapes.contract import ShapeContract, expr_from_json, expr_to_json, size_symbol
from graphport.shapes.expr import FloorDiv, Mod

s0, s1 = size_symbol("s0"), size_symbol("s1")


@pytest.mark.parametrize("expr", [
    s0, sympy.Integer(7), 2 * s0 + 1, s0 * s1, FloorDiv(s0 + 1, 2), Mod(s0, 4), FloorDiv(FloorDiv(s0, 2), 3),
    sympy.Max(s0, s1), sympy.Min(s0, 3), s0 ** 2, sympy.Rational(1, 2) * s0, sympy.Eq(Mod(s0, 2), 0),
    sympy.Ne(s0, 1), sympy.Lt(s0, s1), sympy.Not(sympy.And(sympy.Eq(s0, 1), sympy.Eq(s1, 0))), sympy.true,
])
def test_expressions_round_trip_through_json(expr):
    data = json.loads(json.dumps(expr_to_json(expr)))
    back = expr_from_json(data)
    assert back == expr
    for values in ({s0: 5, s1: 3}, {s0: 1, s1: 0}):
        assert back.xreplace(values) == expr.xreplace(values)


def test_floor_division_and_modulo_keep_their_own_classes():
    back = expr_from_json(expr_to_json(FloorDiv(s0, 2) + Mod(s0, 3)))
    assert back.atoms(FloorDiv) and back.atoms(Mod)


def test_unknown_operation_is_refused():
    with pytest.raises(gp.ArtifactError):
        expr_from_json(["exec", ["int", 1]])
    with pytest.raises(gp.ArtifactError):
        expr_to_json(sympy.sin(s0))


def _derived_program():
    def f(x, y):
        return x[1:] + y
    dx = gp.Dim("dx", min=3, max=32)
    return gp.export(f, (torch.randn(6, 3), torch.randn(5, 3)), dynamic_shapes=({0: dx}, {0: dx - 1}))


def test_program_contract_round_trips_and_derives_the_same_checks():
    ep = _derived_program()
    contract = ep.shape_contract
    back = ShapeContract.from_json(json.loads(json.dumps(contract.to_json())))
    assert back.to_json() == contract.to_json()
    assert back.range_constraints() == contract.range_constraints() == ep.range_constraints
    assert [(i, d, str(e)) for i, d, e in back.dims] == [(i, d, str(e)) for i, d, e in contract.dims]


def test_range_constraints_come_from_the_contract_and_are_never_negative():
    ep = _derived_program()
    for expr, vr in ep.range_constraints.items():
        assert vr.lower >= 0, f"{expr}: {vr}"
    names = {fact.name for fact in ep.shape_contract.symbols.values()}
    assert names == {"dx"}


def test_contract_sources_say_where_each_symbol_is_read():
    ep = _derived_program()
    (fact,) = ep.shape_contract.symbols.values()
    assert (fact.source.index, fact.source.dim) in {(0, 0), (1, 0)}
    assert fact.range.lower == 3 and fact.range.upper == 32

"""Program data for data-dependent values: range constraints, the shape contract, the
assertion nodes torch.export also emits, the verifier's binding rule, and the runtime error."""
from __future__ import annotations

import operator

import pytest
import torch

import graphport as gp
from graphport.errors import InternalError, RuntimeCheckError
from graphport.shapes.contract import ComputedValue

aten = torch.ops.aten


class ConstrainAsSize(torch.nn.Module):
    def forward(self, x):
        a = x.item()
        torch._check(a >= 0)
        torch._check(a <= 5)
        return torch.zeros((a, 5))


def _targets(graph) -> list:
    return [n.target for n in graph.nodes if n.op == "call_function"]


def test_range_constraints_and_contract_name_the_symbol() -> None:
    ep = gp.export(ConstrainAsSize(), (torch.tensor(4),))
    assert {str(k): (int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()} == {"u0": (0, 5)}
    (fact,) = ep.shape_contract.symbols.values()
    assert isinstance(fact.source, ComputedValue) and fact.source.node == "item"


def test_assertion_nodes_match_torch_export() -> None:
    ep = gp.export(ConstrainAsSize(), (torch.tensor(4),))
    ref = torch.export.export(ConstrainAsSize(), (torch.tensor(4),))
    ours = [t for t in _targets(ep.graph) if t in (aten._assert_scalar.default, aten.item.default)]
    theirs = [t for t in _targets(ref.graph) if t in (aten._assert_scalar.default, aten.item.default)]
    assert sorted(map(str, ours)) == sorted(map(str, theirs))


def test_failed_check_at_call_time_names_check_and_line() -> None:
    ep = gp.export(ConstrainAsSize(), (torch.tensor(4),))
    assert ep.module()(torch.tensor(0)).shape == (0, 5)
    with pytest.raises(RuntimeCheckError) as info:
        ep.module()(torch.tensor(6))
    assert isinstance(info.value, RuntimeError)
    assert "u0 <= 5" in str(info.value) and "test_program.py" in str(info.value)


def test_constrain_as_size_records_the_constraint_node() -> None:
    def f(x, n):
        k = n.item()
        torch._constrain_as_size(k, min=1, max=8)
        return torch.ones(k) * x.sum()
    ep = gp.export(f, (torch.randn(2), torch.tensor(3)))
    assert aten.sym_constrain_range_for_size.default in _targets(ep.graph)
    with pytest.raises(RuntimeCheckError):
        ep.module()(torch.randn(2), torch.tensor(9))


def test_symint_output() -> None:
    def f(x):
        return torch.nonzero(x).shape[0], x.sum().item()
    ep = gp.export(f, (torch.tensor([1., 0., 2.]),))
    assert ep.module()(torch.tensor([0., 0., 3.])) == (1, 3.0)


def test_int_of_a_tensor_asks_for_item() -> None:
    def f(x, n):
        return torch.zeros(int(n)) + x.sum()
    with pytest.raises(gp.errors.DataDependentError) as info:
        gp.export(f, (torch.randn(2), torch.tensor(3)))
    assert "data-dependent" in str(info.value) and "item()" in str(info.value)


def test_question_about_data_dependent_value_names_check() -> None:
    def f(x, n):
        k = n.item()
        return x[:2] if k > 2 else x
    with pytest.raises(gp.errors.DataDependentError) as info:
        gp.export(f, (torch.randn(4), torch.tensor(3)))
    message = str(info.value)
    assert "torch._check(k > 2)" in message and "n.item()" in message and "test_program.py" in message


def test_guard_or_false_questions_need_no_check() -> None:
    def f(x):
        idx = torch.nonzero(x)
        return idx.reshape(-1), idx.contiguous()   # contiguity and reshape ask size questions
    ep = gp.export(f, (torch.tensor([[1, 0], [2, 3]]),))
    for x in (torch.tensor([[0, 0], [0, 0]]), torch.tensor([[1, 1], [1, 1]])):
        for got, want in zip(ep.module()(x), f(x)):
            assert torch.equal(got, want)


def test_verifier_refuses_an_unbound_data_dependent_symbol() -> None:
    ep = gp.export(ConstrainAsSize(), (torch.tensor(4),))
    item = next(n for n in ep.graph.nodes if n.target is aten.item.default)
    ge = next(n for n in ep.graph.nodes if n.target is operator.ge)
    item.target = aten.clone.default   # the value is no longer read: u0 has no binding node
    ge.args = (ge.args[0], 0)
    with pytest.raises(InternalError, match="u0"):
        gp.verify(ep)


def test_dynamic_input_with_check_relating_sizes() -> None:
    def f(x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k].sum(0)
    ep = gp.export(f, (torch.randn(6, 2), torch.tensor(4)), dynamic_shapes={"x": {0: gp.Dim("rows")}, "n": None})
    x = torch.randn(3, 2)
    torch.testing.assert_close(ep.module()(x, torch.tensor(3)), f(x, torch.tensor(3)))
    with pytest.raises(RuntimeCheckError, match="u0 <= s0"):
        ep.module()(x, torch.tensor(4))


def test_sign_question_suggests_the_size_check() -> None:
    def f(x, n):
        return x[: n.item()] if n.item() >= 0 else x
    with pytest.raises(gp.errors.DataDependentError) as info:
        gp.export(f, (torch.randn(4), torch.tensor(3)))
    assert "torch._check(u0 >= 0)" in str(info.value)
    def checked(x, n):
        k = n.item()
        torch._check(k >= 0)
        return x[:k] if k >= 0 else x
    ep = gp.export(checked, (torch.randn(4), torch.tensor(3)))
    x = torch.randn(4)
    for k in (0, 2, 4, 9):
        assert torch.equal(ep.module()(x, torch.tensor(k)), checked(x, torch.tensor(k)))

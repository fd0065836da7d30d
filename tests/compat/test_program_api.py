"""ExportedProgram's API as torch.export documents it: validate(), verifier / verifiers,
dialect, tensor_constants, and run_decompositions with a CustomDecompTable (lazy for ops
registered after the table is made, `pop` to keep an op, `copy`, `update`, `[op] = fn`).
The same user code against both exporters."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

import graphport as gp

from tests.soundness import assert_same


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.table = torch.tensor([1.0, 2.0, 3.0, 4.0])
        self.register_buffer("scratch", torch.ones(4), persistent=False)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x)) * self.table + self.scratch


def _ops(ep) -> Counter:
    return Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")


def test_dialect_verifiers_and_validate(ex):
    ep = ex.export(Small(), (torch.randn(3, 4),))
    assert ep.dialect == "TRAINING"
    assert ep.verifier is ep.verifiers[0] and len(ep.verifiers) == 1
    assert ep.validate() is None
    ep.verifier().check(ep)
    lowered = ep.run_decompositions()
    assert lowered.dialect == "ATEN" and lowered.validate() is None
    assert ep.run_decompositions({}).dialect == "ATEN"
    assert ep.dialect == "TRAINING"


def test_tensor_constants_are_the_lifted_constants(ex):
    ep = ex.export(Small(), (torch.randn(3, 4),))
    assert set(ep.tensor_constants) == {"table", "scratch"}
    assert ep.tensor_constants["table"] is ep.constants["table"]


def test_validate_finds_a_program_broken_by_hand(ex):
    ep = ex.export(Small(), (torch.randn(3, 4),))
    del ep.state_dict["lin.weight"]
    with pytest.raises(Exception, match="lin.weight"):
        ep.validate()


def test_graphport_validate_names_the_broken_rule():
    ep = gp.export(Small(), (torch.randn(3, 4),))
    output = next(n for n in ep.graph.nodes if n.op == "output")
    output.args = ((*output.args[0], output.args[0][0]),)
    with pytest.raises(gp.InternalError, match="output values must match the signature's outputs"):
        ep.validate()


# ----------------------------------------------------------------------------- decomposition tables

_NAMES = itertools.count()


@pytest.fixture
def late_op():
    """A composite custom op registered after the test made its table: a new name per test,
    removed again afterwards."""
    libraries = []

    def register():
        name = f"double_plus_one_{next(_NAMES)}"
        lib = torch.library.Library("gp_compat_tables", "FRAGMENT")
        lib.define(f"{name}(Tensor x) -> Tensor")
        lib.impl(name, lambda x: x * 2 + 1, "CompositeImplicitAutograd")
        libraries.append(lib)
        return getattr(torch.ops.gp_compat_tables, name).default

    yield register
    for lib in libraries:
        lib._destroy()


class CallsLateOp(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x):
        return self.op(torch.relu(x))


def test_the_table_is_the_same_class_with_the_same_keys(ex):
    table = ex.default_decompositions()
    assert isinstance(table, ex.CustomDecompTable) and isinstance(table, dict)
    assert set(table) == set(torch.export.default_decompositions())


def test_an_op_registered_after_the_table_is_in_it_when_read(ex, late_op):
    table = ex.default_decompositions()
    op = late_op()
    assert op in table and callable(table[op])
    x = torch.randn(3, 4)
    lowered = ex.export(CallsLateOp(op), (x,)).run_decompositions(table)
    assert str(op) not in _ops(lowered)
    assert_same(lowered.module()(x), torch.relu(x) * 2 + 1)


def test_pop_before_the_table_is_read_keeps_the_op(ex, late_op):
    table = ex.default_decompositions()
    op = late_op()
    assert callable(table.pop(op))
    assert op not in table
    x = torch.randn(3, 4)
    lowered = ex.export(CallsLateOp(op), (x,)).run_decompositions(table)
    assert _ops(lowered)[str(op)] == 1
    assert_same(lowered.module()(x), torch.relu(x) * 2 + 1)


def test_pop_of_an_absent_aten_op(ex):
    table = ex.default_decompositions()
    table.pop(torch.ops.aten.linear.default)
    assert table.pop(torch.ops.aten.linear.default, "absent") == "absent"
    with pytest.raises(KeyError):
        table.pop(torch.ops.aten.linear.default)


def test_copy_is_independent(ex, late_op):
    table = ex.default_decompositions()
    op = late_op()
    kept = table.copy()
    del kept[torch.ops.aten.linear.default]
    kept.pop(op)
    assert torch.ops.aten.linear.default in table and op in table
    assert torch.ops.aten.linear.default not in kept and op not in kept
    ep = ex.export(CallsLateOp(op), (torch.randn(2, 3),))
    assert _ops(ep.run_decompositions(kept))[str(op)] == 1
    assert _ops(ep.run_decompositions(table))[str(op)] == 0


def _gelu_as_tanh(x, approximate="none"):
    return x * torch.sigmoid(1.702 * x)


def test_setitem_and_update_put_the_users_decomposition(ex):
    x = torch.randn(3, 4)
    model = Small()
    ep = ex.export(model, (x,))
    for write in ("setitem", "update"):
        table = ex.default_decompositions()
        if write == "setitem":
            table[torch.ops.aten.gelu.default] = _gelu_as_tanh
        else:
            table.update({torch.ops.aten.gelu.default: _gelu_as_tanh})
        lowered = ep.run_decompositions(table)
        assert "aten.sigmoid.default" in _ops(lowered) and "aten.gelu.default" not in _ops(lowered)
        want = _gelu_as_tanh(model.lin(x)) * model.table + model.scratch
        assert_same(lowered.module()(x), want, exact=False)


def test_lowered_operators_equal_torchs_with_an_edited_table():
    x = torch.randn(3, 4)
    lowered = {}
    for name, export, table in (("graphport", gp.export, gp.default_decompositions()),
                                ("torch", torch.export.export, torch.export.default_decompositions())):
        del table[torch.ops.aten.linear.default]
        table[torch.ops.aten.gelu.default] = _gelu_as_tanh
        lowered[name] = _ops(export(Small(), (x,)).run_decompositions(table))
    assert lowered["graphport"] == lowered["torch"]

"""Every program of the control-flow corpus through run_decompositions: the default table
(checked against the Core ATen dialect, subgraphs included) and the empty table, each
matching eager on inputs that take every branch and several loop trip counts, and at sizes 0
and 1 where the declared ranges allow them; the lowered subgraphs hold the operators
torch.export's lowering gives them.

A branch or loop body is lowered on its own, computing every size from what it receives
(its SymInt operands, the dims of its tensor operands): the programs below make the
lowering need sizes the capture did not (a `roll` expands into index arithmetic on its dim)."""
from __future__ import annotations

import collections
import io
import operator
import warnings

import pytest
import torch
import torch.fx as fx
from functorch.experimental.control_flow import map as fmap

import graphport as gp
from graphport.capture.received_sizes import ReceivedSizes

from tests.control_flow.corpus import CASES, Case, neg, pos, r
from tests.control_flow.test_corpus import _export, _subgraph_operators

Dim = torch.export.Dim
TABLES = (("core", None), ("empty", {}))
# Programs whose subgraphs compute with a size they receive (a SymInt operand, a dynamic dim).
RECEIVE_SIZES = {"dynamic_dims_inside_branch", "symint_operand", "int_and_symint_operands", "map_symint_operand",
                 "scan_closes_over_size"}


class RollInsideMap(torch.nn.Module):
    """The body gets a slice of dynamic length; the lowered `roll` computes with that length."""

    def forward(self, xs):
        return fmap(lambda x: x.roll(2, 0) * 2, xs)


class RollOfStridedOperand(torch.nn.Module):
    """The branch receives a tensor of 4*b elements only; the lowered `roll` of its strided
    slice needs b itself, recovered inside the branch as `sym_size // 4`."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda y: y[::4].roll(1, 0), lambda y: y[1::4] * 2, (x.reshape(-1),))


class RollOfConcatenatedOperand(torch.nn.Module):
    """The branch receives a tensor of a*b elements; the lowered `roll` of its concatenation
    with itself needs 2*a*b, that product times 2 (a and b are not received one by one)."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda y: torch.cat([y, y]).roll(1, 0), lambda y: torch.cat([y, y]) * 2,
                          (x.reshape(-1),))


class DataDependentOperand(torch.nn.Module):
    """A size read from data, passed to the cond operator as an operand: the branches receive
    the symbol the outer graph binds (its node is renamed by the lowering, theirs is not)."""

    def forward(self, x):
        n = (x > 0).sum().item()
        torch._check(n >= 0)
        return torch.ops.higher_order.cond(x.sum() > 0, lambda x, n: (x * n,), lambda x, n: (x - n,), (x, n))


class UnreadOperand(torch.nn.Module):
    """One operand no branch reads, one read by one branch only."""

    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda unread, a, b: a * 2, lambda unread, a, b: b - 2, (x + 1, x, y))


SIZES_INSIDE = [
    Case("roll_inside_map", RollInsideMap, (r(3, 5, 4),), {"xs": {0: Dim("n", min=1), 1: Dim("t", min=2)}},
         [(r(1, 2, 4),), (r(2, 7, 4),)]),
    Case("roll_of_strided_operand", RollOfStridedOperand, (r(3, 4),), {"x": {0: Dim("b")}},
         [(pos(5, 4),), (neg(5, 4),), (pos(1, 4),), (neg(1, 4),), (r(0, 4),)]),
    Case("roll_of_concatenated_operand", RollOfConcatenatedOperand, (r(3, 4),),
         {"x": {0: Dim("a", min=2), 1: Dim("b", min=2)}}, [(pos(2, 5),), (neg(2, 5),), (pos(6, 2),), (neg(3, 3),)]),
    Case("data_dependent_operand", DataDependentOperand, (r(8),), None, [(pos(8),), (neg(8),), (r(8),)]),
    Case("unread_operand", UnreadOperand, (r(3, 2), r(3, 2)), None, [(pos(3, 2), r(3, 2)), (neg(3, 2), r(3, 2))]),
]
ALL = CASES + SIZES_INSIDE


def _close(a, b) -> bool:
    """Same structure, shapes and values (NaN where eager gives NaN: the mean of an empty tensor)."""
    flat_a, flat_b = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    return len(flat_a) == len(flat_b) and all(x.shape == y.shape and torch.allclose(x, y, atol=1e-5, equal_nan=True)
                                              for x, y in zip(flat_a, flat_b))


def _lower(ep, table):
    return ep.run_decompositions() if table is None else ep.run_decompositions(table)


_EXPORTED: dict[str, tuple] = {}
_LOWERED: dict[tuple[str, str], object] = {}


def _exported_and_lowered(case: Case, table):
    """(model, program, its lowering), each made once per case and table for every test here."""
    if case.name not in _EXPORTED:
        _EXPORTED[case.name] = _export(case)
    model, ep = _EXPORTED[case.name]
    key = (case.name, "core" if table is None else "empty")
    if key not in _LOWERED:
        _LOWERED[key] = _lower(ep, table)
    return model, ep, _LOWERED[key]


def _matches_eager(case: Case, model: torch.nn.Module, program, inputs: list[tuple]) -> None:
    reference = case.make().eval()
    reference.load_state_dict(model.state_dict())
    run = program.module()
    for each in inputs:
        ours = run(*[t.clone() for t in each])
        expected = reference(*[t.clone() for t in each])
        assert _close(ours, expected), f"{case.name} differs from eager on shapes {[list(t.shape) for t in each]}"


@pytest.mark.parametrize("case, table", [pytest.param(c, t, id=f"{c.name}-{n}") for c in ALL for n, t in TABLES])
def test_lowered_program_matches_eager(case: Case, table) -> None:
    model, ep, lowered = _exported_and_lowered(case, table)
    if table is None:
        gp.verify(lowered, dialect="core_aten")
    # no constant appears (a size predicate's metadata was once lifted as one, with `{}`)
    assert lowered.graph_signature.input_specs == ep.graph_signature.input_specs
    _matches_eager(case, model, lowered, [case.args, *case.fresh])


def _small_size_inputs(case: Case) -> list[tuple]:
    """Each input of the case with one dynamic dim cut to 0 or 1, where its range allows."""
    if case.dynamic is None:
        return []
    names = list(case.dynamic)   # the corpus names every input, in order
    found = []
    for each in [case.args, *case.fresh]:
        assert len(names) == len(each), f"{case.name}: dynamic_shapes must name every input"
        for i, name in enumerate(names):
            for dim, spec in (case.dynamic[name] or {}).items():
                for size in (0, 1):
                    if spec.min <= size <= each[i].shape[dim]:
                        found.append(tuple(t.narrow(dim, 0, size) if j == i else t for j, t in enumerate(each)))
    return found


_HAS_SMALL_SIZES = [c for c in ALL if _small_size_inputs(c)]


@pytest.mark.parametrize("case, table", [pytest.param(c, t, id=f"{c.name}-{n}")
                                         for c in _HAS_SMALL_SIZES for n, t in TABLES])
def test_lowered_program_at_sizes_0_and_1_behaves_as_the_program(case: Case, table) -> None:
    """At sizes 0 and 1 in the declared ranges the lowered program refuses what the program
    refuses (with the same error) and otherwise matches eager."""
    model, ep, lowered = _exported_and_lowered(case, table)
    accepted = []
    for each in _small_size_inputs(case):
        try:
            ep.module()(*[t.clone() for t in each])
        except gp.GraphportError as refusal:
            with pytest.raises(type(refusal)):
                lowered.module()(*[t.clone() for t in each])
        else:
            accepted.append(each)
    _matches_eager(case, model, lowered, accepted)


def _placeholders(module: fx.GraphModule, prefix: str = "") -> dict[str, list[str]]:
    """Subgraph attribute path -> its placeholders' names (recursively)."""
    found = {}
    for node in module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(module, node.target)
            found[prefix + node.target] = [n.name for n in sub.graph.nodes if n.op == "placeholder"]
            found.update(_placeholders(sub, f"{prefix}{node.target}."))
    return found


@pytest.mark.parametrize("case, table", [pytest.param(c, t, id=f"{c.name}-{n}")
                                         for c in ALL if c.name in RECEIVE_SIZES or c in SIZES_INSIDE
                                         for n, t in TABLES])
def test_lowered_subgraphs_take_the_same_inputs(case: Case, table) -> None:
    """Sizes are computed inside each subgraph from what it receives: no input is added,
    and the only ones dropped are a cond's operands no branch reads (the int of
    `int_and_symint_operands`, inlined where it is used; `unread_operand`'s `x + 1`)."""
    _, ep, lowered = _exported_and_lowered(case, table)
    lowered = _placeholders(lowered.graph_module)
    source = _placeholders(ep.graph_module)
    unread = {"int_and_symint_operands": ["arg"], "unread_operand": ["add"]}.get(case.name, [])
    assert lowered == {name: [p for p in names if p not in unread] for name, names in source.items()}


def test_a_symbol_received_only_as_a_multiple_is_recovered_inside_the_branch() -> None:
    case = next(c for c in SIZES_INSIDE if c.name == "roll_of_strided_operand")
    branch = _exported_and_lowered(case, None)[2].graph_module.true_graph_0
    sizes = [(n.target, n.args[1]) for n in branch.graph.nodes if n.op == "call_function" and n.target in
             (torch.ops.aten.sym_size.int, operator.floordiv)]
    assert (torch.ops.aten.sym_size.int, 0) in sizes and (operator.floordiv, 4) in sizes


def _torch_lowered(case: Case, table):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.export.export(case.make().eval(), case.args, dynamic_shapes=case.dynamic)
        return _lower(reference, table)


@pytest.mark.parametrize("case, table", [
    pytest.param(c, t, id=f"{c.name}-{n}", marks=[] if (c.name in RECEIVE_SIZES or c in SIZES_INSIDE) and t is None
                 else [pytest.mark.slow])   # torch's export and lowering take seconds: the rest is slow
    for c in ALL if c.torch_exports for n, t in TABLES])
def test_lowered_subgraph_operators_match_torch_export(case: Case, table) -> None:
    ours = _subgraph_operators(_exported_and_lowered(case, table)[2].graph_module)
    theirs = _subgraph_operators(_torch_lowered(case, table).graph_module)
    assert ours, "the program has control flow: it must have subgraphs"
    assert ours == theirs


def _live_operators(module: fx.GraphModule) -> collections.Counter:
    live = set()
    for node in reversed(module.graph.nodes):
        if node.op == "output" or node in live:
            live.add(node)
            live.update(node.all_input_nodes)
    return collections.Counter(str(n.target) for n in live if n.op == "call_function"
                               and n.target is not torch.ops.aten.sym_size.int)


def test_the_cond_operand_no_branch_reads_is_dropped_as_by_torch() -> None:
    case = next(c for c in SIZES_INSIDE if c.name == "unread_operand")
    _, ep, ours = _exported_and_lowered(case, None)
    cond = next(n for n in ours.graph.nodes if n.target is torch.ops.higher_order.cond)
    assert [a.name for a in cond.args[3]] == ["x", "y"]
    assert not any(n.target is torch.ops.aten.add.Tensor for n in ours.graph.nodes)
    assert _live_operators(ours.graph_module) == _live_operators(_torch_lowered(case, None).graph_module)
    # the program itself is left as exported: its cond still takes the three operands
    assert len(next(n for n in ep.graph.nodes if n.target is torch.ops.higher_order.cond).args[3]) == 3


@pytest.mark.parametrize("case", [c for c in CASES if c.name in RECEIVE_SIZES], ids=lambda c: c.name)
def test_lowered_program_round_trips_through_the_artifact(case: Case) -> None:
    model, _, lowered = _exported_and_lowered(case, None)
    buffer = io.BytesIO()
    gp.save(lowered, buffer)
    buffer.seek(0)
    loaded = gp.load(buffer)
    assert str(loaded) == str(lowered)
    gp.verify(loaded, dialect="core_aten")
    _matches_eager(case, model, loaded, [case.args, *case.fresh, *_small_size_inputs(case)])


def test_a_size_the_subgraph_cannot_compute_from_what_it_receives_is_refused() -> None:
    """The size table of a subgraph that receives nothing symbolic has no way to compute
    `b`: the lowering says so instead of reaching into the outer graph."""
    _, ep, _ = _exported_and_lowered(next(c for c in CASES if c.name == "symint_operand"), None)
    size = next(n for n in ep.graph.nodes if n.op == "placeholder").meta["val"].shape[0]
    sizes = ReceivedSizes(size.node.env, [])
    with pytest.raises(gp.UnsupportedFeatureError, match="receives it neither as an operand") as refusal:
        sizes.value(size * 3, lambda *call: pytest.fail(f"nothing can be emitted: {call}"))
    assert isinstance(refusal.value, RuntimeError) and "decomposition table" in str(refusal.value)

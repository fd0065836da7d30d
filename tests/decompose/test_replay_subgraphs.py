"""Subgraphs reached by get_attr (control-flow branches) are lowered recursively, and the
operator using them is recorded as it was. Capture makes no such program yet, so the test
builds one by hand, laid out as torch.export lays out `cond`."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from graphport.capture.replay import ReplayInputs, replay
from graphport.ops.decompositions import TablePolicy, default_decompositions

aten = torch.ops.aten


def _branch(op) -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(3, 4, device="meta")
    out = graph.call_function(op, (x, -1))
    out.meta["val"] = torch.empty(3, 4, device="meta")
    graph.output((out,))
    return fx.GraphModule(torch.nn.Module(), graph)


def _program() -> fx.GraphModule:
    owner = torch.nn.Module()
    owner.true_graph_0, owner.false_graph_0 = _branch(aten.softmax.int), _branch(aten.log_softmax.int)
    graph = fx.Graph()
    pred, x = graph.placeholder("pred"), graph.placeholder("x")
    pred.meta["val"], x.meta["val"] = torch.empty((), dtype=torch.bool, device="meta"), torch.empty(3, 4, device="meta")
    true_gm, false_gm = graph.get_attr("true_graph_0"), graph.get_attr("false_graph_0")
    cond = graph.call_function(torch.ops.higher_order.cond, (pred, true_gm, false_gm, (x,)))
    cond.meta["val"] = (torch.empty(3, 4, device="meta"),)
    cond.meta["stack_trace"] = 'File "model.py", line 3, in forward'
    out = graph.call_function(operator.getitem, (cond, 0))
    out.meta["val"] = cond.meta["val"][0]
    graph.output((out,))
    return fx.GraphModule(owner, graph)


def test_branches_are_lowered_and_the_program_still_runs():
    program = _program()
    lowered = replay(program, TablePolicy(default_decompositions().materialize()),
                     ReplayInputs(devices={}, user_inputs=["pred", "x"])).graph_module
    branch_ops = {name: [str(n.target) for n in getattr(lowered, name).graph.nodes if n.op == "call_function"]
                  for name in ("true_graph_0", "false_graph_0")}
    assert branch_ops == {"true_graph_0": ["aten._softmax.default"], "false_graph_0": ["aten._log_softmax.default"]}
    cond = next(n for n in lowered.graph.nodes if n.target is torch.ops.higher_order.cond)
    assert [a.op for a in cond.args[1:3]] == ["get_attr", "get_attr"]
    assert cond.meta["stack_trace"] == 'File "model.py", line 3, in forward'
    x = torch.randn(3, 4)
    torch.testing.assert_close(lowered.true_graph_0(x), (x.softmax(-1),))
    torch.testing.assert_close(lowered.false_graph_0(x), (x.log_softmax(-1),))

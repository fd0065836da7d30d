"""Graph-level encoding: subgraphs reached by get_attr (control-flow branches, as they
land) are saved recursively; values without an encoding are refused at save, naming
the node."""
from __future__ import annotations

import io
import operator

import pytest
import torch
import torch.fx as fx

import graphport as gp
from graphport.serde.graph_json import graph_from_json, graph_to_json


def _branch(fn_name: str) -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(3, device="meta")
    y = g.call_function(getattr(torch.ops.aten, fn_name).default, (x,))
    y.meta["val"] = torch.empty(3, device="meta")
    g.output((y,))
    return fx.GraphModule(torch.nn.Module(), g)


def test_subgraphs_reached_by_get_attr_round_trip():
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(3, device="meta")
    true_branch, false_branch = g.get_attr("true_graph_0"), g.get_attr("false_graph_0")
    pick = g.call_function(operator.getitem, ((x, x), 0))
    g.output((pick, true_branch, false_branch))
    root = fx.GraphModule({"true_graph_0": _branch("sin"), "false_graph_0": _branch("cos")}, g)
    data = graph_to_json(root)
    assert set(data["subgraphs"]) == {"true_graph_0", "false_graph_0"}
    loaded = graph_from_json(data, None)
    assert loaded.code == root.code
    assert loaded.true_graph_0.code == root.true_graph_0.code
    assert graph_to_json(loaded) == data


def test_subgraph_saved_but_not_used_is_refused():
    root = fx.GraphModule({"true_graph_0": _branch("sin")}, _branch("sin").graph)
    data = graph_to_json(root)
    data["subgraphs"]["stray"] = graph_to_json(_branch("cos"))
    with pytest.raises(gp.ArtifactError, match="stray"):
        graph_from_json(data, None)


def test_value_without_an_encoding_is_refused_at_save():
    ep = gp.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.meta["custom_thing"] = object()
    with pytest.raises(gp.ArtifactError, match=f"meta\\['custom_thing'\\] of node '{node.name}'"):
        gp.save(ep, io.BytesIO())

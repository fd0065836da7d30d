"""Scoped recording: no graph holds a node whose arguments or users live in another graph."""
import torch
import torch.fx as fx

import graphport as gp
from graphport.capture.scope import Scope


def _users_stay_in_their_graph(graph: fx.Graph) -> None:
    members = set(graph.nodes)
    for node in graph.nodes:
        assert set(node.users) <= members, f"{node.name} has users outside the graph: {set(node.users) - members}"
        assert set(node.all_input_nodes) <= members, f"{node.name} reads values outside the graph"


def test_kept_composite_ops_leave_no_users_behind():
    # the output layout of a kept composite op comes from tracing its decomposition in a
    # throwaway scope; its parameters must not gain users there
    for model, x in [(torch.nn.LayerNorm(8), torch.randn(2, 8)),
                     (torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), torch.randn(2, 8)),
                     (torch.nn.MultiheadAttention(8, 2, batch_first=True), torch.randn(2, 5, 8))]:
        args = (x,) if not isinstance(model, torch.nn.MultiheadAttention) else (x, x, x)
        ep = gp.export(model.eval(), args)
        _users_stay_in_their_graph(ep.graph)
        for dynamic in [{0: gp.Dim("b", min=2, max=8)}]:
            spec = (dynamic,) * len(args)
            _users_stay_in_their_graph(gp.export(model.eval(), args, dynamic_shapes=spec).graph)


def test_a_child_scope_lifts_outer_values_as_placeholders():
    root = Scope()
    outer = root.graph.placeholder("x")
    value = object()
    root.bind(value, outer, 0)
    child = Scope(root)
    node, version = child.binding(value)
    assert node.op == "placeholder" and node.graph is child.graph and version == 0
    assert not outer.users
    assert child.lifted == [(value, node)]
    assert child.binding(value) == (node, 0)   # lifted once


def test_verifier_rejects_a_user_in_another_graph():
    ep = gp.export(lambda x: x.relu(), (torch.randn(3),))
    stray = fx.Graph()
    x = next(n for n in ep.graph.nodes if n.op == "placeholder")
    stray.create_node("call_function", torch.ops.aten.neg.default, (x,))
    import pytest
    with pytest.raises(gp.InternalError):
        gp.verify(ep)

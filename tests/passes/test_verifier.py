"""The verifier rejects programs that break the IR contract, naming the node and the rule."""
import pytest
import torch

import graphport as gp


def _ep():
    return gp.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))


def test_exported_programs_pass():
    gp.verify(_ep())


def test_rejects_in_place_operator():
    ep = _ep()
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = torch.ops.aten.add_.Tensor
    with pytest.raises(gp.InternalError, match=r"node 'linear'.*functional"):
        gp.verify(ep)


def test_rejects_missing_metadata():
    ep = _ep()
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    del node.meta["stack_trace"]
    with pytest.raises(gp.InternalError, match="stack_trace"):
        gp.verify(ep)


def test_rejects_python_call_targets():
    ep = _ep()
    node = next(n for n in ep.graph.nodes if n.op == "call_function")
    node.target = torch.nn.functional.linear
    with pytest.raises(gp.InternalError, match="call targets"):
        gp.verify(ep)


def test_rejects_placeholders_out_of_signature_order():
    ep = _ep()
    ep.graph_signature.input_specs.reverse()
    with pytest.raises(gp.InternalError, match="placeholders must match"):
        gp.verify(ep)


def test_rejects_a_node_before_its_argument():
    """A size node moved after its user: `ep.module()` then fails with a KeyError on the
    node, so the verifier must say so first."""
    def fn(x):
        return x.new_zeros(x.shape[0] * 2) + 1

    ep = gp.export(fn, (torch.randn(4),), dynamic_shapes=({0: gp.Dim("n", max=16)},))
    size = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.sym_size.int)
    user = next(iter(size.users))
    user.append(size)   # size now comes right after its first user
    with pytest.raises(gp.InternalError, match=r"argument sym_size is computed after it"):
        gp.verify(ep)


def test_subgraph_placeholders_bind_data_dependent_sizes():
    """A branch receives a data-dependent size as an operand: its placeholder binds u0."""
    def fn(x):
        positive = x[x > 0]
        return torch.cond(positive.shape[0] > 3, lambda t: t * torch.sym_float(t.shape[0]), lambda t: t + 1,
                          (positive,))

    gp.verify(gp.export(fn, (torch.randn(8),)))


def test_rejects_a_size_node_used_outside_its_graph():
    """A branch that reads a size node of the enclosing graph directly (not through an
    operand): the branch cannot compute it, and `ep.module()` would fail with a KeyError on
    that node at its first call. The verifier names it at export."""
    def fn(x):
        y = x.new_ones(x.shape[0]) * x.shape[0]
        return torch.cond(x.shape[0] > 3, lambda t: t * t.shape[0], lambda t: t + 1, (x,)) + y

    ep = gp.export(fn, (torch.randn(6),), dynamic_shapes=({0: gp.Dim("n", max=16)},))
    outer = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.sym_size.int)
    branch = ep.graph_module.true_graph_0
    received = [n for n in branch.graph.nodes if n.op == "placeholder"][1]   # the size, passed as an operand
    received.replace_all_uses_with(outer)
    with pytest.raises(gp.InternalError, match=r"not in the graph"):
        gp.verify(ep)

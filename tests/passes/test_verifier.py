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

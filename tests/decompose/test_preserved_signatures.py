"""run_decompositions keeps preserved module call signatures valid: the lowering computes a
boundary value with other nodes (`linear` becomes `addmm`, `layer_norm` a `getitem` of
`native_layer_norm`), so the signatures name the lowered program's nodes, and unflatten
rebuilds the preserved module from the lowered program."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import graphport as gp
from graphport.signature import ConstantArgument


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x, scale):
        return self.norm(self.lin(x) * scale), x.shape[0]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 4)
        self.block = nn.Sequential(Block())
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        y, n = self.block[0](nn.functional.gelu(self.inp(x)), 2.0)
        return self.out(y).softmax(-1) * n


def _named_values(program, fqn):
    entry = next(e for e in program.module_call_graph if e.fqn == fqn)
    return [a.name for a in entry.signature.inputs + entry.signature.outputs if not isinstance(a, ConstantArgument)]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_unflatten_after_run_decompositions_keeps_the_preserved_module(dynamic):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(3, 4)
    spec = ({0: gp.Dim("batch", min=2, max=16)},) if dynamic else None
    ep = gp.export(copy.deepcopy(model), (x,), dynamic_shapes=spec, preserve_module_call_signature=("block.0",))
    core = ep.run_decompositions()
    names = {n.name for n in core.graph.nodes}
    assert set(_named_values(core, "block.0")) <= names
    assert _named_values(core, "block.0") != _named_values(ep, "block.0")   # the lowering renamed them
    assert not core.constants and not ep.constants
    unflat = gp.unflatten(core)
    assert isinstance(unflat.block[0], nn.Module) and unflat.block[0].graph is not None
    assert not any(str(n.target) == "aten.linear.default" for n in unflat.block[0].graph.nodes)
    their_unflat = None
    if not dynamic:   # torch.export refuses a preserved module returning a symbolic size
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = torch.export.export(copy.deepcopy(model), (x,), preserve_module_call_signature=("block.0",))
            their_unflat = torch.export.unflatten(theirs.run_decompositions())
    for batch in (3, 2, 7) if dynamic else (3,):
        fresh = torch.randn(batch, 4)
        torch.testing.assert_close(unflat(fresh), model(fresh))
        if their_unflat is not None:
            torch.testing.assert_close(unflat(fresh), their_unflat(fresh))
        h = torch.randn(batch, 4)   # the preserved module called on its own, with its own signature
        torch.testing.assert_close(unflat.block[0](h, 2.0), model.block[0](h, 2.0))

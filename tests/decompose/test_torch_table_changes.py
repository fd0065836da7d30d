"""graphport's default table follows torch's decomposition table when it changes (it is a
mutable dict: `torch._decomp.register_decomposition` adds to it)."""
import torch
import torch._decomp

import graphport as gp
from graphport.ops.decompositions import lowerable

_OP = torch.ops.aten.addcmul.default   # in torch's Core ATen lowering, not a composite


def test_an_entry_torch_drops_and_restores_is_dropped_and_restored():
    assert _OP in gp.default_decompositions() and lowerable(_OP)
    fn = torch._decomp.decomposition_table.pop(_OP)
    try:
        assert _OP not in gp.default_decompositions() and not lowerable(_OP)
    finally:
        torch._decomp.decomposition_table[_OP] = fn
    assert gp.default_decompositions()[_OP] is fn and lowerable(_OP)

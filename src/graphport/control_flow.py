"""`graphport.cond` and `graphport.map`: torch's own control-flow functions, re-exported.

They are the same objects as `torch.cond` and `functorch.experimental.control_flow.map`, so
in eager they behave exactly as torch's, and graphport.export captures them as it captures
torch's (one higher-order node with subgraphs; see docs/ir.md).
"""
from functorch.experimental.control_flow import map
from torch import cond

__all__ = ["cond", "map"]

"""`graphport.cond`, `map`, `while_loop` and `scan`: torch's own control-flow functions, re-exported.

They are the same objects as `torch.cond`, `functorch.experimental.control_flow.map` and
torch's `while_loop` / `scan` (torch._higher_order_ops, reached through graphport._torch),
so in eager they behave exactly as torch's, and graphport.export captures them as it
captures torch's (one higher-order node with subgraphs; see docs/ir.md).
"""
from functorch.experimental.control_flow import map
from torch import cond

from ._torch import scan, while_loop

__all__ = ["cond", "map", "while_loop", "scan"]

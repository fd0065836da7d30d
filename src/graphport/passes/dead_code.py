"""Remove graph values nothing uses. Capture records every call, used or not."""
from __future__ import annotations

import torch.fx as fx

from ..ops.kinds import has_side_effects


def eliminate_dead_code(graph: fx.Graph) -> None:
    for node in reversed(graph.nodes):
        if node.op == "call_function" and not node.users and not has_side_effects(node.target):
            graph.erase_node(node)

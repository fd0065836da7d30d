"""Remove values capture made for itself that nothing uses.

Every call the program made stays, used or not: an unused op can still raise in eager
for some inputs (an index out of range once a dimension is small), and a random op
advances the generator. What goes are the values capture introduced on its own account
(view replays, scatters back to a base nobody reads, size arithmetic) once unused.
"""
from __future__ import annotations

import torch.fx as fx

from ..ops.kinds import is_impure


def eliminate_dead_code(graph: fx.Graph, user_calls: set[fx.Node]) -> None:
    for node in reversed(graph.nodes):
        if node.op == "call_function" and not node.users and node not in user_calls \
                and not is_impure(node.target):
            graph.erase_node(node)

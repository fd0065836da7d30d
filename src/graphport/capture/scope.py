"""Scopes: a graph being recorded, and the graph value each traced value has in it.

The program's graph is the root scope. A child scope records a graph of its own (a
branch or loop body, a probe that computes a composite op's output layout, a re-trace
for decompositions); when code inside it uses a value bound only in an outer scope, the
value is lifted in as a placeholder of the child graph, so no graph ever holds a node
whose arguments live in another graph.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch.fx as fx


class Scope:
    def __init__(self, parent: "Scope | None" = None, recording: bool = True):
        self.graph = fx.Graph()
        self.parent = parent
        self.recording = recording   # False: metadata only; the graph is thrown away
        self._values: dict[int, tuple[Any, fx.Node, int]] = {}   # id(tensor) -> (tensor, node, version)
        self.sizes: dict[sympy.Basic, fx.Node] = {}              # size expression -> its node here
        self.lifted: list[tuple[Any, fx.Node]] = []               # (outer value, placeholder), in order
        self.lifted_from: dict[fx.Node, fx.Node] = {}             # placeholder -> the parent's node it stands for
        self.modules: dict[str, Any] = {}                         # subgraph modules (cond branches, bodies) by attribute

    def bind(self, tensor, node: fx.Node, version: int) -> None:
        self._values[id(tensor)] = (tensor, node, version)

    def bound_here(self, tensor) -> fx.Node | None:
        """The node `tensor` is bound to in this scope itself, without lifting."""
        found = self._values.get(id(tensor))
        return found[1] if found is not None else None

    def find(self, tensor) -> fx.Node | None:
        """The node of `tensor` in this scope or the nearest enclosing one, without lifting."""
        scope = self
        while scope is not None:
            found = scope.bound_here(tensor)
            if found is not None:
                return found
            scope = scope.parent
        return None

    def rebound(self):
        """(tensor, node) of every tensor bound in this scope."""
        return [(tensor, node) for tensor, node, _ in self._values.values()]

    def binding(self, tensor) -> tuple[fx.Node, int] | None:
        """(node, version) of `tensor` here, lifting it from an outer scope if needed."""
        found = self._values.get(id(tensor))
        if found is not None:
            return found[1], found[2]
        if self.parent is None:
            return None
        outer = self.parent.binding(tensor)
        if outer is None:
            return None
        node = self.lift(outer[0], tensor)
        self.bind(tensor, node, outer[1])
        return node, outer[1]

    def lift(self, outer_node: fx.Node, value: Any) -> fx.Node:
        """A placeholder standing for an outer scope's node."""
        node = self.graph.placeholder(outer_node.name)
        node.meta.update({k: v for k, v in outer_node.meta.items() if k == "val"})
        self.lifted.append((value, node))
        self.lifted_from[node] = outer_node
        return node

    def size(self, expr: sympy.Basic, outer: "fx.Node | None" = None) -> fx.Node | None:
        """The node of a size expression here; `outer` is the parent's node to lift."""
        found = self.sizes.get(expr)
        if found is None and outer is not None:
            found = self.sizes[expr] = self.lift(outer, expr)
        return found

"""A lowered program without its effect tokens: each `with_effects(token, op, *args)` back to
`op(*args)`, the TOKEN input and output gone.

Tokens make the order of effectful calls data flow for passes that reorder (capture/effects.py).
Code that runs the graph as written, in node order, does not need them, and the module
hierarchy `unflatten` rebuilds has no place for a value threaded through every module;
torch's unflatten removes them the same way first.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import torch.fx as fx

from ..signature import ExportGraphSignature, InputKind, OutputKind
from ..graph_code import keyword_safe

if TYPE_CHECKING:   # passes take a program and return ep.replace(...): they sit below program.py
    from ..program import ExportedProgram

_WITH_EFFECTS = "with_effects"


def _is_with_effects(node: fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "name", lambda: None)() == _WITH_EFFECTS


def without_effect_tokens(ep: ExportedProgram) -> ExportedProgram:
    """`ep` itself when it has no tokens, else a new program calling the same operators in the
    same order without them (`ep` is left untouched)."""
    sig = ep.graph_signature
    token_names = set(sig.input_tokens)
    if not token_names:
        return ep
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node | None] = {}
    direct: dict[fx.Node, tuple[fx.Node, bool]] = {}   # with_effects node -> (direct call, returns one value)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in token_names:
            env[node] = None
        elif _is_with_effects(node):
            _, op, *args = node.args
            call = graph.call_function(op, tuple(fx.map_arg(tuple(args), env.__getitem__)),
                                       fx.map_arg(dict(node.kwargs), env.__getitem__))
            call.meta = dict(node.meta)
            results = node.meta["val"][1:]
            call.meta["val"] = results[0] if len(results) == 1 else tuple(results)
            direct[node] = (call, len(results) == 1)
            env[node] = call
        elif node.op == "call_function" and node.target is operator.getitem and node.args[0] in direct:
            call, single = direct[node.args[0]]
            index = node.args[1]
            if index == 0:
                env[node] = None   # the new token
            elif single:
                env[node] = call
            else:
                env[node] = graph.call_function(operator.getitem, (call, index - 1))
                env[node].meta = dict(node.meta)
        elif node.op == "output":
            kept = [v for v, spec in zip(node.args[0], sig.output_specs) if spec.kind is not OutputKind.TOKEN]
            graph.output(tuple(fx.map_arg(tuple(kept), env.__getitem__)))
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    signature = ExportGraphSignature([s for s in sig.input_specs if s.kind is not InputKind.TOKEN],
                                     [s for s in sig.output_specs if s.kind is not OutputKind.TOKEN])
    return ep.replace(graph_module=fx.GraphModule(ep.graph_module, keyword_safe(graph), class_name="GraphModule"),
                      graph_signature=signature)

"""An fx GraphModule as JSON: its nodes in order, and the subgraphs its get_attr nodes reach.

Each node keeps its name, op, target, arguments and every metadata key, so the loaded
graph prints as the saved one did. A get_attr node may only reach a GraphModule (the
branch or body of a control-flow operator); that graph is saved, recursively, under the
attribute's name.
"""
from __future__ import annotations

import keyword
import re
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from .. import _torch
from ..errors import ArtifactError, short as _short
from .targets import target_from_json, target_to_json
from .values import Decoder, encode

if TYPE_CHECKING:   # annotations only: a static program's load does not import the shape algebra (sympy)
    from ..shapes.env import ShapeEnv

_OPS = ("placeholder", "call_function", "get_attr", "output")
_ATTR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
MAX_NESTING = 32


def graph_to_json(gm: fx.GraphModule) -> dict:
    nodes, subgraphs = [], {}
    for n in gm.graph.nodes:
        where = f"node '{n.name}'"
        if n.op == "call_function":
            target: Any = target_to_json(n.target, n.name)
        elif n.op == "get_attr":
            sub = _attribute(gm, n.target)
            if not isinstance(sub, fx.GraphModule):
                raise ArtifactError(f"cannot save {where}: get_attr reaches a {type(sub).__qualname__}, not a graph; "
                                    "state must be lifted to placeholders")
            subgraphs.setdefault(n.target, graph_to_json(sub))
            target = n.target
        elif n.op in ("placeholder", "output"):
            target = n.target
        else:
            raise ArtifactError(f"cannot save {where}: {n.op} nodes are not part of the exported IR")
        nodes.append({
            "name": n.name, "op": n.op, "target": target,
            "args": encode(tuple(n.args), f"the arguments of {where}"),
            "kwargs": {k: encode(v, f"argument {k} of {where}") for k, v in n.kwargs.items()},
            "meta": {k: encode(v, f"meta['{k}'] of {where}") for k, v in n.meta.items() if k not in DERIVED_META},
        })
    return {"nodes": nodes, "subgraphs": subgraphs}


# Metadata rebuilt from the rest on load (values.py): tensor_meta from val, and
# source_fn_stack, which holds the torch function object itself (torch_fn names it).
DERIVED_META = ("tensor_meta", "source_fn_stack")


def _attribute(gm: torch.nn.Module, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def graph_from_json(data: Any, env: ShapeEnv | None, where: str = "the graph", depth: int = 0) -> fx.GraphModule:
    if depth > MAX_NESTING:
        raise ArtifactError(f"{where}: subgraphs nest more than {MAX_NESTING} levels deep")
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) \
            or not isinstance(data.get("subgraphs"), dict):
        raise ArtifactError(f"{where}: malformed graph")
    subgraphs = {}
    for name, sub in data["subgraphs"].items():
        if not _ATTR.match(name):
            raise ArtifactError(f"{where}: malformed subgraph name {_short(name)}")
        subgraphs[name] = graph_from_json(sub, env, f"subgraph {name}", depth + 1)
    graph = fx.Graph()
    nodes: dict[str, fx.Node] = {}
    decoder = Decoder(env, nodes)
    for entry in data["nodes"]:
        node = _node(graph, entry, decoder, subgraphs, where)
        nodes[node.name] = node
    outputs = [n for n in graph.nodes if n.op == "output"]
    if len(outputs) != 1 or outputs[0] is not next(iter(reversed(graph.nodes))):
        raise ArtifactError(f"{where}: a graph needs exactly one output node, last")
    reached = {n.target for n in graph.nodes if n.op == "get_attr"}
    if reached != set(subgraphs):
        raise ArtifactError(f"{where}: subgraphs {sorted(set(subgraphs) ^ reached)} are saved but not used, or used "
                            "but not saved")
    return _torch.lazy_graph_module(subgraphs or torch.nn.Module(), graph)


def _node(graph: fx.Graph, entry: Any, decoder: Decoder, subgraphs: dict, where: str) -> fx.Node:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or entry.get("op") not in _OPS:
        raise ArtifactError(f"{where}: malformed node {_short(entry)}")
    name, op = entry["name"], entry["op"]
    if not _identifier(name) or name in decoder.nodes:
        raise ArtifactError(f"{where}: node name {_short(name)} is not an identifier, or is used twice")
    decoder.context = f"node '{name}'"
    raw_target = entry.get("target")
    if op == "call_function":
        target = target_from_json(raw_target, name)
    elif op == "get_attr":
        if raw_target not in subgraphs:
            raise ArtifactError(f"node '{name}' reads the attribute {_short(raw_target)}, which is no saved subgraph")
        target = raw_target
    elif op == "placeholder" and _identifier(raw_target):
        target = raw_target
    elif op == "output" and raw_target == "output":
        target = raw_target
    else:
        raise ArtifactError(f"node '{name}': malformed target {_short(raw_target)} for a {op} node")
    args = decoder.decode(entry.get("args"))
    kwargs = entry.get("kwargs")
    if not isinstance(args, tuple) or not isinstance(kwargs, dict) or not isinstance(entry.get("meta"), dict):
        raise ArtifactError(f"node '{name}': malformed arguments or metadata")
    if not all(_identifier(k) for k in kwargs):   # fx writes them into the code it compiles
        raise ArtifactError(f"node '{name}': keyword argument names must be identifiers")
    kwargs = {k: decoder.decode(v) for k, v in kwargs.items()}
    if op == "output" and (len(args) != 1 or kwargs) or op in ("placeholder", "get_attr") and (args or kwargs):
        raise ArtifactError(f"node '{name}': a {op} node with arguments it cannot have")
    node = graph.create_node(op, target, args, kwargs, name=name)
    if node.name != name and op == "placeholder" and name not in decoder.nodes:
        node.name = name    # fx avoids builtins (`input` -> `input_1`); programs keep the argument's name
    if node.name != name:
        raise ArtifactError(f"node name {_short(name)} is reserved or taken in the graph")
    for key, value in entry["meta"].items():
        node.meta[key] = decoded = decoder.decode(value)
        _check_comment_safe(decoded, name, key)
    return node


def _identifier(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _check_comment_safe(value: Any, node: str, key: str) -> None:
    """fx prints metadata (stack traces, annotations) as comments in the code it compiles:
    a line break there would end the comment, so metadata strings may not hold one (stack
    traces keep theirs, which fx splits on)."""
    if isinstance(value, str):
        if "\r" in value or "\n" in value and key != "stack_trace":
            raise ArtifactError(f"node '{node}': meta['{key}'] holds a line break where none belongs")
    elif isinstance(value, (torch.Tensor, int, float)) or value is None:   # the common leaves: nothing to print
        return
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_comment_safe(item, node, key)
    elif isinstance(value, dict):
        for k, item in value.items():
            _check_comment_safe(k, node, key)
            _check_comment_safe(item, node, key)

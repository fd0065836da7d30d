"""The program as plain data for the viewer: graphs, nodes, module groups, source lines.

Everything the page shows is computed here, once, so the page only lays out and draws.
Strings that repeat across thousands of nodes (source lines, module paths) are stored once
in tables and referred to by index, which keeps a 10,000-node page a few megabytes.
"""
from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx as fx

from ..program import ExportedProgram
from ..signature import InputKind
from ..describe import describe_value, op_name, readable_names

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')


class _Tables:
    def __init__(self):
        self.sources: list[str] = []
        self._source_index: dict[str, int] = {}
        self.groups: list[dict[str, Any]] = []     # {"path", "type", "parent"}
        self._group_index: dict[str, int] = {}

    def source(self, text: str | None) -> int:
        if not text:
            return -1
        if text not in self._source_index:
            self._source_index[text] = len(self.sources)
            self.sources.append(text)
        return self._source_index[text]

    def group(self, chain: list[tuple[str, str]]) -> int:
        """The group of the innermost module in `chain` (outermost first), made with its parents."""
        parent = -1
        for path, type_name in chain:
            if path not in self._group_index:
                self._group_index[path] = len(self.groups)
                self.groups.append({"path": path, "type": type_name.rsplit(".", 1)[-1], "parent": parent})
            parent = self._group_index[path]
        return parent

    def group_of_path(self, path: str) -> int:
        return self._group_index.get(path, -1)


def program_data(ep: ExportedProgram) -> dict[str, Any]:
    """{"graphs": {name: [node, ...]}, "sources": [...], "groups": [...], "title": ...}."""
    tables = _Tables()
    readable = readable_names(ep)
    state_targets = {s.arg.name: (s.kind, s.target) for s in ep.graph_signature.input_specs
                     if s.kind is not InputKind.USER_INPUT}
    graphs: dict[str, list[dict[str, Any]]] = {}
    todo: list[tuple[str, fx.GraphModule]] = [("main", ep.graph_module)]
    while todo:
        name, gm = todo.pop(0)
        graphs[name] = _graph_nodes(gm, tables, readable, state_targets if name == "main" else {}, todo, name)
    return {"graphs": graphs, "sources": tables.sources, "groups": tables.groups,
            "dims": {str(s): str(n) for s, n in readable.items()}}


def _graph_nodes(gm: fx.GraphModule, tables: _Tables, readable: dict, state_targets: dict,
                 todo: list, graph_name: str) -> list[dict[str, Any]]:
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    nodes = []
    pending_state = []   # placeholders of parameters/buffers, grouped once their modules are known
    for n in gm.graph.nodes:
        item: dict[str, Any] = {"n": n.name, "k": n.op, "o": _op(n, state_targets), "s": _shape(n, readable),
                                "l": tables.source(_source(n.meta.get("stack_trace"))),
                                "g": tables.group(_module_chain(n.meta.get("nn_module_stack"))),
                                "i": [index[a] for a in n.all_input_nodes]}
        if n.op == "placeholder" and n.name in state_targets:
            kind, target = state_targets[n.name]
            item["t"] = f"{kind.name.lower()} {target}"
            pending_state.append((item, target))
        subgraphs = [a.target for a in n.all_input_nodes
                     if a.op == "get_attr" and isinstance(getattr(gm, a.target, None), fx.GraphModule)]
        if subgraphs:
            item["sg"] = [f"{graph_name}/{t}" if graph_name != "main" else t for t in subgraphs]
            for target, full in zip(subgraphs, item["sg"]):
                todo.append((full, getattr(gm, target)))
        nodes.append(item)
    for item, target in pending_state:   # a weight sits with the module that owns it
        owner = target.rpartition(".")[0]
        while owner and tables.group_of_path(owner) < 0:
            owner = owner.rpartition(".")[0]
        item["g"] = tables.group_of_path(owner)
    return nodes


def _op(n: fx.Node, state_targets: dict) -> str:
    if n.op == "call_function":
        return op_name(n.target)
    if n.op == "placeholder":
        return "parameter" if state_targets.get(n.name, (None,))[0] is InputKind.PARAMETER else \
            "state" if n.name in state_targets else "input"
    return n.op


def _shape(n: fx.Node, readable: dict) -> str:
    val = n.meta.get("val")
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(describe_value(v, readable) for v in val) + ")"
    if val is None:
        return ""
    if isinstance(val, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return describe_value(val, readable)
    return type(val).__name__


def _source(stack_trace: str | None) -> str | None:
    """`file.py:12 in forward: code` for the innermost user frame of a node's stack trace."""
    if not stack_trace:
        return None
    frames = list(_FRAME.finditer(stack_trace))
    if not frames:
        return None
    m = frames[-1]
    return f"{m['file']}:{m['line']} in {m['func']}: {m['code'].strip()}"


def _module_chain(stack: dict | None) -> list[tuple[str, str]]:
    """The module path of a node, outermost first, without the root module."""
    if not stack:
        return []
    chain = []
    for value in stack.values():
        path, type_name = value[0], value[1]
        type_name = type_name if isinstance(type_name, str) else getattr(type_name, "__qualname__", str(type_name))
        if path:
            chain.append((path, type_name))
    return chain

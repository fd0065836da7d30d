"""The program as plain data for the viewer: graphs, nodes, arguments, module groups, source lines.

Everything the page shows is computed here, once, so the page only lays out and draws.
Strings that repeat across thousands of nodes (source lines, module paths) are stored once
in tables and referred to by index, which keeps a 10,000-node page a few megabytes.

A node is a small dict with short keys (the page reads them):
  n name, k fx op, o operator (`aten.conv2d.default`), s output value (`float32[batch, 8, 16, 16]`),
  l source line (index into "sources"), g module group (index into "groups"), i input node indices,
  a arguments [[schema name, value, 1 if the schema default], ...] where a value is a node index
    (a number), a literal as text (a string), or a list of those,
  w 1 for weights, buffers and constants (hidden by default, drawn next to their users on demand),
  t what a weight is (`parameter conv.weight`), st its statistics {min, max, mean, std} as text,
  sg the control-flow subgraphs a node runs.
"""
from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx as fx

from ..describe import describe_value, op_name, readable_names
from ..program import ExportedProgram
from ..signature import InputKind

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')

# a weight's statistics read at most this many of its values (evenly spaced; the page says when
# they are sampled): no more than torch's grain for splitting an op across threads, so each
# statistic runs on the calling thread, and a 24-layer BERT-base's 393 weights take 0.3 s
STATS_SAMPLE = 1 << 15


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
    """{"graphs": {name: [node, ...]}, "sources": [...], "groups": [...], "dims": {symbol: name}}."""
    tables = _Tables()
    readable = readable_names(ep)
    state = {s.arg.name: (s.kind, s.target) for s in ep.graph_signature.input_specs
             if s.kind is not InputKind.USER_INPUT}
    tensors = {**ep.state_dict, **ep.constants}
    graphs: dict[str, list[dict[str, Any]]] = {}
    todo: list[tuple[str, fx.GraphModule]] = [("main", ep.graph_module)]
    while todo:
        name, gm = todo.pop(0)
        graphs[name] = _graph_nodes(gm, tables, readable, state if name == "main" else {}, tensors, todo, name)
    return {"graphs": graphs, "sources": tables.sources, "groups": tables.groups,
            "dims": {str(s): str(n) for s, n in readable.items()}}


def _graph_nodes(gm: fx.GraphModule, tables: _Tables, readable: dict, state: dict, tensors: dict,
                 todo: list, graph_name: str) -> list[dict[str, Any]]:
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    nodes = []
    pending_state = []   # placeholders of parameters/buffers, grouped once their modules are known
    for n in gm.graph.nodes:
        item: dict[str, Any] = {"n": n.name, "k": n.op, "o": _op(n, state), "s": _shape(n, readable),
                                "l": tables.source(_source(n.meta.get("stack_trace"))),
                                "g": tables.group(_module_chain(n.meta.get("nn_module_stack"))),
                                "i": [index[a] for a in n.all_input_nodes]}
        if n.op == "call_function":
            item["a"] = _arguments(n, index, readable)
        elif n.op == "output":
            item["a"] = [["result", _value(n.args[0], index, readable), 0]]
        if n.op == "placeholder" and n.name in state:
            kind, target = state[n.name]
            item["t"] = kind.name.lower() if target is None else f"{kind.name.lower()} {target}"
            item["w"] = 1
            if isinstance(tensors.get(target), torch.Tensor):
                item.update(_statistics(tensors[target]))
            if target is not None:   # an effect token belongs to no module
                pending_state.append((item, target))
        elif n.op == "get_attr":
            item["w"] = 1
            attr = getattr(gm, n.target, None)
            if isinstance(attr, torch.Tensor):
                item["t"] = f"constant {n.target}"
                item.update(_statistics(attr))
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


def _op(n: fx.Node, state: dict) -> str:
    if n.op == "call_function":
        return op_name(n.target)
    if n.op == "placeholder":
        kind = state.get(n.name, (None,))[0]
        return {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer",
                InputKind.CONSTANT_TENSOR: "constant", InputKind.CUSTOM_OBJ: "custom object",
                InputKind.TOKEN: "effect token", None: "input"}.get(kind, "state")
    return n.op


def _arguments(n: fx.Node, index: dict, readable: dict) -> list[list]:
    """Every argument of a call, named after the operator's schema (defaults included and
    marked), or positionally (`arg0`, ...) for callables without a schema."""
    schema = getattr(n.target, "_schema", None)
    if schema is None:
        return ([[f"arg{k}", _value(a, index, readable), 0] for k, a in enumerate(n.args)]
                + [[k, _value(v, index, readable), 0] for k, v in n.kwargs.items()])
    out = []
    for k, arg in enumerate(schema.arguments):
        if k < len(n.args) and not arg.kwarg_only:
            out.append([arg.name, _value(n.args[k], index, readable), 0])
        elif arg.name in n.kwargs:
            out.append([arg.name, _value(n.kwargs[arg.name], index, readable), 0])
        elif arg.has_default_value():
            out.append([arg.name, _literal(arg.default_value, readable), 1])
    return out


def _value(v, index: dict, readable: dict):
    if isinstance(v, fx.Node):
        return index[v]
    if isinstance(v, (list, tuple)) and any(isinstance(x, fx.Node) for x in v):
        return [_value(x, index, readable) for x in v]
    return _literal(v, readable)


def _literal(v, readable: dict) -> str:
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_literal(x, readable) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)):
        return describe_value(v, readable)
    return repr(v)


def _statistics(t: torch.Tensor) -> dict[str, Any]:
    """min/max/mean/std of a weight's values as text (3 significant digits), read once when the
    page is written; over an evenly spaced sample of STATS_SAMPLE values for larger tensors
    (`sampled` says how many of how many); none for tensors without data (meta) or values."""
    if not isinstance(t, torch.Tensor) or t.is_meta or t.numel() == 0 or t.is_complex() or t.layout != torch.strided:
        return {}
    with torch.no_grad():
        values = t.detach().reshape(-1)
        stride = -(-values.numel() // STATS_SAMPLE)
        values = values[::stride].to(torch.float64 if t.dtype is torch.float64 else torch.float32)
        lo, hi = torch.aminmax(values)
        stats = {"min": lo.item(), "max": hi.item(), "mean": values.mean().item()}
        if values.numel() > 1:
            stats["std"] = values.std().item()
    out: dict[str, Any] = {"st": {k: f"{v:.3g}" for k, v in stats.items()}}
    if stride > 1:
        out["st"]["sampled"] = f"{values.numel()} of {t.numel()} values"
    return out


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

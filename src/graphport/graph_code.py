"""Python code for graphs that call an operator whose name is a Python keyword.

fx writes a call to an ATen operator as its qualified name (`torch.ops.aten.random.from(...)`),
which is not Python when a part of the name is a keyword: `aten::random.from` (the draw
`x.random_(0, 10)` records) makes every graph holding it fail to compile with a SyntaxError,
in fx's own GraphModule as in torch.export. The graph itself is right (its target is the
operator object); only the generated source is not. `keyword_safe(graph)` gives such a graph a
code generator that writes those calls as attribute lookups,
`getattr(torch.ops.aten.random, 'from')(...)`, and leaves every other graph untouched.

Every place that turns a graph into a GraphModule (or changes the generator of one, as
`ep.module()` does) calls it. The generator of the graph is kept and extended (a subclass made
once per generator class), so the program module's own calling convention still applies.
"""
from __future__ import annotations

import keyword
import re

from torch import fx
from torch.fx.node import _get_qualified_name

_SAFE_CLASSES: dict[type, type] = {}


def keyword_safe(graph: fx.Graph) -> fx.Graph:
    """`graph`, its code generator made to write keyword-named operators as lookups where it
    calls any (subgraphs are graphs of their own: each GraphModule's graph is passed here)."""
    if _keyword_calls(graph.nodes) and not isinstance(graph._codegen, _KeywordSafeCode):
        codegen = graph._codegen
        codegen.__class__ = _safe_class(type(codegen))
    return graph


def keyword_safe_module(gm: fx.GraphModule) -> fx.GraphModule:
    """`gm` and its sub-GraphModules with keyword-safe generators; recompiled where one changed."""
    for module in gm.modules():
        if isinstance(module, fx.GraphModule) and _keyword_calls(module.graph.nodes) \
                and not isinstance(module.graph._codegen, _KeywordSafeCode):
            keyword_safe(module.graph)
            module.recompile()
    return gm


def _keyword_calls(nodes) -> dict[str, str]:
    """{fx's name for a called operator: a Python expression for it} for each operator the
    nodes call whose qualified name has a keyword part."""
    found = {}
    for node in nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None or not any(keyword.iskeyword(p) for p in (*schema.name.split("::"), schema.overload_name)):
            continue   # the common case, decided without building fx's name
        name = _get_qualified_name(node.target)
        parts = name.split(".")
        if any(keyword.iskeyword(p) for p in parts):
            expr = parts[0]
            for part in parts[1:]:
                expr = f"getattr({expr}, {part!r})" if keyword.iskeyword(part) else f"{expr}.{part}"
            found[name] = expr
    return found


class _KeywordSafeCode:
    """Mixin over an fx code generator: the call lines (`name = target(args)`, one per node)
    of keyword-named operators name them through `getattr`. Only the callee at the start of a
    call line is rewritten, so no string constant in the arguments can be touched."""

    def _gen_python_code(self, nodes, *args, **kwargs):
        code = super()._gen_python_code(nodes, *args, **kwargs)
        for name, expr in _keyword_calls(nodes).items():
            line_start = r"^(\s*[A-Za-z_]\w*(?:\s*:\s*[^=\n]*)? = )" + re.escape(name) + r"\("
            code.src = re.sub(line_start, lambda m: m.group(1) + expr + "(", code.src, flags=re.MULTILINE)
        return code


def _safe_class(codegen_class: type) -> type:
    if codegen_class not in _SAFE_CLASSES:
        _SAFE_CLASSES[codegen_class] = type(f"KeywordSafe{codegen_class.__name__}",
                                            (_KeywordSafeCode, codegen_class), {"__module__": __name__})
    return _SAFE_CLASSES[codegen_class]

"""`graphport inspect`: a program described in a page of text."""
from __future__ import annotations

from collections import Counter

import torch

from ..describe import describe_value, op_name, readable_names
from ..program import ExportedProgram
from ..signature import ConstantArgument, InputKind, OutputKind

_BUILTIN_NAMESPACES = {"aten", "prim", "prims", "higher_order", "_operator"}


def all_graphs(ep: ExportedProgram):
    """The program's graph and every control-flow subgraph reached by get_attr, recursively."""
    todo = [("", ep.graph_module)]
    while todo:
        prefix, gm = todo.pop(0)
        yield prefix, gm
        for node in gm.graph.nodes:
            if node.op == "get_attr" and isinstance(getattr(gm, node.target, None), torch.fx.GraphModule):
                todo.append((f"{prefix}{node.target}.", getattr(gm, node.target)))


def op_histogram(ep: ExportedProgram) -> Counter:
    return Counter(op_name(n.target) for _, gm in all_graphs(ep) for n in gm.graph.nodes
                   if n.op == "call_function")


def custom_ops(ep: ExportedProgram) -> list[str]:
    found = set()
    for _, gm in all_graphs(ep):
        for n in gm.graph.nodes:
            namespace = getattr(n.target, "namespace", None)
            if n.op == "call_function" and namespace is not None and namespace not in _BUILTIN_NAMESPACES:
                found.add(op_name(n.target))
    return sorted(found)


def summary(ep: ExportedProgram, version: str | None = None) -> str:
    readable = readable_names(ep)
    lines = []
    if version is not None:
        lines.append(f"format version: {version}")
    lines.append(f"signature: {signature(ep)}")
    lines.append("inputs:")
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    users = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    for i, spec in enumerate(users):
        path = ep.input_paths[i] if i < len(ep.input_paths) else spec.arg.name
        if isinstance(spec.arg, ConstantArgument):
            lines.append(f"  {path}: constant {spec.arg.value!r}")
        else:
            lines.append(f"  {path}: {describe_value(placeholders[spec.arg.name].meta.get('val'), readable)}")
    lines.append("outputs:")
    output_vals = ep.graph.output_node().args[0]
    for spec, val in zip(ep.graph_signature.output_specs, output_vals):
        if spec.kind is OutputKind.USER_OUTPUT:
            meta = val.meta.get("val") if isinstance(val, torch.fx.Node) else val
            lines.append(f"  {spec.arg.name}: {describe_value(meta, readable)}")
        else:
            what = spec.kind.name.lower().replace('_', ' ')
            lines.append(f"  {spec.arg.name}: {what}" + (f" of {spec.target}" if spec.target is not None else ""))
    if ep.shape_contract and ep.shape_contract.symbols:
        lines.append("dimensions:")
        for fact in ep.shape_contract.symbols.values():
            valid = f" (valid from {fact.valid_from}: {fact.reason})" if fact.valid_from is not None else ""
            lines.append(f"  {fact.name}: {fact.range}{valid}")
        for relation in ep.shape_contract.relations:
            lines.append(f"  relation: {relation.rel.xreplace(readable)}")
    params = list(ep.named_parameters())
    buffers = list(ep.named_buffers())
    lines.append(f"parameters: {len(params)} tensors, {sum(p.numel() for _, p in params):,} values, "
                 f"{_bytes(sum(p.numel() * p.element_size() for _, p in params))}")
    lines.append(f"buffers: {len(buffers)} tensors, {_bytes(sum(b.numel() * b.element_size() for _, b in buffers))}")
    if ep.constants:
        lines.append(f"constants: {len(ep.constants)}")
    hist = op_histogram(ep)
    lines.append(f"operators: {sum(hist.values())} calls, {len(hist)} distinct")
    lines += [f"  {count:6d}  {name}" for name, count in hist.most_common()]
    ops = custom_ops(ep)
    lines.append(f"custom ops: {', '.join(ops) if ops else 'none'}")
    return "\n".join(lines)


def signature(ep: ExportedProgram) -> str:
    """`(x, y, *, mask)`: positional parameters, then the keyword arguments the program was
    exported with (a model called with keywords only reads `(*, input_ids, attention_mask)`)."""
    positional = list((ep.call_spec.forward_arg_names if ep.call_spec else None) or [])
    keywords: list[str] = []
    in_spec = ep.call_spec.in_spec if ep.call_spec else None
    if in_spec is not None and in_spec.num_children == 2 and in_spec.child(1).type is dict:
        keywords = [str(k) for k in in_spec.child(1).context if k not in positional]
    return "(" + ", ".join(positional + (["*"] + keywords if keywords else [])) + ")"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

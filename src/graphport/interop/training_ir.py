"""graphport's functional spellings -> the operators torch.export 2.13's default export emits.

torch.export's default program is its training IR (verifier dialect TRAINING): eval BatchNorm
is one `batch_norm` node, `Tensor.flatten` stays `flatten.using_ints`, eval dropout stays
`dropout`. graphport's default level spells them functionally (`_native_batch_norm_legit_no_training`
and a `getitem`; a `view` whose sizes are read with `sym_size`; a `clone`). The values are the same, but torch's consumers
match on the spelling: quantizers' patterns start at `batch_norm`, Model Explorer cannot show
a tuple-valued node with symbolic sizes nor a SymInt-valued one. These rewrites run on the
converted torch graph and leave every other node as it is.

`source_fn_stack` is dropped: torch.export's default (non-strict) export does not record it,
consumers fall back to `torch_fn` and `nn_module_stack` (which both carry over), and the
values graphport keeps there (the torch functions themselves, C methods included) are not
what torch's serializer can write.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

aten = torch.ops.aten

DROPPED_META = ("source_fn_stack",)
_FLATTEN_FUNCTIONS = ("method_descriptor.flatten", "builtin_function_or_method.flatten")
_MHA_FUNCTION = "function.multi_head_attention_forward"


def drop_unserializable_meta(graph: fx.Graph) -> None:
    for node in graph.nodes:
        for key in DROPPED_META:
            node.meta.pop(key, None)


def to_training_ir(graph: fx.Graph) -> None:
    """Rewrite `graph` in place to torch.export's training-IR spelling."""
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten._native_batch_norm_legit_no_training.default:
            _batch_norm(graph, node)
        elif node.target is aten.view.default and _torch_function(node) in _FLATTEN_FUNCTIONS:
            _flatten(graph, node)
        elif node.target is aten.view.default and _torch_function(node) == _MHA_FUNCTION:
            _packed_projection_unflatten(graph, node)
        elif node.target is aten.clone.default and _torch_function(node) == "function.dropout" and not node.kwargs:
            _eval_dropout(graph, node)


def _torch_function(node: fx.Node) -> str:
    return (node.meta.get("torch_fn") or ("", ""))[1]


def _eval_dropout(graph: fx.Graph, node: fx.Node) -> None:
    """Dropout outside training is the identity, which graphport records as a `clone` (a fresh
    value, as torch's functional graph has it); torch.export keeps `dropout(x, p, False)`.
    graphport does not record `p`, which does not change the result when not training."""
    with graph.inserting_before(node):
        new = graph.call_function(aten.dropout.default, (node.args[0], 0.0, False))
    _replace(graph, node, new, dict(node.meta))


def _batch_norm(graph: fx.Graph, node: fx.Node) -> None:
    """`_native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps)[0]` is
    `batch_norm(x, w, b, mean, var, training=False, momentum, eps, cudnn_enabled)`; only when
    nothing reads the saved mean and invstd (always so in eval)."""
    users = list(node.users)
    if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
        return
    out = users[0]
    x, weight, bias, mean, var, momentum, eps = node.args
    with graph.inserting_before(out):
        new = graph.call_function(aten.batch_norm.default,
                                  (x, weight, bias, mean, var, False, momentum, eps, torch.backends.cudnn.enabled))
    meta = {**node.meta, "val": out.meta["val"]}
    if "tensor_meta" in out.meta:
        meta["tensor_meta"] = out.meta["tensor_meta"]
    _replace(graph, out, new, meta)
    graph.erase_node(node)


def _flatten(graph: fx.Graph, node: fx.Node) -> None:
    """A `view` recorded inside `flatten` merges one run of dimensions of its input into one:
    `flatten(x, start, end)` with the run found by comparing sizes (any run giving the same
    sizes gives the same values). The `sym_size` reads that fed the view are removed."""
    source, sizes = node.args[0], node.args[1]
    if not isinstance(source, fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
        return
    before, after = list(source.meta["val"].shape), list(node.meta["val"].shape)
    merged = len(before) - len(after) + 1
    if not before or merged < 1:
        return
    start = 0
    while start < len(after) - 1 and start < len(before) and _same(before[start], after[start]):
        start += 1
    end = start + merged - 1
    if not all(_same(a, b) for a, b in zip(before[end + 1:], after[start + 1:])):
        return
    with graph.inserting_before(node):
        new = graph.call_function(aten.flatten.using_ints, (source, start, end))
    _replace(graph, node, new, dict(node.meta))
    _erase_unused_size_arithmetic(graph, [s for s in sizes if isinstance(s, fx.Node)] if isinstance(sizes, (list, tuple))
                                  else [])


def _packed_projection_unflatten(graph: fx.Graph, node: fx.Node) -> None:
    """Inside `nn.MultiheadAttention`, torch splits the packed q/k/v projection with
    `proj.unflatten(-1, (3, E))`, which graphport records as the `view` it is. A view there
    that splits only the last dimension into two is that call (the same values: unflatten is a
    view), and torch.export keeps it as `unflatten`, where the quantizers look for it."""
    source = node.args[0]
    if not isinstance(source, fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
        return
    before, after = list(source.meta["val"].shape), list(node.meta["val"].shape)
    if not before or len(after) != len(before) + 1 or not all(_same(a, b) for a, b in zip(before[:-1], after[:-2])):
        return
    split = after[-2:]
    if not all(type(s) is int for s in split) or type(before[-1]) is not int or split[0] * split[1] != before[-1]:
        return
    with graph.inserting_before(node):
        new = graph.call_function(aten.unflatten.int, (source, -1, split))
    _replace(graph, node, new, dict(node.meta))
    sizes = node.args[1] if len(node.args) > 1 else []
    _erase_unused_size_arithmetic(graph, [s for s in sizes if isinstance(s, fx.Node)] if isinstance(sizes, (list, tuple))
                                  else [])


def _replace(graph: fx.Graph, old: fx.Node, new: fx.Node, meta: dict) -> None:
    """`new` takes `old`'s place; a program output keeps its name, which the graph signature
    refers to."""
    new.meta = meta
    name, is_output = old.name, any(user.op == "output" for user in old.users)
    old.replace_all_uses_with(new)
    graph.erase_node(old)
    if is_output:
        new.name = name   # as to_torch names placeholders: the graph's namespace never frees a name


def _same(a, b) -> bool:
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return type(a) is type(b) and a == b


def _erase_unused_size_arithmetic(graph: fx.Graph, nodes: list[fx.Node]) -> None:
    """Remove size reads and integer arithmetic on them that nothing uses any more."""
    while nodes:
        node = nodes.pop()
        if node.users or node.op != "call_function":
            continue
        if node.target is aten.sym_size.int or getattr(node.target, "__module__", None) == "_operator":
            inputs = [a for a in node.args if isinstance(a, fx.Node)]
            graph.erase_node(node)
            nodes.extend(inputs)

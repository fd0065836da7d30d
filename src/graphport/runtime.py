"""Running an exported program: `ep.module()`, a torch.fx.GraphModule that refuses inputs the
capture is not valid for.

The module's graph is the program's graph with the lifted state turned back into
attributes (`get_attr` at the original dotted names), so users read `.graph`, `.code` and
`print_readable()` as they do with torch.export. Its generated `forward` takes the original
program's arguments by name; its first line flattens and checks them (structure, dtypes,
shapes, specialized scalars) before anything runs, so a wrong input is an error that names
it, never a wrong answer. Buffer and input mutations, outputs of the functional graph, are
written back as eager would write them.
"""
from __future__ import annotations

import keyword
import re
from typing import Any

import torch
import torch.fx as fx

from . import _torch
from .call_checks import build_input_checker, build_output_builder
from .errors import InputGuardError, InputStructureError, RuntimeCheckError
from .values import plain_copy
from .signature import ConstantArgument, InputKind, OutputKind, SymIntArgument
from .graph_code import keyword_safe

pytree = _torch.pytree

_SHORT = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
          torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
          torch.bool: "b8", torch.complex64: "c64"}


def _set_attr(root: torch.nn.Module, fqn: str, value: Any, kind: str, persistent: bool = True) -> None:
    *path, leaf = fqn.split(".")
    mod = root
    for part in path:
        if not hasattr(mod, part):
            mod.add_module(part, torch.nn.Module())
        mod = getattr(mod, part)
    if kind == "parameter":
        param = value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, requires_grad=False)
        mod.register_parameter(leaf, param)
    elif kind == "buffer":
        mod.register_buffer(leaf, value, persistent=persistent)
    elif isinstance(value, torch.nn.Module):
        mod.add_module(leaf, value)
    else:
        setattr(mod, leaf, value)


def _get_attr(root: torch.nn.Module, fqn: str) -> Any:
    owner, _, leaf = fqn.rpartition(".")
    return getattr(root.get_submodule(owner), leaf)


def _has_attr(root: torch.nn.Module, fqn: str) -> bool:
    try:
        _get_attr(root, fqn)
    except AttributeError:
        return False
    return True


def new_effect_token() -> torch.Tensor:
    """The token a lowered program's first effectful call takes (capture/effects.py)."""
    return torch.tensor([])


def snapshot_buffer(buffer: torch.Tensor) -> torch.Tensor:
    """The value a mutated buffer has before the call. Eager updates a buffer inside the op
    that uses it (batch_norm's running stats), after autograd saved it; the functional graph
    reads it first and writes it back after, so when gradients are recorded the graph gets
    its own copy and the write-back cannot invalidate what backward needs."""
    if torch.is_grad_enabled() and not torch.compiler.is_exporting():
        return buffer.clone()
    return buffer


def write_back(target: torch.Tensor, value: torch.Tensor) -> None:
    """A mutation the program made to a buffer or an input, applied in place as eager does."""
    with torch.no_grad():
        target.copy_(value)


def accumulate_grad(target: torch.Tensor, value: torch.Tensor) -> None:
    """A joint forward-backward program's gradient, accumulated into `target.grad` as
    eager's `loss.backward()` accumulates it."""
    with torch.no_grad():
        target.grad = value.detach() if target.grad is None else target.grad + value


_MUTATIONS = (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION, OutputKind.USER_INPUT_MUTATION)
_GRADIENTS = (OutputKind.GRADIENT_TO_PARAMETER, OutputKind.GRADIENT_TO_USER_INPUT)


class _ProgramCodeGen(fx.graph.CodeGen):
    """`forward(self, <the program's arguments>)`: the arguments are flattened and checked by
    the module, then bound to the graph's placeholders; outputs take the program's structure."""

    def __init__(self, positional: list[str], keywords: list[str], in_spec: pytree.TreeSpec,
                 out_spec: pytree.TreeSpec):
        super().__init__()
        self.positional, self.keywords = positional, keywords
        self.in_spec, self.out_spec = in_spec, out_spec
        self.leaf_parameters = False   # generating the graph's body, which takes the leaves themselves

    def body(self, graph: fx.Graph) -> Any:
        """The graph as a function of `self` and the call's leaves (in the graph's order):
        what a call runs once its inputs are checked, without flattening them again."""
        self.leaf_parameters = True
        try:
            code = graph.python_code(root_module="self")
        finally:
            self.leaf_parameters = False
        namespace = dict(code.globals)
        exec(compile(code.src, "<graphport graph>", "exec"), namespace)   # fx's source of our graph
        return namespace[self._func_name]

    def process_inputs(self, *args: Any) -> list[Any]:
        """Positional arguments (keywords after the positional ones) to the graph's leaves."""
        count = self.in_spec.child(0).num_children
        kwargs = dict(zip(self.keywords, args[count:]))
        return pytree.tree_leaves((tuple(args[:count]), kwargs))

    def process_outputs(self, outputs: Any) -> Any:
        return pytree.tree_unflatten(list(outputs), self.out_spec)

    def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, *, expanded_def: bool = False) -> str:
        if self.leaf_parameters:
            return super().gen_fn_def(free_vars, maybe_return_annotation)
        names = [*self.positional, *self.keywords]
        if _plain_names(names):
            params = ", ".join(["self", *names])
            args = "".join(f"{n}, " for n in self.positional)
            kwargs = ", ".join(f"{k!r}: {k}" for k in self.keywords)
            call = f"self._graphport_inputs(({args}), {{{kwargs}}})"
        else:
            params, call = "self, *args, **kwargs", "self._graphport_inputs(args, kwargs)"
        leaves = [v.split(":")[0].split("#")[0].strip() for v in free_vars if v != "self"]
        head = f"def {self._func_name}({params}){maybe_return_annotation}:"
        if not leaves:
            return f"{head}\n    {call}"
        return f"{head}\n    {', '.join(leaves)}, = {call}"

    def generate_output(self, output_args, *, descs=None, repr_fn=None) -> str:
        return f"return self._graphport_outputs({(repr_fn or repr)(output_args)})"

    def _gen_python_code(self, nodes, *args, **kwargs):
        code = super()._gen_python_code(nodes, *args, **kwargs)
        if any(n.op == "call_function" and n.target is torch.ops.higher_order.cond for n in nodes):
            code.src = re.sub(r"(= )torch\.ops\.higher_order\.cond\(", r"\1_graphport_cond(", code.src)
            code.globals["_graphport_cond"] = run_cond
        return code


def run_cond(pred, true_fn, false_fn, operands):
    """A cond of the program's graph, run. On a size predicate (a Python bool once the call's
    sizes are known: a branch export captured as a cond) only the side taken runs. torch.cond
    called eagerly with autograd recording traces both sides at the call's sizes, and the side
    not taken may fail there (a view into blocks of a length that does not divide the
    sequence): the call would fail where eager runs."""
    if isinstance(pred, bool):
        return (true_fn if pred else false_fn)(*operands)
    return torch.ops.higher_order.cond(pred, true_fn, false_fn, operands)


def _plain_names(names: list[str]) -> bool:
    return len(set(names)) == len(names) and all(
        n.isidentifier() and not keyword.iskeyword(n) and n not in ("self", "args", "kwargs") for n in names)


class _ForwardOnFirstUse:
    """ExportedModule's `forward` until fx generates it: looking it up generates it (and
    `.code`) and returns it, so its signature, hooks and direct calls are fx's own."""

    def __get__(self, module, owner=None):
        if module is None:
            return self
        module._generate_forward()   # sets the generated forward on the instance's own class
        return type(module).forward.__get__(module, owner)


class ExportedModule(fx.GraphModule):
    """The module returned by `ExportedProgram.module()`: a GraphModule with the program's
    parameters and buffers as attributes, callable with the program's arguments."""

    forward = _ForwardOnFirstUse()

    def __init__(self, ep):
        holder = torch.nn.Module()
        sig = ep.graph_signature
        for spec in sig.input_specs:
            if spec.kind is InputKind.PARAMETER:
                _set_attr(holder, spec.target, ep.state_dict[spec.target], "parameter")
            elif spec.kind is InputKind.BUFFER:
                value = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
                _set_attr(holder, spec.target, value, "buffer", spec.persistent is not False)
            elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
                _set_attr(holder, spec.target, ep.constants[spec.target], "constant")
        for node in ep.graph.nodes:
            if node.op == "get_attr":
                _set_attr(holder, node.target, _get_attr(ep.graph_module, node.target), "attribute")
        graph = _unlifted_graph(ep)
        call = ep.call_spec
        positional = list(call.forward_arg_names or [])[:call.in_spec.child(0).num_children]
        positional += [f"arg{i}" for i in range(len(positional), call.in_spec.child(0).num_children)]
        graph.set_codegen(_ProgramCodeGen(positional, list(call.in_spec.child(1).context), call.in_spec,
                                          call.out_spec))
        keyword_safe(graph)
        self._ep = ep
        super().__init__(holder, graph, class_name="GraphModule")
        self._finish(holder)

    def _finish(self, source: torch.nn.Module) -> None:
        """What GraphModule's constructor (and its deepcopy) leaves out: non-persistent
        buffers, the other names of tied tensors (values taken from `source`), the call checks."""
        ep, sig = self._ep, self._ep.graph_signature
        for spec in sig.input_specs:
            if spec.kind is InputKind.BUFFER and spec.persistent is False:
                _set_attr(self, spec.target, _get_attr(source, spec.target), "buffer", persistent=False)
        owner = {id(v): name for name, v in ep.state_dict.items() if _has_attr(self, name)}
        for name, value in ep.state_dict.items():     # a tied tensor's other names
            if not _has_attr(self, name):
                value = _get_attr(self, owner[id(value)]) if id(value) in owner else value
                _set_attr(self, name, value, "parameter" if isinstance(value, torch.nn.Parameter) else "buffer")
        self._user_inputs = [s for s in sig.input_specs if s.kind is InputKind.USER_INPUT]
        # the capture's own values (meta, sizes as the capture saw them), which the checks are written for
        self._placeholder_vals = {n.name: getattr(n.meta.get("val"), "gp_meta", n.meta.get("val"))
                                  for n in ep.graph.nodes if n.op == "placeholder"}
        self._in_spec, self._out_spec = ep.call_spec.in_spec, ep.call_spec.out_spec
        self._paths = ep.input_paths
        expected = [(isinstance(s.arg, ConstantArgument), self._placeholder_vals[s.arg.name]) for s in self._user_inputs]
        self._fast_check = build_input_checker(self._in_spec, expected, ep.shape_contract, ep.input_aliases,
                                               ep.call_spec.keywords_by_name)
        self._build_outputs = build_output_builder(self._out_spec)
        self._finished = True

    def recompile(self):
        """fx's recompile (`forward`, `.code`), and the graph's body a checked call runs.

        While the module is being made (or deep-copied), only the body is generated: fx's
        `forward` and `.code`, used by hooks, direct `forward` calls and readers of the
        code, are generated on first use (`forward` and `_code` below), so a module that is
        only called generates and compiles its graph's code once. An explicit call
        generates both, as fx's does."""
        codegen = self._graph._codegen
        self._body = codegen.body(self._graph) if isinstance(codegen, _ProgramCodeGen) else None
        if self._body is not None and not self.__dict__.get("_finished"):
            self.__dict__.pop("_fx_code", None)
            return None
        return self._generate_forward()

    def _generate_forward(self):
        code = super().recompile()
        # fx wraps __call__ of this instance's own class in three layers of calls to decorate errors
        # raised in its generated code; ours raises graphport errors, so calls go straight to it
        type(self).__call__ = ExportedModule.__call__
        return code

    @property
    def _code(self) -> str:
        """fx's source of `forward` (`.code`, `str(module)`), generated when first read."""
        if "_fx_code" not in self.__dict__:
            self._generate_forward()
        return self.__dict__["_fx_code"]

    @_code.setter
    def _code(self, source: str) -> None:
        self.__dict__["_fx_code"] = source

    def __call__(self, *args, **kwargs):
        """Checks the call, then runs the graph. Without hooks on the module (or global
        ones), the generated checks run and the graph's body is called with the leaves
        directly; a call they do not accept goes through the general checks, which refuse
        it with the precise error or accept a form the generated ones leave to them."""
        try:
            if (self._body is None or self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                    or self._backward_pre_hooks or _torch.has_global_module_hooks() or torch.compiler.is_exporting()):
                _check_call(self, args, kwargs)
                return super().__call__(*args, **kwargs)
            leaves = None if self._fast_check is None else self._fast_check(args, kwargs)
            if leaves is None:
                leaves = self._leaves(args, kwargs)[0]
                self._check_values(leaves)
            return self._body(self, *leaves)
        except RuntimeError as e:
            failed = failed_check(e)
            if failed is None:
                raise
            raise failed from None

    def __deepcopy__(self, memo):
        copied = super().__deepcopy__(memo)
        copied._ep = self._ep
        copied._finish(copied)
        return copied

    def _graphport_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        """The leaves of a call in the graph's order. The call was checked before forward
        ran (`_check_call`); a direct `forward` call has its structure checked here."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            flat, _ = self._leaves(args, kwargs)
        return flat

    def _leaves(self, args: tuple, kwargs: dict) -> tuple[list[Any], bool]:
        """(leaves, whether the call had the export's exact structure); refuses other structures.
        Keyword arguments that bind named parameters match by name, in any order."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec == self._in_spec:
            return flat, True
        if self._ep.call_spec.keywords_by_name:
            flat, spec = pytree.tree_flatten((args, _keys_in_order(kwargs, self._in_spec.child(1))))
        if spec != self._in_spec:
            names = self._ep.call_spec.forward_arg_names or []
            what, fix = _first_difference(self._in_spec, spec, names)
            raise InputStructureError(f"{what}; the program is called as {_call_form(self._in_spec, names)}",
                                      fix=fix)
        return flat, False

    def print_readable(self, *args, **kwargs):
        return plain_copy(self).print_readable(*args, **kwargs)

    def _graphport_outputs(self, outputs: Any) -> Any:
        return self._build_outputs(outputs)

    def checked_leaves(self, args: tuple, kwargs: dict) -> list[Any]:
        """The call's leaves in the graph's order, after every check a call of this module
        makes (for modules that run the program's graph their own way: unflatten)."""
        flat = self._leaves(args, kwargs)[0]
        self._check_values(flat)
        return flat

    def check_leaves(self, flat: list) -> None:
        """Every check of a call on leaves already in the graph's order (a FlatArgsAdapter's)."""
        self._check_values(flat)

    def _check_call_values(self, args: tuple, kwargs: dict) -> None:
        """Refuse a call the program is not valid for: structure, dtypes, sizes, scalars."""
        self._check_values(self._leaves(args, kwargs)[0])

    def _check_values(self, flat: list) -> None:
        for i, (leaf, spec_) in enumerate(zip(flat, self._user_inputs)):
            path = self._paths[i] if i < len(self._paths) else spec_.arg.name
            expected = self._placeholder_vals[spec_.arg.name]
            if isinstance(spec_.arg, SymIntArgument):
                _int_value(leaf, path)   # its range and relations: check_shapes
                continue
            if isinstance(spec_.arg, ConstantArgument):
                if type(leaf) is not type(expected) or leaf != expected:
                    raise InputGuardError(
                        f"input {path} is {leaf!r}, but the program was exported with {path} = {expected!r}; "
                        "Python values are baked into the graph",
                        fix=f"call with {path} = {expected!r}, or export again with the value you need")
                continue
            if not isinstance(leaf, torch.Tensor):
                raise InputStructureError(f"input {path} is a {type(leaf).__qualname__}, expected a tensor "
                                          f"{_SHORT.get(expected.dtype, expected.dtype)}{list(expected.shape)}",
                                          fix=f"pass a tensor for {path}")
            if leaf.dtype != expected.dtype:
                raise InputGuardError(
                    f"input {path} has dtype {leaf.dtype}, but the program was exported for {expected.dtype}",
                    fix=f"convert it first: {path}.to({expected.dtype})")
            if leaf.dim() != expected.dim():
                raise InputGuardError(
                    f"input {path} has {leaf.dim()} dimensions {list(leaf.shape)}, expected {expected.dim()} "
                    f"{list(expected.shape)}", fix=f"reshape {path} to {list(expected.shape)}")
            for d, (got, want) in enumerate(zip(leaf.shape, expected.shape)):
                if type(want) is int and got != want:
                    raise InputGuardError(
                        f"input {path} has size {got} at dimension {d}, but the program was exported for size "
                        f"{want} there (shape {list(expected.shape)}); that dimension is static",
                        fix=f"pass {path} with shape {list(expected.shape)}, or export with dynamic_shapes "
                            f"marking dimension {d} of {path} as a graphport.Dim")
        if self._ep.shape_contract is not None:
            check_shapes(self._ep.shape_contract, flat, self._paths)
        for i, first in self._ep.input_aliases.items():
            if flat[i] is not flat[first]:
                raise InputGuardError(
                    f"input {self._paths[i]} must be the same tensor object as {self._paths[first]}: the program "
                    "was exported with one tensor passed for both, and may have taken a path that relies on it",
                    fix=f"pass the same tensor for both, or export with distinct example tensors for "
                        f"{self._paths[first]} and {self._paths[i]}")


def failed_check(error: RuntimeError) -> RuntimeCheckError | None:
    """A failed runtime assertion of the program's own (capture/data_dependent.py), as a
    graphport error naming the check and the line that stated it."""
    from .shapes.unbacked import ASSERT_PREFIX   # the shape algebra: imported on a failure only
    text = str(error)
    start = text.find(ASSERT_PREFIX)
    if start < 0:
        return None
    message = text[start:].splitlines()[0]
    check, _, where = message.partition(" (stated at ")
    return RuntimeCheckError(
        f"the inputs break a check on a data-dependent value, stated by the program (torch._check) or needed by "
        f"an operator there: {check.strip()}"
        + (f", stated at {where.rstrip(')')}" if where else ""),
        find_location=False,
        fix="pass inputs for which the stated check holds, or correct the torch._check / torch._constrain_as_size "
            "call if the data can legitimately break it")


def check_shapes(contract, flat: list, paths: list[str]) -> None:
    """Dynamic dims: each symbol in its range and at a size the capture holds for, every dim
    equal to its expression, every relation true."""
    import sympy

    from .shapes.contract import ComputedValue
    names = contract.names
    values, where = {}, {}
    for sym, fact in contract.symbols.items():
        src = fact.source
        if isinstance(src, ComputedValue):
            continue   # a data-dependent value: the graph's own assertions check it
        if src.dim is None:   # a dynamic int input is the symbol's value
            size, at = _int_value(flat[src.index], paths[src.index]), paths[src.index]
        else:
            size, at = int(flat[src.index].shape[src.dim]), f"{paths[src.index]}.shape[{src.dim}]"
        if (size - src.offset) % src.coeff:
            readable = src.coeff * sympy.Symbol(fact.name) + src.offset
            raise InputGuardError(
                f"input {at} is {size}, which is not of the form {readable} the program was exported for",
                fix=f"pass {paths[src.index]} with shape[{src.dim}] of the form {readable}")
        values[sym] = value = (size - src.offset) // src.coeff
        where[sym] = at if (src.coeff, src.offset) == (1, 0) else f"{at} = {src.coeff * sympy.Symbol(fact.name) + src.offset}"
        # a range narrowed to where the program is valid (Dim.AUTO / Dim.DYNAMIC): say why
        narrowed = fact.valid_from is not None and fact.valid_from == fact.range.lower
        if not fact.range.contains(value) and not (narrowed and 0 <= value < fact.valid_from):
            what, wider = (("dimension", f"Dim('{fact.name}')") if src.dim is not None
                           else ("the dynamic int", "Dim.DYNAMIC(min=..., max=...)"))
            raise InputGuardError(
                f"input {where[sym]} is {value}, outside the range {fact.range} of {what} {fact.name} the program "
                f"was exported for", fix=f"pass {where[sym]} within {fact.range}, or export again with a wider "
                                         f"{wider}")
        if fact.valid_from is not None and value < fact.valid_from:
            site = f" at {fact.assumed_at}" if fact.assumed_at else ""
            raise InputGuardError(
                f"input {where[sym]} is {value}, but the program is valid only for {fact.name} >= {fact.valid_from}"
                f"{site}: {fact.reason}",
                fix=f"export a separate program for {where[sym]} = {value} (an example input of that size with that "
                    "dimension static)")
    for i, d, expr in contract.dims:
        want = expr.xreplace(values)
        got = int(flat[i].shape[d])
        if want != got:
            if expr.is_Integer:
                raise InputGuardError(
                    f"input {paths[i]}.shape[{d}] is {got}, but the program fixed that Dim.AUTO dimension to {want} "
                    "while tracing", fix=f"pass {paths[i]} with shape[{d}] == {want}")
            readable = expr.xreplace({s: sympy.Symbol(names[s]) for s in expr.free_symbols})
            known = ", ".join(f"{names[s]} = {values[s]} from {where[s]}" for s in expr.free_symbols if s in where)
            raise InputGuardError(
                f"input {paths[i]}.shape[{d}] is {got}, but the program requires it to be {readable} = {want} "
                f"({known})",
                fix=f"pass {paths[i]} with shape[{d}] == {want}, keeping the relations declared in dynamic_shapes")
    for relation in contract.relations:
        if relation.rel.xreplace(values) is not sympy.true:
            readable = relation.rel.xreplace({s: sympy.Symbol(names.get(s, str(s))) for s in relation.rel.free_symbols})
            site = f" (recorded at {relation.location})" if relation.location else ""
            shown = {names[s]: v for s, v in values.items()}
            raise InputGuardError(f"the inputs' sizes {shown} break the program's shape relation {readable}{site}",
                                  fix="pass sizes that satisfy the relation, or export with examples that take "
                                      "the path you need")


def _int_value(leaf: Any, path: str) -> int:
    """A dynamic int input's value; anything but an int is refused (a float or a bool would
    compute something else than the captured integer arithmetic)."""
    if type(leaf) is not int:
        raise InputGuardError(f"input {path} is {leaf!r}, but the program was exported with {path} a dynamic int",
                              fix=f"pass an int for {path}")
    return leaf


def _check_call(module: ExportedModule, args: tuple, kwargs: dict) -> None:
    """Every call is checked before forward binds its arguments, so a call shaped unlike the
    export (an extra argument, a keyword for a positional one) is refused by name, as
    torch.export's module refuses it. While a program is being exported from this module,
    only the structure is checked: the exporter's own spec decides the sizes."""
    if torch.compiler.is_exporting():
        module._leaves(args, kwargs)
    else:
        module._check_call_values(args, kwargs)


def _unlifted_graph(ep) -> fx.Graph:
    """The program's graph with parameters, buffers and constants read from the module
    (`get_attr`) instead of passed in, and its mutation outputs written back in place. A
    joint forward-backward program's gradients are accumulated into the `.grad` of the
    parameters and inputs they belong to, as `loss.backward()` would, and its outputs are
    the program's own (the loss among them)."""
    graph = fx.Graph()
    sig = ep.graph_signature
    spec_of = {s.arg.name: s for s in sig.input_specs}
    mutated = set(sig.buffers_to_mutate.values())
    env: dict[fx.Node, fx.Node] = {}
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        if spec_of[node.name].kind is InputKind.USER_INPUT:
            env[node] = new = graph.placeholder(node.target)
            new.name = node.name            # `input` stays `input`, as torch names it
            new.meta = dict(node.meta)
    for node in placeholders:
        spec = spec_of[node.name]
        if spec.kind is InputKind.TOKEN:   # a fresh effect token each call, as torch's module makes one
            env[node] = new = graph.call_function(new_effect_token, ())
            new.meta = dict(node.meta)
        elif spec.kind is not InputKind.USER_INPUT:
            env[node] = new = graph.get_attr(spec.target)
            new.meta = dict(node.meta)
            if spec.target in mutated:
                env[node] = graph.call_function(snapshot_buffer, (new,))
                env[node].meta = dict(node.meta)
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op != "output":
            env[node] = graph.node_copy(node, lambda n: env[n])
            continue
        tokens = sum(s.kind is OutputKind.TOKEN for s in sig.output_specs)   # ordered the calls; not returned
        outputs = list(node.args[0])[tokens:]
        users = {s.arg.name: env[n] for n, s in zip(placeholders, sig.input_specs)
                 if s.kind is InputKind.USER_INPUT}
        returned = []
        for spec, value in zip(sig.output_specs[tokens:], outputs):
            if spec.kind in _MUTATIONS or spec.kind in _GRADIENTS:
                target = users[spec.target] if spec.kind in (OutputKind.USER_INPUT_MUTATION,
                                                              OutputKind.GRADIENT_TO_USER_INPUT) \
                    else graph.get_attr(spec.target)
                graph.call_function(write_back if spec.kind in _MUTATIONS else accumulate_grad, (target, env[value]))
            else:
                returned.append(value)
        graph.output(fx.map_arg(tuple(returned), lambda n: env[n]))
    return graph


def _keys_in_order(kwargs: dict, spec: pytree.TreeSpec) -> dict:
    """The keyword arguments in the order of the export, when they are the same names: each
    binds a named parameter, so the order they come in changes nothing. Dict inputs are not
    reordered: a program may iterate over a dict, and then its order is part of the input."""
    if set(kwargs) == set(spec.context) and len(spec.context) == spec.num_children:
        return {k: kwargs[k] for k in spec.context}
    return kwargs


def _first_difference(expected: pytree.TreeSpec, got: pytree.TreeSpec, arg_names: list[str]) -> tuple[str, str]:
    """(what differs, how to call instead) for the first place two input trees part ways, in
    a sentence naming the argument or keyword."""
    exp_args, exp_kwargs = expected.children()
    got_args, got_kwargs = got.children()
    if exp_args.num_children != got_args.num_children:
        return (f"the call passes {_count(got_args.num_children, 'positional argument')}, but the program takes "
                f"{exp_args.num_children}",
                "pass the positional arguments the program was exported with, and the rest as keywords")
    for i in range(exp_args.num_children):
        name = arg_names[i] if i < len(arg_names) else f"args[{i}]"
        found = _walk(exp_args.child(i), got_args.child(i), name)
        if found:
            return _in_words(found)
    if exp_kwargs.type is dict and got_kwargs.type is dict and exp_kwargs.context != got_kwargs.context:
        missing = [k for k in exp_kwargs.context if k not in got_kwargs.context]
        extra = [k for k in got_kwargs.context if k not in exp_kwargs.context]
        if missing:
            return (f"the call lacks the keyword argument{'s' if len(missing) > 1 else ''} {_names(missing)}",
                    "pass " + ", ".join(f"{k}=..." for k in missing) + " as at export")
        if extra:
            return (f"the call passes the keyword argument{'s' if len(extra) > 1 else ''} {_names(extra)}, "
                    "which the program was not exported with",
                    "leave out " + ", ".join(f"{k}=..." for k in extra) + ", or export with it")
    return _in_words(_walk(exp_kwargs, got_kwargs, "kwargs") or ("the call", "differs"))


def _in_words(found: tuple[str, str]) -> tuple[str, str]:
    where, what = found
    return f"input {where} {what}", f"call with {where} structured as at export (same keys, lengths and types)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _names(keys: list) -> str:
    return ", ".join(str(k) for k in keys)


def _call_form(spec: pytree.TreeSpec, arg_names: list[str]) -> str:
    """`(x, y, *, mask)`: how the program is called, from its input structure."""
    args, kwargs = spec.children()
    positional = [arg_names[i] if i < len(arg_names) else f"args[{i}]" for i in range(args.num_children)]
    keywords = [str(k) for k in kwargs.context] if kwargs.type is dict and kwargs.context else []
    return "(" + ", ".join(positional + (["*"] + keywords if keywords else [])) + ")"


def _walk(exp: pytree.TreeSpec, got: pytree.TreeSpec, path: str) -> tuple[str, str] | None:
    if exp == got:
        return None
    if exp.type is not got.type:
        def kind(s):
            return "a tensor or value" if s.is_leaf() else f"a {s.type.__name__}"
        return path, f"is {kind(got)}, expected {kind(exp)}"
    if exp.context != got.context:
        if exp.type not in pytree.BUILTIN_TYPES:   # a registered class: its context is its own metadata
            return path, (f"is a {exp.type.__qualname__} whose pytree context is {got.context!r}, expected "
                          f"{exp.context!r} (for a cache: another number or kind of layers)")
        if isinstance(exp.context, list) and isinstance(got.context, list):
            missing = [k for k in exp.context if k not in got.context]
            extra = [k for k in got.context if k not in exp.context]
            parts = ([f"lacks keys {missing}"] if missing else []) + ([f"has extra keys {extra}"] if extra else [])
            return path, " and ".join(parts) or f"has keys in order {got.context}, expected {exp.context}"
        return path, f"has context {got.context!r}, expected {exp.context!r}"
    if exp.num_children != got.num_children:
        return path, f"has {got.num_children} elements, expected {exp.num_children}"
    keys = exp.context if isinstance(exp.context, list) and len(exp.context) == exp.num_children else None
    for i in range(exp.num_children):
        child = f"{path}[{keys[i]!r}]" if keys else f"{path}[{i}]"
        found = _walk(exp.child(i), got.child(i), child)
        if found:
            return found
    return path, "differs"



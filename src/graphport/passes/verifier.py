"""The IR contract (DESIGN.md), checked on every exported program.

A violation is graphport's bug, not the user's: the error names the node and the rule.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .. import _torch
from ..ops.decompositions import lowerable
from ..ops.kinds import writes_arguments
from ..errors import InternalError
from ..ops.vocabulary import SYMBOLIC_SIZE_OPS
from ..signature import ConstantArgument, CustomObjArgument, InputKind, OutputKind, TokenArgument

# Rank of each input kind: effect tokens, parameters, buffers, constants (tensors and custom
# objects, in the order the program first used them, as torch.export lists them), user inputs.
_INPUT_RANK = {InputKind.TOKEN: 0, InputKind.PARAMETER: 1, InputKind.BUFFER: 2, InputKind.CONSTANT_TENSOR: 3,
               InputKind.CUSTOM_OBJ: 3, InputKind.USER_INPUT: 4}
# rank of each output kind: effect tokens, state mutations, input mutations, user outputs (a
# joint program's loss among them), then a joint program's gradients
_OUTPUT_RANK = {OutputKind.TOKEN: 0, OutputKind.PARAMETER_MUTATION: 1, OutputKind.BUFFER_MUTATION: 2,
                OutputKind.USER_INPUT_MUTATION: 3, OutputKind.USER_OUTPUT: 4, OutputKind.LOSS_OUTPUT: 4,
                OutputKind.GRADIENT_TO_PARAMETER: 5, OutputKind.GRADIENT_TO_USER_INPUT: 6}


_CONTROL_FLOW = frozenset({"cond", "map_impl", "while_loop", "scan"})
# A method call on a custom object, and an effectful call ordered by an effect token.
_EFFECTS = frozenset({"call_torchbind", "with_effects"})
# Higher-order operators for a mutating custom op made functional (capture/custom_ops.py).
_FUNCTIONALIZED = frozenset({"auto_functionalized"})
# Assertion operators the IR uses for data-dependent facts: part of every dialect.
_ASSERTIONS = frozenset({torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_async.msg,
                         torch.ops.aten.sym_constrain_range.default,
                         torch.ops.aten.sym_constrain_range_for_size.default})
DIALECTS = ("default", "core_aten")


def _fail(node: fx.Node | None, rule: str) -> None:
    where = f"node '{node.name}' ({node.op} {node.target})" if node is not None else "the graph"
    raise InternalError(f"IR contract violated by {where}: {rule}")


def _is_allowed_target(target) -> bool:
    if target is operator.getitem or target in SYMBOLIC_SIZE_OPS:
        return True
    if isinstance(target, _torch.HigherOrderOperator):
        return target.name() in _CONTROL_FLOW or target.name() in _FUNCTIONALIZED or target.name() in _EFFECTS
    return isinstance(target, _torch.OpOverload)


def check_data_dependent_bindings(nodes: list[fx.Node], fail) -> None:
    """Every data-dependent symbol (u0, ...) a size computation or a check uses is bound
    earlier in the graph: by the node that reads it (`item`, `_local_scalar_dense`) or by
    `sym_size` of the tensor whose size it is, or, in a control-flow subgraph, a placeholder:
    an operand the enclosing graph computed (a size, or a tensor of that size). Otherwise the
    graph cannot compute it."""
    bound: set[str] = set()
    for node in nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            sizes = tuple(val.shape) if isinstance(val, torch.Tensor) else (val,)
            bound |= set().union(*(_unbacked_names(s) for s in sizes))
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        names = _unbacked_names(val)
        if node.target in _BINDERS:
            bound |= names
        elif node.target in SYMBOLIC_SIZE_OPS or node.target is _ASSERT:
            used = set().union(*(_unbacked_names(a.meta.get("val")) for a in node.all_input_nodes)) | names
            missing = sorted(used - bound)
            if missing:
                fail(node, f"it uses the data-dependent value {missing[0]} before any node binds it")


_ASSERT = torch.ops.aten._assert_scalar.default
_BINDERS = frozenset({torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default,
                      torch.ops.aten.sym_size.int})


def _unbacked_names(val) -> set[str]:
    """The data-dependent symbols of a symbolic value: every symbol its shape environment did
    not make as an input size (a converted program's environment knows only its inputs)."""
    env = getattr(getattr(val, "node", None), "env", None)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and env is not None:
        return {s.name for s in getattr(val.node.expr, "free_symbols", ()) if not env.table.is_input(s)}
    return set()


def _in_core_aten(target) -> bool:
    """The Core ATen dialect: every operator tagged core in torch's registry, the
    functional variant of one (`_native_batch_norm_legit_functional`, as torch's lowering
    keeps it), or one nothing lowers (no entry in the default table and no composite kernel:
    torch's lowering keeps `linalg_vector_norm` too), a custom operator (a namespace of the user's), torch's control-flow
    operators, getitem, the symbolic-size operators and the assertions."""
    if not isinstance(target, _torch.OpOverload) or target in _ASSERTIONS:
        return True   # getitem, size and control-flow operators: checked by _is_allowed_target
    if target.namespace not in ("aten", "prims", "prim"):
        return True
    if _torch.is_core_aten(target) or not lowerable(target):
        return True
    packet = target.overloadpacket.__name__
    mutating = getattr(getattr(torch.ops.aten, packet.removesuffix("_functional"), None), target._overloadname, None)
    return packet.endswith("_functional") and mutating is not None and _torch.is_core_aten(mutating)


def verify(ep, dialect: str = "default") -> None:
    """Check `ep` against the IR contract and `dialect` ("default", or "core_aten" after
    `run_decompositions()`); raise InternalError on the first violation."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")
    if not isinstance(ep.graph_module, fx.GraphModule):
        _fail(None, f"the program's graph_module must be a torch.fx.GraphModule, not {type(ep.graph_module)}")
    if not ep.module_call_graph or ep.module_call_graph[0].fqn != "":
        _fail(None, "the module call graph must start with the root module's entry")
    graph = ep.graph
    sig = ep.graph_signature
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if nodes[:len(placeholders)] != placeholders:
        _fail(next(n for n in nodes[len(placeholders):] if n.op == "placeholder"), "placeholders must come first")
    if [n.name for n in placeholders] != [s.arg.name for s in sig.input_specs]:
        _fail(None, "placeholders must match the signature's inputs one to one, in order")
    kinds = [_INPUT_RANK[s.kind] for s in sig.input_specs]
    if kinds != sorted(kinds):
        _fail(None, "inputs must be ordered tokens, parameters, buffers, constants, user inputs")
    for spec in sig.input_specs:
        if spec.kind is InputKind.PARAMETER and spec.target not in ep.state_dict:
            _fail(None, f"parameter {spec.target} has no entry in state_dict")
        if spec.kind is InputKind.BUFFER and spec.target not in (ep.state_dict if spec.persistent is not False
                                                                 else ep.constants):
            _fail(None, f"buffer {spec.target} has no entry in "
                        f"{'state_dict' if spec.persistent is not False else 'constants'}")
        if spec.kind is InputKind.CONSTANT_TENSOR and spec.target not in ep.constants:
            _fail(None, f"constant {spec.target} has no entry in constants")
        if spec.kind is InputKind.CUSTOM_OBJ and not (isinstance(spec.arg, CustomObjArgument)
                                                      and isinstance(ep.constants.get(spec.target), torch.ScriptObject)):
            _fail(None, f"custom object input {spec.arg.name} needs a CustomObjArgument and its object in constants")
        if (spec.kind is InputKind.TOKEN) != isinstance(spec.arg, TokenArgument):
            _fail(None, f"input {spec.arg.name}: effect tokens, and only they, are TokenArguments")
    _check_placeholder_values(placeholders, sig)
    outputs = [n for n in nodes if n.op == "output"]
    if len(outputs) != 1 or nodes[-1] is not outputs[0]:
        _fail(None, "there must be exactly one output node, the last node")
    out_values = outputs[0].args[0]
    if len(out_values) != len(sig.output_specs):
        _fail(outputs[0], "output values must match the signature's outputs one to one")
    for value, spec in zip(out_values, sig.output_specs):
        if isinstance(value, fx.Node) != (not isinstance(spec.arg, ConstantArgument)) or (
                isinstance(value, fx.Node) and value.name != spec.arg.name):
            _fail(outputs[0], f"output {value} does not match its signature entry {spec}")
    buffers, user_inputs = set(sig.buffers), {s.arg.name for s in sig.input_specs if s.kind is InputKind.USER_INPUT}
    parameters = set(sig.parameters)
    for spec in sig.output_specs:
        if spec.kind is OutputKind.BUFFER_MUTATION and spec.target not in buffers:
            _fail(outputs[0], f"buffer mutation {spec.arg.name} names {spec.target}, which is no buffer input")
        if spec.kind is OutputKind.USER_INPUT_MUTATION and spec.target not in user_inputs:
            _fail(outputs[0], f"input mutation {spec.arg.name} names {spec.target}, which is no user input")
        if spec.kind is OutputKind.GRADIENT_TO_PARAMETER and spec.target not in parameters:
            _fail(outputs[0], f"gradient {spec.arg.name} names {spec.target}, which is no parameter input")
        if spec.kind is OutputKind.GRADIENT_TO_USER_INPUT and spec.target not in user_inputs:
            _fail(outputs[0], f"gradient {spec.arg.name} names {spec.target}, which is no user input")
    if sum(s.kind is OutputKind.LOSS_OUTPUT for s in sig.output_specs) > 1:
        _fail(outputs[0], "a program has at most one loss output")
    okinds = [_OUTPUT_RANK[s.kind] for s in sig.output_specs]
    if okinds != sorted(okinds):
        _fail(outputs[0], "outputs must be ordered tokens, state mutations, input mutations, user outputs, gradients")
    _check_effect_tokens(nodes, sig)
    _check_nodes(ep.graph_module, "the graph", dialect)


def _check_placeholder_values(placeholders: list[fx.Node], sig) -> None:
    """A custom object's placeholder carries a CustomObjArgument naming its class; only it does."""
    for node, spec in zip(placeholders, sig.input_specs):
        val = node.meta.get("val")
        if (spec.kind is InputKind.CUSTOM_OBJ) != isinstance(val, CustomObjArgument) or (
                isinstance(val, CustomObjArgument) and val.class_fqn != spec.arg.class_fqn):
            _fail(node, "a custom object's placeholder needs meta['val'], a CustomObjArgument of its class")


def _check_effect_tokens(nodes: list[fx.Node], sig) -> None:
    """Effect tokens form one chain: each input token is read by one `with_effects` call,
    whose new token the next reads, and the last is an output token (torch's form after
    lowering). Without tokens, no `with_effects` call."""
    token_names = set(sig.input_tokens)   # once: the signature builds the list per call
    inputs = [n for n in nodes if n.op == "placeholder" and n.name in token_names]
    calls = [n for n in nodes if n.op == "call_function" and isinstance(n.target, _torch.HigherOrderOperator)
             and n.target.name() == "with_effects"]
    if len(inputs) != len(sig.output_tokens) or (calls and not inputs):
        _fail(None, "effect tokens must come in (input, output) pairs, one pair per chain of with_effects calls")
    for start, out_name in zip(inputs, sig.output_tokens):
        token = start
        while True:
            readers = [u for u in token.users if u in calls and u.args[0] is token]
            others = [u for u in token.users if u not in readers and u.op != "output"]
            if len(readers) > 1 or others:
                _fail(token, "an effect token is read by exactly one with_effects call, as its first argument")
            if not readers:
                break
            calls.remove(readers[0])
            token = next((u for u in readers[0].users if u.target is operator.getitem and u.args[1] == 0), None)
            if token is None:
                _fail(readers[0], "a with_effects call's new token (its result 0) must be taken")
        if token.name != out_name:
            _fail(token, f"the effect chain from {start.name} must end in the output token {out_name}")
    if calls:
        _fail(calls[0], "every with_effects call must be on a token chain")


def _check_nodes(module: fx.GraphModule, where: str, dialect: str) -> None:
    """The rules every graph obeys, the program's and each subgraph's (recursively)."""
    nodes = list(module.graph.nodes)
    members = set(nodes)
    defined: set[fx.Node] = set()
    checked_targets: set[int] = set()   # id() of targets whose rules were checked (the nodes keep them alive)
    if not nodes or nodes[-1].op != "output" or sum(n.op == "output" for n in nodes) != 1:
        _fail(None, f"{where} must end with exactly one output node")
    for node in nodes:
        inputs = node.all_input_nodes
        later = [arg for arg in inputs if arg in members and arg not in defined]
        if later:
            _fail(node, f"its argument {later[0].name} is computed after it: nodes must come in the order "
                        "they are computed")
        defined.add(node)
        strangers = [user for user in node.users if user not in members]
        if strangers:
            _fail(node, f"its users include {strangers[0].name}, which is not in the graph: a value leaked "
                        "from one scope into another")
        if node.op in ("call_module", "call_method"):
            _fail(node, f"{node.op} is not allowed: the graph must be flat ATen calls")
        if node.op == "get_attr":
            _check_subgraph(module, node, where, dialect)
            continue
        if node.op == "placeholder" and "val" not in node.meta:
            _fail(node, "every placeholder needs meta['val']")
        if node.op != "call_function":
            continue
        if id(node.target) not in checked_targets:
            _check_target(node, dialect)
            checked_targets.add(id(node.target))
        for arg in inputs:
            if arg not in members:
                _fail(node, f"its argument {arg.name} is not in the graph")
        for key in ("val", "stack_trace", "nn_module_stack"):
            if key not in node.meta:
                _fail(node, f"every call needs meta['{key}']")
    check_data_dependent_bindings(nodes, _fail)


def _check_target(node: fx.Node, dialect: str) -> None:
    """The rules on what a call may call (they depend on its target alone)."""
    if not _is_allowed_target(node.target):
        _fail(node, "call targets must be ATen/custom operator overloads, getitem, symbolic-size ops or "
                    "graphport higher-order ops")
    if isinstance(node.target, _torch.OpOverload) and (writes_arguments(node.target)
                                                       or node.target._schema.is_mutable):
        _fail(node, "the graph must be functional: no in-place, out= or mutating operators")
    if dialect == "core_aten" and not _in_core_aten(node.target):
        _fail(node, "the Core ATen dialect allows only operators tagged core (torch.Tag.core), custom "
                    "operators, control-flow operators, getitem, size operators and assertions")


def _check_subgraph(module: fx.GraphModule, node: fx.Node, where: str, dialect: str) -> None:
    """get_attr only reaches a control-flow subgraph (state is lifted to placeholders), which
    obeys the contract itself and is passed only to control-flow operators."""
    sub = getattr(module, node.target, None) if isinstance(node.target, str) else None
    if not isinstance(sub, fx.GraphModule):
        _fail(node, "get_attr is only allowed for control-flow subgraphs: state must be lifted to placeholders")
    for user in node.users:
        if not (user.op == "call_function" and isinstance(user.target, _torch.HigherOrderOperator)
                and user.target.name() in _CONTROL_FLOW):
            _fail(node, f"the subgraph {node.target} is used by {user.name}, which is no control-flow operator")
    _check_nodes(sub, f"subgraph {node.target} of {where}", dialect)


class Verifier:
    """A program's verifier, as torch.export names them (`ep.verifier`, `ep.verifiers`,
    `ep.dialect`): `Verifier().check(ep)` checks `ep` against the IR contract at this
    verifier's level. `dialect` is torch's name of the program's level: "ATEN" for a lowered
    program, "TRAINING" for export's own (TrainingIRVerifier)."""

    dialect = "ATEN"
    level = "default"      # the operator level `verify` checks

    def check(self, ep) -> None:
        verify(ep, dialect=self.level)


class TrainingIRVerifier(Verifier):
    """The verifier of what `export` returns: torch.export's default level of operators."""

    dialect = "TRAINING"


class CoreATenVerifier(Verifier):
    """The verifier of `run_decompositions()` with the default table: also every operator in
    the Core ATen opset."""

    level = "core_aten"

"""The joint forward-backward program of on-device training: `_export_forward_backward`.

torch.export's `torch.export.experimental._export_forward_backward(ep, joint_loss_index)`
turns a program whose outputs include a scalar loss into one graph that computes the
forward, the loss, and the loss's gradients with respect to every parameter that
requires grad and every user input whose example required grad, as extra outputs; the
signature's backward (`graph_signature.backward_signature`) says which output is which.
Buffer updates (BatchNorm's running statistics in train mode) stay mutations.

graphport captures below autograd, so the program's graph holds no backward. It is made
by replaying the program's own graph with autograd on (capture/gradients.py): autograd
records how to differentiate each replayed call as it reaches the capture mode, and
`torch.autograd.grad` of the loss then runs torch's derivative formulas, whose ATen calls
the same capture mode records. As torch's does, the joint program is at the Core ATen
level: the replay decomposes with the default table, below autograd, so autograd
differentiates the operators the program holds (`nll_loss_forward` by its own formula,
not by its decomposition's pieces), and the backward's operators are lowered by the same
table. The shape contract carries over as `run_decompositions` carries it: a backward that
needs a shape fact the program was not exported with is refused, and one that assumes
sizes larger than the program was proven for is traced again at the smaller sizes
(passes/lowering_sizes.py).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
import torch.fx as fx

from ..capture.gradients import GradientReport, GradientRequest
from ..capture.replay import replay
from ..errors import UnsupportedFeatureError, UserError
from ..ops.decompositions import TablePolicy, default_decompositions
from ..signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec, TensorArgument
from .decompose import (_argument, _narrowed, _no_new_shape_facts, _renamed, _replay_inputs,
                        _traced_again)
from .lowering_sizes import LoweredValidity, lowered_validity
from .verifier import Verifier

if TYPE_CHECKING:   # passes take a program and return ep.replace(...): they sit below program.py
    from ..program import ExportedProgram

# Kept whole in a joint program although the Core ATen table expands them: their
# decomposition's extra outputs are not the kernel's, and their derivative formula reads
# those. CPU flash attention's decomposition returns the attention weights where the kernel
# returns the log-sum-exp its backward reads, so its backward would compute other gradients
# than eager (torch 2.13's joint export does decompose it, and its gradients differ).
_KEPT_FOR_THE_BACKWARD = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,)


def _joint_table() -> dict:
    table = default_decompositions()
    for op in _KEPT_FOR_THE_BACKWARD:
        table.pop(op, None)
    return table.materialize()


def export_forward_backward(ep: ExportedProgram, joint_loss_index: int = 0) -> ExportedProgram:
    """A new program computing `ep`'s outputs and the gradients of its user output number
    `joint_loss_index` (a scalar) with respect to the parameters that require grad and the
    user inputs whose example required grad. `ep` is left untouched."""
    sig = ep.graph_signature
    if sig.backward_signature is not None:
        raise UnsupportedFeatureError("the program is a joint forward-backward program already",
                                      fix="call _export_forward_backward on the program graphport.export returned")
    if any(n.op == "get_attr" for n in ep.graph.nodes):
        raise UnsupportedFeatureError(
            "the program has control flow (torch.cond, map, while_loop or scan), which the joint forward-backward "
            "export cannot differentiate yet",
            fix="compute both sides and select with torch.where instead of torch.cond, or unroll the loop")
    if any(n.op == "call_function" and n.target is torch.ops.aten.alias.default for n in ep.graph.nodes):
        raise UnsupportedFeatureError(
            "the program was lowered (run_decompositions turns each detach into an alias node, which does not say "
            "that the gradient stops there), so its joint forward-backward graph could differentiate through a "
            "detach", fix="call _export_forward_backward on the program graphport.export returned, before "
                          "run_decompositions (the joint program is at the Core ATen level already)")
    user_specs = [i for i, s in enumerate(sig.output_specs) if s.kind is OutputKind.USER_OUTPUT]
    if not 0 <= joint_loss_index < len(user_specs):
        raise UserError(f"joint_loss_index={joint_loss_index}, but the program has {len(user_specs)} user output"
                        f"{'s' if len(user_specs) != 1 else ''}",
                        fix="pass the position of the loss among the program's flat outputs")
    loss_at = user_specs[joint_loss_index]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    wrt = tuple(s.arg.name for s in sig.input_specs if _differentiated(ep, s, placeholders))
    request = GradientRequest(loss=loss_at, wrt=wrt, user_outputs_from=user_specs[0])
    # the joint graph reasons about sizes in a fork of the program's environment, which the
    # joint program then owns: the program given is never changed
    env = ep.shape_env.fork(with_facts=True) if ep.shape_env is not None else None
    policy = TablePolicy(_joint_table())

    def inputs(shape_env):
        return dataclasses.replace(_replay_inputs(ep, shape_env, frozenset()), gradients=request, effect_tokens=False)

    def joint_again(program: fx.GraphModule, pinned_env) -> tuple:
        again = replay(program, policy, inputs(pinned_env))
        return again.graph_module.graph, again.constant_values

    def validity(assumed: list) -> LoweredValidity:
        return lowered_validity(ep, env, assumed, joint.graph_module.graph, joint.constant_values, joint_again)

    traced_again = _traced_again(ep.graph, env)
    with _no_new_shape_facts(env, ep.shape_env, traced_again and validity) as proven:
        joint = replay(ep.graph_module, policy, inputs(env))
        _check_gradients(ep, joint.gradients, request)
        small = _sizes_0_and_1(env, validity) if traced_again else LoweredValidity({}, [])
    for sym, (least, reason) in small.valid_from.items():
        if least > proven.valid_from.get(sym, (0, ""))[0]:
            proven.valid_from[sym] = (least, reason)
    graph = joint.graph_module.graph
    input_specs = list(sig.input_specs)
    first_user = next((i for i, s in enumerate(input_specs) if s.kind is InputKind.USER_INPUT), len(input_specs))
    input_specs[first_user:first_user] = [InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name), target)
                                          for name, target in joint.new_constants.items()]
    out_values = next(n for n in graph.nodes if n.op == "output").args[0]
    output_specs = [OutputSpec(OutputKind.LOSS_OUTPUT if i == loss_at else spec.kind, _argument(value), spec.target)
                    for i, (spec, value) in enumerate(zip(sig.output_specs, out_values))]
    by_name = {s.arg.name: s for s in sig.input_specs}
    for name, value in zip(wrt, out_values[len(sig.output_specs):]):
        spec = by_name[name]
        kind, target = (OutputKind.GRADIENT_TO_PARAMETER, spec.target) if spec.kind is InputKind.PARAMETER \
            else (OutputKind.GRADIENT_TO_USER_INPUT, name)
        output_specs.append(OutputSpec(kind, TensorArgument(value.name), target))
    contract, report = _narrowed(ep, env, proven.valid_from)
    return ep.replace(
        graph_module=joint.graph_module, graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict=dict(ep.state_dict), module_call_graph=[_renamed(e, joint.renamed) for e in ep.module_call_graph],
        constants={**ep.constants, **joint.constant_values}, input_paths=list(ep.input_paths),
        input_aliases=dict(ep.input_aliases), shape_contract=contract, shape_env=env, shape_report=report,
        verifiers=[Verifier])


def _sizes_0_and_1(env, validity) -> LoweredValidity:
    """Where the joint graph is not valid at sizes 0 and 1 of a dynamic dimension whose
    range has them: it is traced again there and compared (passes/lowering_sizes.py).
    torch's derivative formulas are C++ computing with concrete sizes; their decompositions
    compute with the graph's symbolic ones (`mse_loss`'s backward divides by the element
    count: a Python division by zero at batch 0, where eager's C++ gives inf), so the
    backward is not known valid there from the program's own proof, whatever the capture
    proved. A size where the joint graph fails or computes something else is refused at
    call time, with the reason."""
    symbols = sorted((s for s in env.symbols if s not in env.exact), key=str)
    saved = dict(env.assumed_min)
    try:
        for sym in symbols:   # the proof traces the sizes below the assumed minimum
            env.assumed_min[sym] = 2
        found = validity([(sym, 2) for sym in symbols])
    finally:
        env.assumed_min.clear()
        env.assumed_min.update(saved)
    if found.exclusions:
        together = ", ".join(f"{env.symbols[s].dim_name} = {v}" for s, v in found.exclusions[0].items())
        raise UnsupportedFeatureError(
            f"the joint forward-backward graph computes something else when {together} together, sizes the "
            "program accepts", fix="narrow those Dims' ranges (min=2) and export again")
    return found


def _differentiated(ep: ExportedProgram, spec: InputSpec, placeholders: dict[str, fx.Node]) -> bool:
    """Whether the joint program computes a gradient for this input, as torch's does: a
    parameter that requires grad, or a user input whose example required grad."""
    if spec.kind is InputKind.PARAMETER:
        return bool(ep.state_dict[spec.target].requires_grad)
    if spec.kind is InputKind.USER_INPUT:
        val = placeholders[spec.arg.name].meta.get("val")
        return isinstance(val, torch.Tensor) and bool(val.requires_grad)
    return False


def _check_gradients(ep: ExportedProgram, report: GradientReport, request: GradientRequest) -> None:
    """The requirements torch's joint export states, in the user's terms: the loss is a
    scalar that requires grad, no other output requires grad, every parameter asked for
    gets a gradient."""
    sig = ep.graph_signature
    if report.other_outputs_requiring_grad:
        index = report.other_outputs_requiring_grad[0]
        raise UserError(
            f"output {index - request.user_outputs_from} of the program requires grad but is not the loss; the "
            "joint graph differentiates the loss only", fix="return that output detached (out.detach()), or pass "
            "its index as joint_loss_index if it is the loss",
            torch_phrase="Found an output of the forward that requires gradients, that was not the scalar loss")
    if not report.loss_requires_grad:
        raise UserError(
            "the output marked as the loss does not require grad: no parameter or input that requires grad "
            "reaches it", fix="pass the index of the loss output as joint_loss_index, and check that the parameters "
            "it depends on have requires_grad=True (and that it is not computed under torch.no_grad() or detached)",
            torch_phrase=f"The output at index {request.loss - request.user_outputs_from} was marked as the loss, "
                         "but it does not require gradients")
    if report.loss_numel != 1:
        raise UserError(
            f"the output marked as the loss has {report.loss_numel} elements; the joint export differentiates a "
            "scalar loss", fix="reduce the loss to a scalar in forward (loss.mean() or loss.sum())",
            torch_phrase="We require the output marked as the loss (at index "
                         f"{request.loss - request.user_outputs_from}) to be a scalar")
    if report.without_gradient:
        names = dict(zip((s.arg.name for s in sig.input_specs), (s.target or s.arg.name for s in sig.input_specs)))
        missing = ", ".join(names[n] for n in report.without_gradient)
        raise UserError(
            f"the loss does not depend on {missing}, which requires grad, so it would get no gradient",
            fix="freeze what the loss does not use before exporting (param.requires_grad_(False)), or pass user "
                "inputs that need no gradient without requires_grad",
            torch_phrase="Found a parameter that did not receive a gradient")

"""`graphport.export`: the pipeline from a user program to an ExportedProgram.

    spec      resolve dynamic_shapes against the inputs: symbols and declared ranges
    capture   run the program once on tracers, recording one functional graph
    passes    drop what capture made for itself and nobody uses
    shapes    check the guards against the spec; prove sizes 0 and 1 by tracing there
    program   the ExportedProgram, checked by the verifier
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import time
import warnings
from typing import Any, Callable

import torch

from . import progress
from .capture import Captured, argument_names, capture, input_paths, program_module
from .capture.pinned_metadata import (PinnedSessions, ProvenOutcomes, TakenOver, proven_by_metadata,
                                      proven_by_size)
from .audit import PythonAudit, PythonEffect, PythonEffectWarning
from .capture.dead_code import eliminate_dead_code
from .capture.local_proofs import LocalVerdicts
from .errors import (ConstraintViolationError, GraphportError, InputMismatchError, UnsupportedFeatureError,
                     UnsupportedInputError)
from .passes.small_sizes import SmallSizeReport, prove_small_sizes
from .program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .shapes.check import build_contract, check
from .shapes.contract import ShapeContract
from .shapes.dims import AdditionalInputs, ShapesCollection
from .shapes.spec import InputShapes, resolve
from .shapes.torch_spec import from_torch
from .shapes.unbacked import with_data_dependent
from .split_export import export_with_split_branches

log = logging.getLogger("graphport.export")
shapes_log = logging.getLogger("graphport.shapes")
capture_log = logging.getLogger("graphport.capture")
_STAGES = 5   # resolve, capture, shapes, program, verify: the steps progress counts


def export(mod: torch.nn.Module | Callable, args: tuple, kwargs: dict | None = None, *,
           dynamic_shapes: Any = None, strict: bool = False,
           preserve_module_call_signature: tuple[str, ...] = (),
           prefer_deferred_runtime_asserts_over_guards: bool = False,
           audit_python: bool = True) -> ExportedProgram:
    """Capture `mod(*args, **kwargs)` as one functional ATen graph.

    `mod` may be an nn.Module, a bound method of one (its module's state is lifted), or a
    plain function. The program's own Python is audited while it runs (graphport.audit):
    with `strict=True` an effect the graph cannot carry (a write to state that outlives the
    call, printing or logging, I/O, a clock read, Python's random generators) is refused with
    a PythonEffectError before it happens; by default each is a PythonEffectWarning, and
    `ep.python_effects` lists them with the Python values the graph baked in.
    `audit_python=False` turns the non-strict audit off.
    `dynamic_shapes` may also be a ShapesCollection or AdditionalInputs, graphport's or
    torch.export's, and may use torch.export's Dim objects.
    """
    if prefer_deferred_runtime_asserts_over_guards:
        raise UnsupportedFeatureError(
            "export(prefer_deferred_runtime_asserts_over_guards=True) is not implemented by graphport: it checks "
            "every shape guard against dynamic_shapes at export time",
            fix="drop prefer_deferred_runtime_asserts_over_guards, or export with torch.export for that mode")
    if not isinstance(args, tuple):
        raise UnsupportedInputError(
            f"export expects args as a tuple of positional arguments, got a {type(args).__qualname__}",
            fix="wrap a single input in a tuple: graphport.export(model, (x,))",
            torch_phrase=f"Expecting `args` to be a tuple of example positional inputs, got {type(args)}")
    kwargs = dict(kwargs or {})
    fn, root = _resolve(mod)
    if preserve_module_call_signature and root is None:
        raise UnsupportedInputError(
            "preserve_module_call_signature names submodules, but the exported program is a plain function",
            fix="export the nn.Module itself, or drop preserve_module_call_signature")
    arg_names = argument_names(fn, args, kwargs)
    additional = dynamic_shapes if isinstance(dynamic_shapes, AdditionalInputs) else None
    if not isinstance(dynamic_shapes, ShapesCollection) and callable(getattr(dynamic_shapes, "dynamic_shapes", None)):
        dynamic_shapes = dynamic_shapes.dynamic_shapes(mod, args, kwargs)
    dynamic_shapes = from_torch(dynamic_shapes)
    shapes = None
    with _stage("resolve dynamic_shapes", 1):
        if dynamic_shapes is not None:
            shapes = resolve(dynamic_shapes, args, kwargs, arg_names, input_paths(args, kwargs, arg_names))

    def trace(shapes_: InputShapes | None, locations: bool = True, prove_locally: bool = False,
              audit: PythonAudit | None = None, program: Callable = fn) -> Captured:
        captured = capture(program, args, kwargs, root, shapes_, locations=locations,
                           preserve=tuple(preserve_module_call_signature), prove_locally=prove_locally,
                           audit=audit)
        eliminate_dead_code(captured.graph, captured.user_calls)
        return captured

    audit = PythonAudit(strict) if strict or audit_python else None
    with _stage("capture", 2), progress.module_calls(root, "capture"):
        captured = trace(shapes, prove_locally=True, audit=audit)
    if capture_log.isEnabledFor(logging.INFO):
        capture_log.info("captured %d nodes, %d tensors of state, %d constants", len(captured.graph.nodes),
                         len(captured.state_dict), len(captured.constants))
    findings = audit.findings if audit is not None else []
    try:
        try:
            ep = _finish(fn, root, args, kwargs, captured, shapes, trace, preserve_module_call_signature, findings)
        except ConstraintViolationError:
            # branches on size predicates the spec cannot decide, captured as conds; a program
            # whose Python has effects is not run again for it (reading a value the graph bakes in
            # is no effect: running the program again reads it again)
            ep = None if shapes is None or any(f.refused_by_strict for f in findings) else export_with_split_branches(
                fn, lambda: resolve(dynamic_shapes, args, kwargs, arg_names, input_paths(args, kwargs, arg_names)),
                lambda program, shapes_: trace(shapes_, prove_locally=True, program=program,
                                               audit=PythonAudit(strict) if audit is not None else None),
                lambda program, captured_, shapes_: _finish(
                    program, root, args, kwargs, captured_, shapes_,
                    lambda s, locations=True, prove_locally=False: trace(s, locations, prove_locally, program=program),
                    preserve_module_call_signature, findings))
            if ep is None:
                raise
    except GraphportError as err:
        err.python_effects = findings   # the program ran once with these; draft_export reads them
        raise
    for effect in findings:
        if effect.refused_by_strict:
            warnings.warn_explicit(f"graphport: the program's Python {effect.what} (strict=True refuses this)\n"
                                   f"  fix: {effect.fix}", PythonEffectWarning, effect.location.filename,
                                   effect.location.lineno)
    with _stage("additional inputs", 5):
        if additional is not None:
            check_additional_inputs(ep, additional)
    return ep


def _finish(fn, root, args, kwargs, captured: Captured, shapes: InputShapes | None, trace: Callable,
            preserve_module_call_signature, findings: list[PythonEffect]) -> ExportedProgram:
    """Everything after the capture: the shape contract, the program, its verification."""
    repeated = [f for f in findings if f.refused_by_strict and not f.restored]
    with _stage("shape checks and small-size proofs", 3):
        verdicts, proven = _settle(shapes) if shapes is not None else (None, None)
        contract = None if shapes is None else _shape_contract(shapes, captured, trace, repeated, verdicts, proven)
        contract = with_data_dependent(contract, captured.shape_env)
    for note in [] if shapes is None else shapes.specialized:
        shapes_log.info("specialized: %s", note)
        warnings.warn(f"graphport: {note}", stacklevel=4)
    call_graph = [ModuleCallEntry("", ModuleCallSignature([], [], captured.in_spec, captured.out_spec,
                                                          captured.forward_arg_names,
                                                          _keywords_by_name(fn, kwargs)))]
    if root is not None:
        call_graph += _submodule_entries(root, captured.boundaries)
    with _stage("program and verifier", 4):
        return ExportedProgram(
            graph_module=program_module(captured.graph), graph_signature=captured.signature,
            state_dict=captured.state_dict,
            module_call_graph=call_graph, example_inputs=(args, kwargs), constants=captured.constants,
            input_paths=captured.input_paths, input_aliases=captured.input_aliases, shape_contract=contract,
            shape_env=captured.shape_env, shape_report=list(shapes.specialized) if shapes is not None else [],
            python_effects=findings)


def _settle(shapes: InputShapes, inherited: TakenOver | None = None
            ) -> tuple[LocalVerdicts | None, ProvenOutcomes | None]:
    """Prove the assumptions the capture left to the operator-by-operator proof: all of them
    if it can, else what it settles size by size (capture/local_proofs.py); and the outcomes
    that hold at every size of the symbols they leave open, for a re-trace at pinned sizes to
    take over (`inherited`: those of the capture this one re-traces)."""
    deferral = shapes.env.deferral
    if deferral is None:
        return None, None
    with PinnedSessions(shapes, inherited) as sessions:
        deferral.settle(lambda deferred: proven_by_metadata(deferred, sessions),
                        lambda deferred, local: proven_by_size(deferred, sessions, local))
    return deferral.verdicts, ProvenOutcomes(deferral, sessions)


@contextlib.contextmanager
def _stage(name: str, step: int):
    """One step of export: its time on the `graphport.export` logger, its end to the
    progress listener."""
    start = time.perf_counter()
    yield
    if log.isEnabledFor(logging.INFO):
        log.info("%-36s %8.3f s", name, time.perf_counter() - start)
    progress.report("export", step, _STAGES)


def _submodule_entries(root: torch.nn.Module, boundaries: dict) -> list[ModuleCallEntry]:
    """One entry per submodule path (a module reachable by two paths gets both, the later one
    naming the first as `alias_of`), with the recorded signature of each preserved one; then
    one entry per later call of a preserved module (`path@1`, ...), as torch.export lists them."""
    first: dict[int, str] = {}
    entries = []
    for name, module in root.named_modules(remove_duplicate=False):
        first.setdefault(id(module), name)
        if not name:
            continue
        b = boundaries.get(name)
        signature = None if b is None else ModuleCallSignature(b.inputs, b.outputs, b.in_spec, b.out_spec,
                                                                 b.forward_arg_names, state_writes=b.state_writes)
        entries.append(ModuleCallEntry(name, signature, alias_of=first[id(module)] if first[id(module)] != name else None))
    for key, b in boundaries.items():
        if "@" in key:
            entries.append(ModuleCallEntry(key, ModuleCallSignature(b.inputs, b.outputs, b.in_spec, b.out_spec,
                                                                    b.forward_arg_names, state_writes=b.state_writes)))
    return entries


def check_additional_inputs(ep: ExportedProgram, additional: AdditionalInputs) -> None:
    """Every additional input set must be one the program accepts."""
    module = ep.module()
    for args, kwargs in additional.examples:
        try:
            module._check_call_values(args, kwargs)
        except InputMismatchError as err:
            raise ConstraintViolationError(
                f"the program captured from the example inputs does not accept one of the AdditionalInputs: "
                f"{err.what}", fix="export with example inputs whose sizes take the same path as the additional "
                                   "ones, or drop that input set") from None


def _shape_contract(shapes: InputShapes, captured: Captured, trace: Callable,
                    effects: list[PythonEffect], verdicts: LocalVerdicts | None = None,
                    proven: ProvenOutcomes | None = None) -> ShapeContract:
    """Check the guards against the spec, prove the small sizes, and write the contract.

    Proving a small size traces the program again; a program whose Python has effects would
    make them again, so its small sizes below what the capture assumed are not proven but
    refused at call time, with that reason."""
    def retrace(pinned: InputShapes, locations: bool = True, pins: dict | None = None):
        with warnings.catch_warnings():   # a size predicate is a Python bool there: torch.cond warns, for nothing
            warnings.filterwarnings("ignore", message="Pred is a Python constant")
            again = trace(pinned, locations, prove_locally=True)
        inherited = proven.pinned(pins) if proven is not None and pins is not None else None
        return again.graph, again.constants, _settle(pinned, inherited)[0]
    if effects:
        report = SmallSizeReport()
        unproven = (f"not proven: proving it traces the program again, which would repeat its Python effects "
                    f"({effects[0].kind} at {effects[0].location}; see ep.python_effects)")
    else:
        report = prove_small_sizes(retrace, shapes, captured.graph, captured.constants, settled=verdicts)
        unproven = "the capture's decisions assumed larger sizes"
    if shapes_log.isEnabledFor(logging.INFO):
        _log_small_sizes(shapes, report)
    # A size where the program computes something else than at the example breaks the
    # declared range; one where the program fails (as eager would) is refused at call time.
    # Dim.AUTO / Dim.DYNAMIC declare no range of their own: such a size narrows the range
    # instead, and a call there is refused with the reason.
    differs = {(sym, size): (refusal.reason, refusal.where) for (sym, size), refusal in report.refused.items()
               if not refusal.fails_in_eager and shapes.kinds.get(sym) == "dim"}
    kept = check(shapes, differs)
    valid_from = {}
    for sym, least in shapes.env.assumed_min.items():
        valid = set(report.valid.get(sym, []))
        lowest = least
        while lowest - 1 in valid:
            lowest -= 1
        if lowest > shapes.env.symbols[sym].declared.lower:
            refusal = report.refused.get((sym, lowest - 1))
            # the reason is the one size's below the valid range: it says which, so that it
            # claims nothing of the smaller sizes refused with it (eager may run those)
            reason = (f"at {shapes.env.symbols[sym].dim_name} = {lowest - 1}, {refusal.reason}" if refusal is not None
                      else unproven)
            valid_from[sym] = (lowest, reason)
            what = (f"narrows Dim.{shapes.kinds[sym].upper()}'s range" if shapes.kinds.get(sym) in ("auto", "dynamic")
                    else "is refused at call time")
            shapes.specialized.append(f"{shapes.env.symbols[sym].dim_name} < {lowest} {what}: {reason}")
    return build_contract(shapes, kept, valid_from, report.exclusions)


def _log_small_sizes(shapes: InputShapes, report) -> None:
    """Which sizes below the capture's assumptions were proven to give the same program, and
    why the others were not."""
    def name(sym):
        return shapes.env.symbols[sym].dim_name
    for sym, least in shapes.env.assumed_min.items():
        shapes_log.info("capture assumed %s >= %d; proving the sizes below it by tracing there", name(sym), least)
    for sym, sizes in report.valid.items():
        shapes_log.info("small sizes proven: %s = %s give the same program", name(sym), sorted(sizes))
    for (sym, size), refusal in report.refused.items():
        where = f" (at {refusal.where})" if refusal.where else ""
        outcome = "fails as eager does, refused at call time" if refusal.fails_in_eager else "differs"
        shapes_log.info("small size %s = %d %s: %s%s", name(sym), size, outcome, refusal.reason, where)
    for pins in report.exclusions:
        shapes_log.info("combination %s refused at call time", {name(s): v for s, v in pins.items()})
    shapes_log.debug("traced the program %d times: the capture and %d small-size proofs", 1 + report.traces,
                     report.traces)


def _keywords_by_name(fn: Callable, kwargs: dict) -> bool:
    """Whether every keyword argument binds a named parameter of `fn` (then their order at a
    call cannot change what the program computes; a **kwargs dict's order can)."""
    try:
        params = inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters.values()
    except (TypeError, ValueError):
        return False
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return all(k in named for k in kwargs)


def _resolve(mod) -> tuple[Callable, torch.nn.Module | None]:
    if isinstance(mod, torch.nn.Module):
        return mod, mod
    if inspect.ismethod(mod) and isinstance(mod.__self__, torch.nn.Module):
        return mod, mod.__self__
    if callable(mod):
        return mod, None
    raise UnsupportedInputError(f"export expects an nn.Module or a function, got a {type(mod).__qualname__}",
                                fix="pass the model itself, e.g. graphport.export(model, (x,))")

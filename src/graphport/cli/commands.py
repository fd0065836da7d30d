"""What each `graphport` command does, given its parsed arguments; returns the exit code."""
from __future__ import annotations

import os

import torch

from .. import _torch
from ..errors import CommandLineError
from ..signature import ConstantArgument, InputKind
from .progress import Progress
from .summary import summary
from .targets import artifact_api, format_version, load_entry, load_hf, load_program

pytree = _torch.pytree


def export_cmd(args) -> int:
    from ..export import export
    from ..passes.verifier import verify
    if (args.model is None) == (args.hf is None):
        raise CommandLineError("export needs exactly one of MODULE:CALLABLE and --hf MODEL_TYPE",
                               fix="e.g. graphport export mypkg:make_model --args mypkg:inputs -o model.gport",
                               find_location=False)
    if args.hf is None and (args.config or args.weights):
        raise CommandLineError("--config and --weights go with --hf", fix="add --hf MODEL_TYPE",
                               find_location=False)
    save = artifact_api("save")
    progress = Progress("export")
    try:
        progress.status("building the model")
        entry = (load_hf(args.hf, args.config, args.weights, args.dynamic) if args.hf
                 else load_entry(args.model, args.args, args.dynamic))
        progress.status("capturing")
        ep = export(entry.model, entry.args, entry.kwargs, dynamic_shapes=entry.dynamic_shapes)
        progress.status("verifying")
        verify(ep)
        progress.status(f"saving {args.output}")
        save(ep, args.output)
    finally:
        progress.close()
    print(f"wrote {args.output} ({os.path.getsize(args.output):,} bytes)")
    return 0


def inspect_cmd(args) -> int:
    ep = _program(args)
    version = format_version(args.target) if os.path.exists(args.target) else None
    print(summary(ep, version))
    if args.graph:
        print()
        print(ep)
    return 0


def run_cmd(args) -> int:
    from safetensors.torch import load_file, save_file
    ep = _program(args)
    if not os.path.exists(args.inputs):
        raise CommandLineError(f"no such file: {args.inputs}", fix="give a safetensors file of input tensors",
                               find_location=False)
    tensors = load_file(args.inputs)
    leaves = []
    users = [s for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for i, spec in enumerate(users):
        path = ep.input_paths[i] if i < len(ep.input_paths) else spec.arg.name
        if isinstance(spec.arg, ConstantArgument):
            leaves.append(spec.arg.value)
        elif path in tensors:
            leaves.append(tensors[path])
        else:
            from ..describe import describe_value
            raise CommandLineError(
                f"{args.inputs} has no tensor named {path!r} (it has {sorted(tensors)})",
                fix=f"save the input as {path!r}: {describe_value(placeholders[spec.arg.name].meta.get('val'))}",
                find_location=False)
    call_args, call_kwargs = pytree.tree_unflatten(leaves, ep.call_spec.in_spec)
    with torch.no_grad():
        outputs = ep.module()(*call_args, **call_kwargs)
    flat = pytree.tree_leaves(outputs)
    named = {f"output_{i}": t.contiguous() for i, t in enumerate(flat) if isinstance(t, torch.Tensor)}
    save_file(named, args.output)
    for i, value in enumerate(flat):
        shown = f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}" if isinstance(value, torch.Tensor) \
            else repr(value)
        print(f"output_{i}: {shown}")
    print(f"wrote {args.output}")
    return 0


def check_cmd(args) -> int:
    from ..check import check
    from ..export import export
    entry = load_entry(args.model, args.args, args.dynamic)
    progress = Progress("check")
    try:
        if args.program:
            ep = load_program(args.program)
            if ep.example_inputs is None:   # a loaded program may not carry them: draw like the entry's
                ep.example_inputs = (entry.args, entry.kwargs)
        else:
            progress.status("exporting")
            ep = export(entry.model, entry.args, entry.kwargs, dynamic_shapes=entry.dynamic_shapes)
        report = check(entry.model, ep, samples=args.samples, max_size=args.max_size, seed=args.seed,
                       progress=progress)
    finally:
        progress.close()
    print(report)
    return 0 if report.passed else 1


def view_cmd(args) -> int:
    from ..viewer import write_html
    progress = Progress("view")
    try:
        progress.status("loading")
        ep = _program(args)
        progress.status(f"writing {args.output}")
        write_html(ep, args.output)
    finally:
        progress.close()
    print(f"wrote {args.output}")
    return 0


def _program(args):
    return load_program(args.target, args.args, args.dynamic)

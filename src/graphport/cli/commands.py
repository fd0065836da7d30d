"""What each `graphport` command does, given its parsed arguments; returns the exit code.

Loaded only after the command line is checked (it imports torch)."""
from __future__ import annotations

import contextlib
import io
import os

import torch

from .. import _torch
from ..errors import CommandLineError
from ..signature import ConstantArgument, InputKind
from ..progress import on_progress
from .progress import Progress
from .summary import summary
from .targets import artifact_api, format_version, is_pt2, load_entry, load_hf, load_program

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
        args.dynamic_flags = entry.dynamic_flags
        progress.status("capturing")
        with on_progress(progress.listener):
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
    version = format_version(args.target) if os.path.exists(args.target) and not is_pt2(args.target) else None
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
    args.dynamic_flags = args.dynamic
    progress = Progress("check")
    try:
        if args.program:
            progress.status(f"loading {args.program}")
            ep = load_program(args.program)
            # the program's own example inputs, when it carries them, seed the draws
            entry = load_entry(args.model, args.args, args.dynamic, inputs_required=ep.example_inputs is None)
            if ep.example_inputs is None:
                ep = ep.replace(example_inputs=(entry.args, entry.kwargs))
        else:
            entry = load_entry(args.model, args.args, args.dynamic)
            progress.status("exporting")
            with on_progress(progress.listener):
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


def convert_cmd(args) -> int:
    from ..interop import to_torch
    output = args.output   # defaulted next to the input by check_paths
    progress = Progress("convert")
    try:
        progress.status("loading")
        ep = _program(args)
        progress.status("converting to torch.export")
        tep = to_torch(ep)
        progress.status(f"writing {output}")
        with _removed_on_failure(output):
            if args.to == "pt2":
                torch.export.save(tep, output)
            else:
                write_onnx(tep, output)
    finally:
        progress.close()
    print(f"wrote {output} ({os.path.getsize(output):,} bytes)")
    return 0


@contextlib.contextmanager
def _removed_on_failure(path: str):
    """No half-written file is left behind when a writer fails part way."""
    existed = os.path.exists(path)
    try:
        yield
    except BaseException:
        if not existed and os.path.exists(path):
            os.remove(path)
        raise


def write_onnx(tep, output: str) -> None:
    """torch.onnx's exporter on the converted program; dynamic dims stay symbolic ONNX dims."""
    try:
        import onnxscript  # noqa: F401 -- torch.onnx's exporter needs it; say so before it fails deep inside
    except ImportError as e:
        raise CommandLineError("--to onnx needs the onnx and onnxscript packages",
                               fix="pip install 'graphport[interop]'", find_location=False) from e
    with contextlib.redirect_stdout(io.StringIO()):   # torch.onnx reports its passes on stdout
        torch.onnx.export(tep, dynamo=True).save(output)


def _program(args):
    args.dynamic_flags = getattr(args, "dynamic", None)
    return load_program(args.target, args.args, args.dynamic)

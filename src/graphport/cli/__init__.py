"""The `graphport` command line: export, inspect, run, check, view and convert programs.

Exit codes (docs/cli.md):
  0  success
  1  `check` found a problem (a mismatch with eager, an input not refused)
  2  the command line is wrong (argparse usage, an entry point that does not import, a file
     that does not exist, an output directory that does not, a malformed --dynamic); checked
     before any work starts, where the arguments alone tell
  3  graphport refused the work with an error of its own (export failed, an input refused)
  4  an unexpected error: a bug in graphport or in the user's code outside capture

Only argparse, os and graphport's errors load before the arguments are checked: torch and
the commands load after, so `--help`, `--version` and a wrong command line answer at once.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from ..errors import CommandLineError, GraphportError, InternalError

EXIT_USAGE, EXIT_REFUSED, EXIT_INTERNAL = 2, 3, 4
PROGRAM_FILES = ".gport or .pt2"


class _Version(argparse.Action):
    """`--version`: graphport's version and torch's, read from the installed metadata
    without importing torch."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, help="print graphport's and torch's versions and exit", **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version
        import graphport
        try:
            torch_version = version("torch")
        except PackageNotFoundError:
            torch_version = "not installed"
        print(f"graphport {graphport.__version__} (torch {torch_version})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")
    parser = argparse.ArgumentParser(
        prog="graphport", parents=[common],
        description="Export PyTorch programs, look at them, run them, check them against eager and convert them.",
        epilog="exit codes: 0 ok, 1 check found problems, 2 bad command line, 3 graphport error, 4 internal error. "
               "GRAPHPORT_LOGS=+shapes,guards (docs/cli.md) shows what export does.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def entry_options(p, dynamic=True):
        p.add_argument("--args", metavar="MODULE:CALLABLE",
                       help="a function returning the example inputs (a tuple of args, or a dict of kwargs)")
        if dynamic:
            p.add_argument("--dynamic", action="append", default=[], metavar="NAME:DIM=[DIMNAME:]MIN..MAX",
                           help="make dimension DIM of argument NAME dynamic within MIN..MAX (either bound may be "
                                "left out); flags with the same DIMNAME share one dimension; repeatable")

    p = sub.add_parser("export", parents=[common], help="export a model and save it as a .gport file",
                       description="Export MODULE:CALLABLE (a model, or a factory returning a model or "
                                   "(model, args[, kwargs])), verify the program and save it.")
    p.add_argument("model", nargs="?", metavar="MODULE:CALLABLE", help="the model or its factory")
    entry_options(p)
    p.add_argument("--hf", metavar="MODEL_TYPE",
                   help="export a transformers model of this model_type (bert, gpt2, llama, vit, ...) built from "
                        "its config with random weights; dynamic batch and sequence (text) or batch (images) "
                        "unless --dynamic is given")
    p.add_argument("--config", metavar="config.json", help="with --hf: a config.json overriding the defaults")
    p.add_argument("--weights", metavar="DIR", help="with --hf: load weights from a local directory")
    p.add_argument("-o", "--output", required=True, metavar="model.gport", help="where to write the program")
    p.set_defaults(run="export_cmd", writes=["output"], reads=["config"], read_dirs=["weights"])

    p = sub.add_parser("inspect", parents=[common], help="describe a program: signature, shapes, ops, parameters",
                       description=f"Describe a program from a {PROGRAM_FILES} file or exported from "
                                   "MODULE:CALLABLE.")
    p.add_argument("target", metavar="model.gport|model.pt2|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("--graph", action="store_true", help="also print the program")
    p.set_defaults(run="inspect_cmd", programs=["target"])

    p = sub.add_parser("run", parents=[common], help="run a program on inputs from a safetensors file",
                       description="Run a program on inputs read from a safetensors file (one tensor per input, "
                                   "named as `graphport inspect` lists them) and write the outputs "
                                   "(output_0, output_1, ...) to a safetensors file.")
    p.add_argument("target", metavar="model.gport|model.pt2|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("--inputs", required=True, metavar="inputs.safetensors")
    p.add_argument("-o", "--output", required=True, metavar="outputs.safetensors")
    p.set_defaults(run="run_cmd", programs=["target"], reads=["inputs"], writes=["output"])

    p = sub.add_parser("check", parents=[common], help="check a program against eager across its shape ranges",
                       description="Export MODULE:CALLABLE (or load --program) and compare the program with the "
                                   "model in eager mode on inputs drawn inside its dynamic ranges, and confirm "
                                   "inputs outside them are refused. Exit code 1 when a problem is found. With "
                                   "--program, draws start from the example inputs saved in the program; --args "
                                   "is needed only for a program saved without them.")
    p.add_argument("model", metavar="MODULE:CALLABLE", help="the model or its factory (the eager reference)")
    entry_options(p)
    p.add_argument("--program", metavar="model.gport|model.pt2", help="check this saved program instead of exporting")
    p.add_argument("--samples", type=int, default=20, help="inputs drawn inside the ranges (default 20)")
    p.add_argument("--max-size", type=int, default=64,
                   help="largest size drawn for a dimension with a larger or no maximum (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run="check_cmd", reads=["program"])

    p = sub.add_parser("view", parents=[common], help="write the program as a self-contained HTML graph viewer",
                       description="Write one HTML file (no network access needed to view it) showing the "
                                   "program as a graph, grouped by module.")
    p.add_argument("target", metavar="model.gport|model.pt2|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("-o", "--output", required=True, metavar="graph.html")
    p.set_defaults(run="view_cmd", programs=["target"], writes=["output"])

    p = sub.add_parser("convert", parents=[common], help="convert a program to torch.export's .pt2 or to ONNX",
                       description="Convert a program to a torch.export program saved with torch.export.save "
                                   "(--to pt2), or to an ONNX model through torch.onnx (--to onnx; needs the "
                                   "onnx packages: pip install 'graphport[interop]'). Dynamic dimensions stay "
                                   "dynamic.")
    p.add_argument("target", metavar="model.gport|model.pt2|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("--to", required=True, choices=["pt2", "onnx"], help="the format to write")
    p.add_argument("-o", "--output", metavar="model.pt2|model.onnx",
                   help="where to write it (default: the input file's name with the new suffix)")
    p.set_defaults(run="convert_cmd", programs=["target"], writes=["output"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_paths(args)
        from . import commands   # torch loads here, once the command line is known to be right
        return getattr(commands, args.run)(args)
    except CommandLineError as e:
        return _report(args, e, EXIT_USAGE)
    except InternalError as e:
        return _report(args, e, EXIT_INTERNAL)
    except GraphportError as e:
        return _report(args, e, EXIT_REFUSED)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # `graphport inspect ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit
        return 0
    except Exception as e:   # noqa: BLE001 -- the user's code or a graphport bug; said once, plainly
        if args.traceback:
            traceback.print_exc()
        else:
            print(f"graphport: unexpected {type(e).__name__}: {e}\n"
                  "  (run again with --traceback to see where; if it is in graphport, please report it)",
                  file=sys.stderr)
        return EXIT_INTERNAL


def is_entry_point(target: str) -> bool:
    """`MODULE:CALLABLE` rather than a file (a file that exists wins, whatever its name)."""
    return ":" in target and not os.path.exists(target)


def check_paths(args) -> None:
    """Every file the command reads exists and every file it writes can be written, before
    any model is built or exported: a typo costs a second, not an export."""
    if args.command == "convert" and args.output is None:   # next to the input, with the new suffix
        if is_entry_point(args.target):
            raise CommandLineError("convert of MODULE:CALLABLE needs -o", fix=f"add -o model.{args.to}",
                                   find_location=False)
        args.output = os.path.splitext(args.target)[0] + "." + args.to
    for dest in getattr(args, "programs", []):
        target = getattr(args, dest)
        if not is_entry_point(target) and not os.path.isfile(target):
            raise CommandLineError(f"no such file: {target}",
                                   fix=f"give a {PROGRAM_FILES} file, or MODULE:CALLABLE naming a model",
                                   find_location=False)
    for dest in getattr(args, "reads", []):
        path = getattr(args, dest)
        if path is not None and not os.path.isfile(path):
            raise CommandLineError(f"no such file: {path} (--{dest})", fix=f"check the path given to --{dest}",
                                   find_location=False)
    for dest in getattr(args, "read_dirs", []):
        path = getattr(args, dest)
        if path is not None and not os.path.isdir(path):
            raise CommandLineError(f"no such directory: {path} (--{dest})",
                                   fix=f"check the path given to --{dest}", find_location=False)
    for dest in getattr(args, "writes", []):
        path = getattr(args, dest)
        if path is None:
            continue
        if os.path.isdir(path):
            raise CommandLineError(f"cannot write {path}: it is a directory", fix="name a file inside it with -o",
                                   find_location=False)
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise CommandLineError(f"cannot write {path}: the directory {folder} does not exist",
                                   fix=f"create it first (mkdir -p {folder}) or choose another -o path",
                                   find_location=False)
        if not os.access(folder, os.W_OK):
            raise CommandLineError(f"cannot write {path}: the directory {folder} is not writable",
                                   fix="choose another -o path", find_location=False)


def _report(args, error: GraphportError, code: int) -> int:
    if args.traceback:
        traceback.print_exc()
    else:
        from .messages import in_cli_terms
        print(f"graphport: error: {in_cli_terms(error, getattr(args, 'dynamic_flags', None))}", file=sys.stderr)
    return code

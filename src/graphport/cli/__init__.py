"""The `graphport` command line: export, inspect, run, check and view programs.

Exit codes (docs/cli.md):
  0  success
  1  `check` found a problem (a mismatch with eager, an input not refused)
  2  the command line is wrong (argparse usage, an entry point that does not import,
     a missing file, a malformed --dynamic)
  3  graphport refused the work with an error of its own (export failed, an input refused)
  4  an unexpected error: a bug in graphport or in the user's code outside capture
"""
from __future__ import annotations

import argparse
import sys
import traceback

from ..errors import CommandLineError, GraphportError, InternalError
from . import commands

EXIT_USAGE, EXIT_REFUSED, EXIT_INTERNAL = 2, 3, 4


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the Python traceback of an error")
    parser = argparse.ArgumentParser(
        prog="graphport", parents=[common],
        description="Export PyTorch programs, look at them, run them and check them against eager.",
        epilog="exit codes: 0 ok, 1 check found problems, 2 bad command line, 3 graphport error, 4 internal error")
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
    p.set_defaults(run=commands.export_cmd)

    p = sub.add_parser("inspect", parents=[common], help="describe a program: signature, shapes, ops, parameters",
                       description="Describe a program from a .gport file or exported from MODULE:CALLABLE.")
    p.add_argument("target", metavar="model.gport|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("--graph", action="store_true", help="also print the program")
    p.set_defaults(run=commands.inspect_cmd)

    p = sub.add_parser("run", parents=[common], help="run a program on inputs from a safetensors file",
                       description="Run a program on inputs read from a safetensors file (one tensor per input, "
                                   "named as `graphport inspect` lists them) and write the outputs "
                                   "(output_0, output_1, ...) to a safetensors file.")
    p.add_argument("target", metavar="model.gport|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("--inputs", required=True, metavar="inputs.safetensors")
    p.add_argument("-o", "--output", required=True, metavar="outputs.safetensors")
    p.set_defaults(run=commands.run_cmd)

    p = sub.add_parser("check", parents=[common], help="check a program against eager across its shape ranges",
                       description="Export MODULE:CALLABLE (or load --program) and compare the program with the "
                                   "model in eager mode on inputs drawn inside its dynamic ranges, and confirm "
                                   "inputs outside them are refused. Exit code 1 when a problem is found.")
    p.add_argument("model", metavar="MODULE:CALLABLE", help="the model or its factory (the eager reference)")
    entry_options(p)
    p.add_argument("--program", metavar="model.gport", help="check this saved program instead of exporting")
    p.add_argument("--samples", type=int, default=20, help="inputs drawn inside the ranges (default 20)")
    p.add_argument("--max-size", type=int, default=64,
                   help="largest size drawn for a dimension with a larger or no maximum (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=commands.check_cmd)

    p = sub.add_parser("view", parents=[common], help="write the program as a self-contained HTML graph viewer",
                       description="Write one HTML file (no network access needed to view it) showing the "
                                   "program as a graph, grouped by module.")
    p.add_argument("target", metavar="model.gport|MODULE:CALLABLE")
    entry_options(p)
    p.add_argument("-o", "--output", required=True, metavar="graph.html")
    p.set_defaults(run=commands.view_cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommandLineError as e:
        return _report(args, e, EXIT_USAGE)
    except InternalError as e:
        return _report(args, e, EXIT_INTERNAL)
    except GraphportError as e:
        return _report(args, e, EXIT_REFUSED)
    except KeyboardInterrupt:
        return 130
    except Exception as e:   # noqa: BLE001 -- the user's code or a graphport bug; said once, plainly
        if args.traceback:
            traceback.print_exc()
        else:
            print(f"graphport: unexpected {type(e).__name__}: {e}\n"
                  "  (run again with --traceback to see where; if it is in graphport, please report it)",
                  file=sys.stderr)
        return EXIT_INTERNAL


def _report(args, error: GraphportError, code: int) -> int:
    if args.traceback:
        traceback.print_exc()
    else:
        print(f"graphport: error: {error.msg}", file=sys.stderr)
    return code

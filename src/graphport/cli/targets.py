"""What the commands work on: a model from `MODULE:CALLABLE`, its example inputs, the
dynamic dims spelled on the command line, and a program from a `.gport` file or exported
on the spot (so inspect, view and check work before any artifact exists).
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import CommandLineError
from ..shapes.dims import Dim

_DYNAMIC = re.compile(r"^(?P<arg>[A-Za-z_]\w*):(?P<dim>\d+)=(?:(?P<name>[A-Za-z_]\w*):)?(?P<lo>\d*)\.\.(?P<hi>\d*)$")


@dataclass
class Entry:
    """A model and the inputs to export it with."""
    model: Any
    args: tuple
    kwargs: dict = field(default_factory=dict)
    dynamic_shapes: dict | None = None
    dynamic_flags: list[str] = field(default_factory=list)   # the --dynamic flags the shapes came from


def resolve(spec: str) -> Any:
    """The object `MODULE:ATTR` names (ATTR may be dotted), importing MODULE from the current
    directory too, as `python -m` would."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandLineError(f"{spec!r} is not of the form MODULE:CALLABLE",
                               fix="name a module and an attribute in it, e.g. mypkg.models:make_model",
                               find_location=False)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise CommandLineError(f"cannot import module {module_name!r} named in {spec!r}: {e}",
                               fix="run from the directory that holds it, or set PYTHONPATH",
                               find_location=False) from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CommandLineError(f"module {module_name!r} has no attribute {attr!r}",
                                   fix=f"check the name after ':' in {spec!r}", find_location=False)
        obj = getattr(obj, part)
    return obj


def load_entry(model_spec: str, args_spec: str | None, dynamic: list[str], inputs_required: bool = True) -> Entry:
    """The model from its factory (or instance), and example inputs from `--args` or from the
    factory itself when it returns `(model, args)` or `(model, args, kwargs)` (with
    `inputs_required=False`, possibly none: `args` is then None)."""
    made = _call_if_factory(resolve(model_spec))
    kwargs: dict = {}
    if isinstance(made, tuple) and len(made) in (2, 3) and callable(made[0]):
        model, args = made[0], made[1]
        kwargs = made[2] if len(made) == 3 else {}
    else:
        model, args = made, None
    if args_spec is not None:
        args = _call_if_factory(resolve(args_spec))
        if isinstance(args, dict):
            args, kwargs = (), args
    if args is None and inputs_required:
        raise CommandLineError(f"no example inputs for {model_spec}",
                               fix="pass --args MODULE:CALLABLE returning a tuple of inputs, or make the factory "
                                   "return (model, args)", find_location=False)
    if args is not None and not isinstance(args, tuple):
        args = (args,)
    if isinstance(model, torch.nn.Module):
        model.eval()
    return Entry(model, args, kwargs, parse_dynamic(dynamic, model) if dynamic else None, list(dynamic))


def _call_if_factory(obj: Any) -> Any:
    if isinstance(obj, torch.nn.Module) or not callable(obj):
        return obj
    return obj()


def parse_dynamic(specs: list[str], model: Any = None) -> dict:
    """`--dynamic NAME:DIM=[DIMNAME:]min..max` flags as a dynamic_shapes dict keyed by argument
    name. Flags with the same DIMNAME share one Dim (batch of ids and of mask)."""
    dims: dict[str, Dim] = {}
    out: dict[str, dict[int, Dim]] = {}
    for spec in specs:
        m = _DYNAMIC.match(spec)
        if m is None:
            raise CommandLineError(f"--dynamic {spec!r} is not of the form NAME:DIM=min..max",
                                   fix="e.g. --dynamic x:0=1..64 or --dynamic input_ids:1=seq:1..512 "
                                       "(either bound may be left out)", find_location=False)
        name = m["name"] or f"{m['arg']}_{m['dim']}"
        lo = int(m["lo"]) if m["lo"] else None
        hi = int(m["hi"]) if m["hi"] else None
        if name not in dims:
            kw = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            dims[name] = Dim(name, **kw)
        out.setdefault(m["arg"], {})[int(m["dim"])] = dims[name]
    return out


def load_program(target: str, args_spec: str | None = None, dynamic: list[str] | None = None):
    """The program in a `.gport` file or a torch.export `.pt2` file, or the one exporting
    `MODULE:CALLABLE` gives."""
    from . import is_entry_point
    if is_entry_point(target):
        from ..export import export
        entry = load_entry(target, args_spec, dynamic or [])
        return export(entry.model, entry.args, entry.kwargs, dynamic_shapes=entry.dynamic_shapes)
    if not os.path.exists(target):
        raise CommandLineError(f"no such file: {target}", fix="give a .gport or .pt2 file, or MODULE:CALLABLE",
                               find_location=False)
    if is_pt2(target):
        return load_pt2(target)
    return artifact_api("load")(target)


def is_pt2(path: str) -> bool:
    """A torch.export archive (torch.export.save), told from a .gport by its contents."""
    import zipfile
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return not any(name == "graphport.json" or name.endswith("/graphport.json") for name in z.namelist()) \
            and any(name.endswith(".data/version") or "/models/" in name for name in z.namelist())


def load_pt2(path: str):
    """A torch.export program, through torch.export.load and graphport's converter (which runs
    graphport's verifier on it)."""
    from ..errors import ArtifactError
    from ..interop import from_torch
    try:
        tep = torch.export.load(path)
    except Exception as e:   # noqa: BLE001 -- torch's reader fails in many ways on a damaged archive
        raise ArtifactError(f"torch.export.load cannot read {path}: {e}",
                            fix="give a file written by torch.export.save (or graphport convert --to pt2)",
                            find_location=False) from e
    return from_torch(tep)


def artifact_api(name: str):
    """graphport.save or graphport.load, or an error saying this installation lacks them."""
    import graphport
    fn = getattr(graphport, name, None)
    if fn is None:
        raise CommandLineError(f"this installation of graphport has no graphport.{name} (the .gport format)",
                               fix="pass MODULE:CALLABLE instead of a .gport file, or upgrade graphport",
                               find_location=False)
    return fn


def format_version(path: str) -> str:
    """The format version recorded in a `.gport` archive's graphport.json."""
    import zipfile
    with zipfile.ZipFile(path) as z:
        data = json.loads(z.read("graphport.json"))
    return str(data.get("format_version", data.get("version", "unknown")))


# -- transformers models from a config ----------------------------------------------------------

def load_hf(model_type: str, config_path: str | None, weights: str | None, dynamic: list[str]) -> Entry:
    """A transformers model built from its config with random weights (or local weights), with
    example inputs and the usual dynamic dims: batch and sequence for text, batch for images."""
    try:
        import transformers
    except ImportError as e:
        raise CommandLineError("--hf needs the transformers package", fix="pip install 'graphport[zoo]'",
                               find_location=False) from e
    if weights is not None:
        model = transformers.AutoModel.from_pretrained(weights, local_files_only=True)
    else:
        overrides = {}
        if config_path is not None:
            with open(config_path) as f:
                overrides = json.load(f)
            overrides.pop("model_type", None)
        try:
            config = transformers.AutoConfig.for_model(model_type, **overrides)
        except ValueError as e:
            raise CommandLineError(f"transformers knows no model type {model_type!r}",
                                   fix="use a model_type from a config.json, e.g. bert, gpt2, llama, vit",
                                   find_location=False) from e
        model = transformers.AutoModel.from_config(config)
    model.eval()
    config = model.config
    if getattr(config, "vocab_size", None) and not hasattr(config, "image_size"):
        ids = torch.randint(0, config.vocab_size, (2, 16))
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        default = ["input_ids:0=batch:1..64", "input_ids:1=seq:2..", "attention_mask:0=batch:1..64",
                   "attention_mask:1=seq:2.."]
        max_len = getattr(config, "max_position_embeddings", None)
        if max_len:
            default = [d.replace("seq:2..", f"seq:2..{max_len}") for d in default]
    else:
        size = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
        kwargs = {"pixel_values": torch.randn(2, getattr(config, "num_channels", 3), size, size)}
        default = ["pixel_values:0=batch:1..64"]
    flags = list(dynamic or default)
    return Entry(model, (), kwargs, parse_dynamic(flags), flags)

"""Shared checks for the symbolic-shapes corpus.

Every test here has two sides: graphport's export and `torch.export`'s (tests only), run
on the same program, example inputs and `dynamic_shapes` spec (built twice, once from
`graphport`'s `Dim` and once from `torch.export`'s, by `spec_for`).

Range constraints are compared modulo a renaming of symbols: graphport names symbols
s0, s1, ..., torch.export uses hashed names (s77). Each symbol is renamed after the first
user-input dimension (flattened input index, dim index) whose size it stands for, so
both programs' constraints become `{in0_d0: (3, 6), in0_d0 + 1: (4, 7)}`.
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import sympy
import torch
import torch.utils._pytree as pytree

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ (for capture.helpers)

from capture.helpers import (  # noqa: E402
    _as_torch_export_module,
    assert_same_values,
    clone_inputs,
)

ATOL = 1e-5


# ---------------------------------------------------------------------------- specs

class _Api:
    """The two worlds' `Dim` machinery, so one spec builder serves both exporters."""

    def __init__(self, mod):
        self.Dim = mod.Dim
        self.dims = mod.dims
        self.ShapesCollection = mod.ShapesCollection
        self.name = mod.__name__


def gp_api():
    return _Api(gp)


def torch_api():
    return _Api(torch.export)


def spec_for(build):
    """build(api) -> dynamic_shapes; returns (graphport spec, torch.export spec)."""
    return build(gp_api()), build(torch_api())


# ---------------------------------------------------------------------------- exporting

def torch_export(fn, args, kwargs=None, dynamic_shapes=None):
    """torch.export of a module, bound method or plain function, at graphport's default level."""
    import copy
    module = _as_torch_export_module(copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn)
    ep = torch.export.export(module, tuple(args), dict(kwargs or {}), dynamic_shapes=dynamic_shapes)
    return ep


def run_eager(fn, args, kwargs=None):
    with torch.no_grad():
        return fn(*clone_inputs(tuple(args)), **clone_inputs(dict(kwargs or {})))


def run_exported(ep, args, kwargs=None, module=None):
    module = module if module is not None else ep.module()
    with torch.no_grad():
        return module(*clone_inputs(tuple(args)), **clone_inputs(dict(kwargs or {})))


def assert_matches_eager(ep, fn, args, kwargs=None, what="", atol=ATOL, module=None):
    """ep.module() (or `module`, made from it once) answers like eager on these inputs."""
    expected = run_eager(fn, args, kwargs)
    actual = run_exported(ep, args, kwargs, module)
    shapes = [tuple(t.shape) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    assert_same_values(expected, actual, f"outputs {what} (input shapes {shapes})", atol)


# ---------------------------------------------------------------------------- range constraints

def _is_inf(v) -> bool:
    if str(v) in ("oo", "int_oo", "inf"):
        return True
    try:
        return bool(getattr(v, "is_infinite", False)) or math.isinf(float(v))
    except (TypeError, ValueError):
        return False


def _bound(v, sign: int):
    return sign * math.inf if _is_inf(v) else int(v)


def _user_input_placeholders(ep):
    """Placeholder nodes of the user inputs, in flattened input order."""
    user = [s.arg.name for s in ep.graph_signature.input_specs if getattr(s.kind, "name", str(s.kind)) == "USER_INPUT"]
    by_name = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [by_name[name] for name in user]


def symbol_sources(ep) -> dict[str, str]:
    """Symbol name -> canonical name 'in{k}_d{d}' of the first user-input dim it sizes."""
    out: dict[str, str] = {}
    sizes = []
    for k, node in enumerate(_user_input_placeholders(ep)):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            sizes += [(k, d, str(size).strip()) for d, size in enumerate(val.shape)]
    for k, d, text in sizes:
        if re.fullmatch(r"[A-Za-z_]\w*", text) and text not in out:
            out[text] = f"in{k}_d{d}"
    # a derived dim whose root sizes no input (2*_s): the root is named after the dim it derives
    for k, d, text in sizes:
        unknown = {str(s) for s in sympy.sympify(text).free_symbols} - set(out)
        if len(unknown) == 1:
            out[unknown.pop()] = f"root_in{k}_d{d}"
    return out


def input_dim_exprs(ep) -> list[list[str]]:
    """Per user input, per dim: the size as a canonical expression string ('in0_d0 + 1', '64')."""
    names = symbol_sources(ep)
    table = []
    for node in _user_input_placeholders(ep):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            table.append(None)
            continue
        table.append([str(_canon(str(s), names)) for s in val.shape])
    return table


def _canon(text: str, names: dict[str, str]):
    local = {sym: sympy.Symbol(canon) for sym, canon in names.items()}
    expr = sympy.sympify(text, locals=local)
    free = {str(s) for s in expr.free_symbols} - set(names.values())
    assert not free, f"symbols {sorted(free)} in {text!r} stand for no user-input dimension"
    return expr


def canonical_range_constraints(ep) -> dict:
    """{canonical sympy expr: (lower, upper)}, upper = math.inf when unbounded."""
    names = symbol_sources(ep)
    out = {}
    for key, vr in ep.range_constraints.items():
        out[_canon(str(key), names)] = (_bound(vr.lower, -1), _bound(vr.upper, 1))
    return out


def fmt_constraints(c: dict) -> str:
    return "{" + ", ".join(f"{k}: [{lo}, {hi}]" for k, (lo, hi) in sorted(c.items(), key=lambda kv: str(kv[0]))) + "}"


def assert_same_range_constraints(ep, ref, small_sizes_proven: bool = False, hint_dims: bool = False):
    """Equal modulo symbol names. With `small_sizes_proven`, graphport's lower bounds may sit
    above torch.export's below 2: graphport traced the program at those sizes and found it
    computing something else there, where torch.export assumes sizes of at least 2 and
    reports the wider range. With `hint_dims` (a spec of Dim.AUTO / Dim.DYNAMIC), torch.export
    reports 2 as the lower bound whatever the program does at 0 and 1; graphport reports the
    smallest size it proved the program valid from (0, 1 or 2), which the callers' sweeps
    then check against eager."""
    mine, theirs = canonical_range_constraints(ep), canonical_range_constraints(ref)
    if small_sizes_proven and mine.keys() == theirs.keys():
        theirs = {k: (max(lo, mine[k][0]) if mine[k][0] <= 2 else lo, hi) for k, (lo, hi) in theirs.items()}
    if hint_dims and mine.keys() == theirs.keys():
        theirs = {k: (mine[k][0] if lo == 2 and mine[k][0] <= 2 else lo, hi) for k, (lo, hi) in theirs.items()}
    assert mine == theirs, (
        "range constraints differ (symbols renamed after the input dim they size):\n"
        f"  graphport:    {fmt_constraints(mine)}   raw {ep.range_constraints}\n"
        f"  torch.export: {fmt_constraints(theirs)}   raw {ref.range_constraints}")


def assert_same_input_shapes(ep, ref):
    mine, theirs = input_dim_exprs(ep), input_dim_exprs(ref)
    assert mine == theirs, f"placeholder shapes differ:\n  graphport:    {mine}\n  torch.export: {theirs}"


# ---------------------------------------------------------------------------- errors

def this_line(marker: str, path: str) -> int:
    """Line number of the first line of `path` containing `marker`."""
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(f"{marker!r} not found in {path}")


def assert_names_location(msg: str, path: str, marker: str):
    line = this_line(marker, path)
    name = Path(path).name
    assert re.search(rf"{re.escape(name)}\"?(:|, line )\s*{line}\b", msg), (
        f"the message should point at {name}:{line} ({marker.strip()!r}):\n{msg}")


def suggested_fixes(msg: str) -> list[str]:
    """The lines of the 'Suggested fixes:' section, stripped."""
    assert "Suggested fixes:" in msg, f"no 'Suggested fixes:' section in:\n{msg}"
    tail = msg.split("Suggested fixes:", 1)[1].splitlines()[1:]
    fixes = []
    for line in tail:
        if not line.startswith("  ") or not line.strip():
            break
        fixes.append(line.strip())
    assert fixes, f"empty 'Suggested fixes:' section in:\n{msg}"
    return fixes


def torch_fix_message(exc: Exception) -> str:
    """torch.export's constraint message without the trailer it appends (which its own
    refine_dynamic_shapes_from_suggested_fixes cannot parse)."""
    return str(exc).split("The error above occurred")[0].rstrip() + "\n"

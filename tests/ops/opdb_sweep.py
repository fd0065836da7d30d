"""Operator sweep over torch's OpInfo database (`op_db`): export each op with graphport,
static and dynamic, and compare `ep.module()` with eager.

For every OpInfo, the first samples of `op.sample_inputs("cpu", float32)` are turned into a
function of the sample's tensors (tensors in `input`, `args` and `kwargs`, also inside
lists and dicts, become inputs; everything else is closed over). Each (op, mode) gets one
outcome:

    ok           exported and matched eager (values; shapes/dtypes only for random ops)
    refused      a clean `gp.GraphportError` at export (not `InternalError`), or, for the
                 dynamic mode, at the call with new sizes
    wrong        exported and ran, but the values (or shapes/dtypes) differ from eager
    crash        any other exception at export or call, an `InternalError`, a refusal of the
                 very inputs the program was captured with, or a hang (time limit)
    eager-fails  eager itself rejects every sample (or the op has no samples): skipped

Modes: "static" (no dynamic_shapes) and "dynamic" (`Dim.AUTO` on every dim >= 2 of every
tensor input). The dynamic program is also run on a second input set where every dim still
symbolic in the program changes (each symbol + 1), when eager accepts that input.

Ops without float32 support are run with the first dtype they support among
int64, complex64, bool, uint8, float64. Ops that op_db lists as having nondeterministic
output (empty_like, ...) and ops whose output is random (their eager output changes with
the RNG seed, or op_db wraps them in `wrapper_set_seed`) are compared by shapes and dtypes
only.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import signal
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

import graphport as gp

OUTCOMES = ("ok", "refused", "wrong", "crash", "eager-fails")
MODES = ("static", "dynamic")
SEVERITY = {"ok": 0, "refused": 1, "wrong": 2, "crash": 3}
TIME_LIMIT = 20          # seconds, per export and per call
MAX_SAMPLES = 2
FALLBACK_DTYPES = (torch.int64, torch.complex64, torch.bool, torch.uint8, torch.float64)

# A representative subset run by default in CI; the rest of op_db is marked slow.
COMMON_OPS = (
    "add", "mul", "sub", "div.no_rounding_mode", "matmul", "mm", "bmm", "addmm", "view", "reshape",
    "permute", "transpose", "expand", "squeeze", "unsqueeze", "flatten", "index_select", "gather",
    "scatter", "scatter_add", "index_put", "cat", "stack", "split", "chunk", "narrow",
    "softmax", "log_softmax", "native_layer_norm", "nn.functional.layer_norm",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.linear", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.embedding", "nn.functional.batch_norm",
    "nn.functional.scaled_dot_product_attention", "nn.functional.pad.constant",
    "nn.functional.interpolate.nearest", "sum", "mean", "amax", "argmax", "where", "cumsum", "topk",
    "sort", "masked_fill", "clamp", "pow", "exp", "tanh", "sigmoid", "repeat", "roll", "flip",
)
SUBSET_STRIDE = 4


# ---------------------------------------------------------------------------- op_db

_OPS: dict[str, Any] | None = None


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def all_ops() -> dict[str, Any]:
    """op key (name[.variant]) -> OpInfo, in op_db order."""
    global _OPS
    if _OPS is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
        _OPS = {op_key(op): op for op in op_db}
    return _OPS


def default_subset(keys: list[str]) -> set[str]:
    """Deterministic CI subset: every SUBSET_STRIDE-th op of op_db plus the common ops."""
    return set(keys[::SUBSET_STRIDE]) | (set(COMMON_OPS) & set(keys))


# ---------------------------------------------------------------------------- time limit

class Timeout(BaseException):
    """A BaseException, so that no `except Exception` in graphport or torch swallows it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    if seconds is None or seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise Timeout(f"time limit of {seconds}s exceeded")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------- samples as functions

@dataclass
class Case:
    """One sample turned into `fn(*tensors)`."""
    fn: Callable
    tensors: list[torch.Tensor]
    description: str


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


def make_case(op, sample) -> Case:
    tree = (sample.input, tuple(sample.args), dict(sample.kwargs))
    leaves, spec = pytree.tree_flatten(tree)
    tensors: list[torch.Tensor] = []
    slots: list[int | None] = []      # per leaf: index into tensors, or None (closed over)
    seen: dict[int, int] = {}
    for leaf in leaves:
        if _is_tensor(leaf):
            if id(leaf) not in seen:          # one tensor passed twice is one input
                seen[id(leaf)] = len(tensors)
                tensors.append(leaf)
            slots.append(seen[id(leaf)])
        else:
            slots.append(None)

    def call(*ts):
        rebuilt = [ts[s] if s is not None else leaf for s, leaf in zip(slots, leaves)]
        inp, args, kwargs = pytree.tree_unflatten(rebuilt, spec)
        return op(inp, *args, **kwargs)

    # An explicit signature (a0, a1, ...) so dynamic_shapes can be a tuple in argument order.
    names = [f"a{i}" for i in range(len(tensors))]
    src = f"def fn({', '.join(names)}):\n    return call({', '.join(names)})\n"
    scope = {"call": call}
    exec(src, scope)
    fn = scope["fn"]
    fn.__name__ = f"opdb_{op.name.replace('.', '_')}"
    desc = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors)
    return Case(fn, tensors, desc)


def clone_all(tensors):
    return [t.clone() for t in tensors]


# ---------------------------------------------------------------------------- comparison

def _leaves(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [leaf for v in out for leaf in _leaves(v)]
    if isinstance(out, dict):
        return [leaf for k in sorted(out, key=repr) for leaf in _leaves(out[k])]
    return [out]


class Mismatch(AssertionError):
    pass


def compare(expected, actual, *, values: bool) -> None:
    """Raise Mismatch if `actual` (graphport) differs from `expected` (eager)."""
    exp, act = _leaves(expected), _leaves(actual)
    if len(exp) != len(act):
        raise Mismatch(f"{len(act)} outputs, eager has {len(exp)}")
    for i, (e, a) in enumerate(zip(exp, act)):
        if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
            raise Mismatch(f"output {i}: {type(a).__name__}, eager gives {type(e).__name__}")
        if isinstance(e, torch.Tensor):
            if e.shape != a.shape or e.dtype != a.dtype:
                raise Mismatch(f"output {i}: {a.dtype}{list(a.shape)}, eager gives {e.dtype}{list(e.shape)}")
            if values:
                try:
                    torch.testing.assert_close(a, e, equal_nan=True, check_device=False)
                except AssertionError as err:
                    raise Mismatch(f"output {i}: " + " ".join(str(err).split())[:300]) from None
        elif values:
            if isinstance(e, float) and isinstance(a, (int, float)) and math.isnan(e) and math.isnan(a):
                continue
            if e != a:
                raise Mismatch(f"output {i}: {a!r}, eager gives {e!r}")


def run_eager(fn, tensors, seed: int = 0):
    torch.manual_seed(seed)
    inputs = clone_all(tensors)
    with time_limit(TIME_LIMIT), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(*inputs)
    return out, inputs


def is_random(op, case: Case) -> bool:
    """Random output: op_db wraps it in wrapper_set_seed, lists it as nondeterministic, or
    its eager output changes with the seed."""
    if op.has_nondeterministic_output:
        return True
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return True
    try:
        a, _ = run_eager(case.fn, case.tensors, seed=0)
        b, _ = run_eager(case.fn, case.tensors, seed=1)
        compare(a, b, values=True)
    except Mismatch:
        return True
    return False


# ---------------------------------------------------------------------------- dynamic shapes

def auto_spec(tensors):
    return tuple({d: gp.Dim.AUTO for d, n in enumerate(t.shape) if n >= 2} or None for t in tensors)


def _placeholder_shapes(ep, n: int) -> list | None:
    """The symbolic shape of each user input placeholder (in argument order)."""
    from graphport.signature import InputKind
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT]
    vals = {node.name: node.meta.get("val") for node in ep.graph.nodes if node.op == "placeholder"}
    if len(user) != n:
        return None
    return [None if vals.get(name) is None else tuple(vals[name].shape) for name in user]


def second_inputs(ep, tensors) -> list[torch.Tensor] | None:
    """Inputs where every symbol of the program is one larger; None if no dim is dynamic.
    New rows repeat the last one (so index tensors stay in range, offsets sorted)."""
    import sympy
    shapes = _placeholder_shapes(ep, len(tensors))
    if shapes is None:
        return None
    values: dict = {}
    for t, shape in zip(tensors, shapes):
        if shape is None:
            continue
        for size, real in zip(shape, t.shape):
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if isinstance(expr, sympy.Symbol):
                    values[expr] = int(real)
    for sym in list(values):          # a symbol pinned to one value is static in effect
        rng = ep.range_constraints.get(sym)
        if rng is not None and rng.lower == rng.upper:
            del values[sym]
    if not values:
        return None
    new_values = {s: v + 1 for s, v in values.items()}
    out = []
    for t, shape in zip(tensors, shapes):
        new = t
        if shape is not None:
            for d, size in enumerate(shape):
                if not isinstance(size, torch.SymInt):
                    continue
                expr = size.node.expr
                if not expr.free_symbols <= set(new_values):
                    continue
                n = int(expr.subs(new_values))
                if n != new.shape[d] and new.shape[d] > 0:
                    # repeat the last row: keeps sorted offsets sorted, indices in range
                    idx = torch.arange(n).clamp(max=new.shape[d] - 1)
                    new = new.index_select(d, idx)
        out.append(new.clone() if new is t else new)
    return out


# ---------------------------------------------------------------------------- one (op, mode)

@dataclass
class Result:
    outcome: str
    detail: str = ""
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def _describe(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:240]}"


def _call(ep_module, tensors):
    inputs = clone_all(tensors)
    with time_limit(TIME_LIMIT), torch.no_grad():
        out = ep_module(*inputs)
    return out, inputs


def check_case(op, case: Case, mode: str, random: bool) -> Result:
    dynamic = auto_spec(case.tensors) if mode == "dynamic" else None
    try:
        with warnings.catch_warnings(), time_limit(TIME_LIMIT):
            warnings.simplefilter("ignore")
            ep = gp.export(case.fn, tuple(case.tensors), dynamic_shapes=dynamic)
    except gp.InternalError as err:
        return Result("crash", "export: " + _describe(err))
    except gp.GraphportError as err:
        return Result("refused", "export: " + _describe(err))
    except Timeout as err:
        return Result("crash", "export: hang: " + str(err))
    except Exception as err:  # noqa: BLE001 - every other exception is what we are looking for
        return Result("crash", "export: " + _describe(err))

    try:
        module = ep.module()
    except Exception as err:  # noqa: BLE001
        return Result("crash", "module(): " + _describe(err))

    input_sets = [("example inputs", case.tensors)]
    if mode == "dynamic":
        try:
            second = second_inputs(ep, case.tensors)
        except Exception as err:  # noqa: BLE001 - the sweep's own limit, not graphport's
            second = None
        if second is not None:
            try:
                # eager must accept the new sizes and agree with itself on them (repeated
                # rows can make index/offset tensors invalid, where eager reads garbage)
                first, _ = run_eager(case.fn, second)
                if not random:
                    compare(first, run_eager(case.fn, second)[0], values=True)
                input_sets.append(("new sizes " + ", ".join(str(list(t.shape)) for t in second), second))
            except (Exception, Timeout):   # eager rejects the new sizes: skip them
                pass

    for label, tensors in input_sets:
        try:
            expected, expected_inputs = run_eager(case.fn, tensors, seed=0)
        except (Exception, Timeout) as err:
            return Result("eager-fails", f"{label}: " + _describe(err))
        try:
            torch.manual_seed(0)
            actual, actual_inputs = _call(module, tensors)
        except gp.InternalError as err:
            return Result("crash", f"call ({label}): " + _describe(err))
        except gp.GraphportError as err:
            if label == "example inputs":
                return Result("crash", "call refused its own example inputs: " + _describe(err))
            return Result("refused", f"call ({label}): " + _describe(err))
        except Timeout as err:
            return Result("crash", f"call ({label}): hang: {err}")
        except Exception as err:  # noqa: BLE001
            return Result("crash", f"call ({label}): " + _describe(err))
        try:
            compare(expected, actual, values=not random)
            compare(expected_inputs, actual_inputs, values=not random)
        except Mismatch as err:
            return Result("wrong", f"{label}: {err}")
    return Result("ok", f"{len(input_sets)} input set(s)")


def samples(op, n: int = MAX_SAMPLES):
    """(dtype, first n samples) for the op; float32 where supported."""
    supported = op.supported_dtypes("cpu")
    dtype = torch.float32 if torch.float32 in supported else next(
        (d for d in FALLBACK_DTYPES if d in supported), None)
    if dtype is None:
        return None, []
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = op.sample_inputs("cpu", dtype, requires_grad=False)
        return dtype, list(itertools.islice(gen, n))


def run_op(key: str, modes=MODES) -> dict[str, Result]:
    """Outcome per mode for one op: the worst over its first samples that eager accepts."""
    import time
    op = all_ops()[key]
    results: dict[str, Result] = {}
    try:
        with time_limit(TIME_LIMIT):
            dtype, sample_list = samples(op)
    except (Exception, Timeout) as err:
        return {m: Result("eager-fails", "sample_inputs: " + _describe(err)) for m in modes}
    cases = []
    last_eager_error = "no samples"
    for sample in sample_list:
        try:
            case = make_case(op, sample)
            run_eager(case.fn, case.tensors)
            random = is_random(op, case)
        except (Exception, Timeout) as err:
            last_eager_error = _describe(err)
            continue
        cases.append((case, random))
    if not cases:
        return {m: Result("eager-fails", last_eager_error) for m in modes}
    for mode in modes:
        start = time.perf_counter()
        worst: Result | None = None
        for i, (case, random) in enumerate(cases):
            res = check_case(op, case, mode, random)
            if res.outcome == "eager-fails":
                continue
            res.detail = f"sample {i} ({case.description}): {res.detail}"
            if worst is None or SEVERITY[res.outcome] > SEVERITY[worst.outcome]:
                worst = res
        if worst is None:
            worst = Result("eager-fails", "eager rejected the inputs")
        worst.seconds = time.perf_counter() - start
        worst.extra = {"dtype": str(dtype).replace("torch.", ""), "random": any(r for _, r in cases)}
        results[mode] = worst
    return results

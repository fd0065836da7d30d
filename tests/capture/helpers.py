"""Differential checking of graphport captures against eager PyTorch and torch.export.

`check_against_eager_and_torch_export` is the workhorse of the capture corpus:

  (a) export with graphport and run our own IR verifier;
  (b) run `ep.module()` and an eager copy of the program side by side on the example
      inputs and on fresh random inputs of the same shapes, comparing outputs, buffers
      after each call, and user inputs the program mutates;
  (c) export with `torch.export` (tests only) and compare the graph signatures and the
      operator multisets of the two graphs.

Everything is done on deep copies, so the caller's model and inputs are left as they were
(and the helper checks that graphport's export itself did not touch them).
"""
from __future__ import annotations

import copy
import inspect
import types
from collections import Counter

import torch
import torch.utils._pytree as pytree

import graphport as gp

ATOL = 1e-5
RTOL = 1e-5


# ---------------------------------------------------------------------------- inputs

def _memo_map(fn, tree):
    """tree_map that maps one tensor passed twice to one result, keeping the aliasing
    the program may depend on (mha(x, x, x) takes a path of its own when q is k)."""
    memo = {}

    def once(v):
        if not isinstance(v, torch.Tensor):
            return v
        if id(v) not in memo:
            memo[id(v)] = fn(v)
        return memo[id(v)]
    return pytree.tree_map(once, tree)


def clone_inputs(tree):
    """Deep copy of an input tree with every tensor cloned (mutations stay separate)."""
    return _memo_map(torch.Tensor.clone, tree)


def random_like_inputs(args, kwargs, seed: int = 1234):
    """Fresh inputs of the same shapes: floating tensors redrawn, others (indices, masks,
    python scalars) kept, since their values usually have to stay in range."""
    gen = torch.Generator().manual_seed(seed)

    def fresh(v):
        if v.is_floating_point():
            return torch.randn(v.shape, generator=gen, dtype=v.dtype)
        return v.clone()
    return _memo_map(fresh, (args, kwargs))


# ---------------------------------------------------------------------------- comparison

def _leaves(tree):
    leaves, spec = pytree.tree_flatten(tree)
    return leaves, spec


def assert_same_values(expected, actual, what: str, atol: float = ATOL):
    """Compare two pytrees: same structure, same dtypes/shapes, values within atol."""
    e_leaves, e_spec = _leaves(expected)
    a_leaves, a_spec = _leaves(actual)
    assert e_spec == a_spec, f"{what}: output structure differs\n  eager:    {e_spec}\n  exported: {a_spec}"
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        where = f"{what}[leaf {i}]"
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{where}: eager gave a tensor, exported gave {type(a)}"
            assert e.dtype == a.dtype, f"{where}: dtype {a.dtype}, eager {e.dtype}"
            assert e.shape == a.shape, f"{where}: shape {tuple(a.shape)}, eager {tuple(e.shape)}"
            if e.is_floating_point() or e.is_complex():
                diff = (e.detach() - a.detach()).abs()
                ok = torch.allclose(e.detach(), a.detach(), atol=atol, rtol=RTOL, equal_nan=True)
                assert ok, f"{where}: max abs difference {diff.max().item():.3g} > {atol}"
            else:
                assert torch.equal(e, a), f"{where}: values differ\n  eager:    {e}\n  exported: {a}"
        else:
            assert e == a, f"{where}: eager {e!r}, exported {a!r}"


def _state(module):
    """Name -> tensor for buffers (and parameters), or {} for plain functions."""
    if not isinstance(module, torch.nn.Module):
        return {}
    return {**dict(module.named_parameters(remove_duplicate=False)),
            **dict(module.named_buffers(remove_duplicate=False))}


def _snapshot(tree):
    return pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v, tree)


def _owner(model):
    """The nn.Module whose state a target uses: the module, a bound method's self, or None."""
    if isinstance(model, torch.nn.Module):
        return model
    if isinstance(model, types.MethodType) and isinstance(model.__self__, torch.nn.Module):
        return model.__self__
    return None


def _run(fn, args, kwargs, seed=0):
    torch.manual_seed(seed)  # same random stream for dropout & co. in both worlds
    with torch.no_grad():
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------- torch.export side

class _FunctionModule(torch.nn.Module):
    """Lets torch.export (which only takes modules) capture a plain function."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def _as_torch_export_module(model):
    """torch.export needs an nn.Module; keep the function's signature (placeholder names)
    and, for a bound method, the owner's state names."""
    if isinstance(model, torch.nn.Module):
        return model
    owner = _owner(model)
    if owner is not None:                      # bound method: call it as the owner's forward
        owner.forward = types.MethodType(model.__func__, owner)
        return owner
    wrapper = _FunctionModule(model)
    sig = inspect.signature(model)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)
    forward.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()])
    wrapper.forward = types.MethodType(forward, wrapper)
    return wrapper


def torch_export(model, args, kwargs=None):
    """torch.export's functional graph (the level graphport's default export matches)."""
    model = _as_torch_export_module(_copy_target(model))
    return torch.export.export(model, clone_inputs(args), clone_inputs(kwargs or {})).run_decompositions({})


def _copy_target(model):
    return copy.deepcopy(model)


# ---------------------------------------------------------------------------- signature digests

def _kind_name(kind) -> str:
    return getattr(kind, "name", str(kind))


def signature_digest(ep):
    """Per-kind ordered target lists, kinds multiset, outputs, and op multiset of a program
    (works for both graphport's and torch.export's ExportedProgram)."""
    sig = ep.graph_signature
    inputs: dict[str, list] = {}
    for spec in sig.input_specs:
        kind = _kind_name(spec.kind)
        entry = spec.target
        if kind == "BUFFER":
            entry = (spec.target, bool(spec.persistent))
        inputs.setdefault(kind, []).append(entry)
    outputs = [(_kind_name(s.kind), s.target) for s in sig.output_specs]
    ops = Counter(str(n.target) for n in ep.graph.nodes
                  if n.op == "call_function" and str(n.target) not in ORACLE_ONLY_OPS)
    return inputs, outputs, ops


# torch.export adds these dtype/device assertions after `.to()`; graphport checks input
# metadata when the program is called instead, so they are not part of the comparison.
ORACLE_ONLY_OPS = {"aten._assert_tensor_metadata.default"}


def _fmt_counter(c: Counter) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(c.items())) or "(nothing)"


def compare_with_torch_export(ep, ref) -> list[str]:
    """Readable differences between graphport's `ep` and torch.export's `ref` (empty if none)."""
    problems = []
    g_in, g_out, g_ops = signature_digest(ep)
    t_in, t_out, t_ops = signature_digest(ref)
    g_kinds = Counter({k: len(v) for k, v in g_in.items()})
    t_kinds = Counter({k: len(v) for k, v in t_in.items()})
    if g_kinds != t_kinds:
        problems.append(f"input kinds: graphport {dict(g_kinds)}, torch.export {dict(t_kinds)}")
    for kind in sorted(set(g_in) | set(t_in)):
        if kind != "USER_INPUT" and g_in.get(kind, []) != t_in.get(kind, []):
            problems.append(f"{kind} inputs (in order):\n    graphport:    {g_in.get(kind, [])}"
                            f"\n    torch.export: {t_in.get(kind, [])}")
    if g_out != t_out:
        problems.append(f"output specs (kind, target):\n    graphport:    {g_out}\n    torch.export: {t_out}")
    if g_ops != t_ops:
        problems.append("call_function multiset differs:"
                        f"\n    only/more in graphport:    {_fmt_counter(g_ops - t_ops)}"
                        f"\n    only/more in torch.export: {_fmt_counter(t_ops - g_ops)}")
    return problems


# ---------------------------------------------------------------------------- the check

def check_against_eager_and_torch_export(model, args, kwargs=None, fresh_inputs=None, *,
                                         torch_export_check: bool = True, atol: float = ATOL):
    """Export `model` (module, function or bound method) with graphport and check it.

    fresh_inputs: list of (args, kwargs) pairs to run besides the example inputs; by
    default one set with every floating tensor redrawn at the same shape.
    torch_export_check: False where torch.export itself cannot serve as the oracle, "ops"
    to compare only the operator multiset (the caller says why); the eager comparison
    always runs.
    Returns graphport's ExportedProgram.
    """
    args = tuple(args)
    kwargs = dict(kwargs or {})
    if fresh_inputs is None:
        fresh_inputs = [random_like_inputs(args, kwargs)]

    # (a) export on a copy; export must not touch the program's state or the inputs.
    target = _copy_target(model)
    state_before = _snapshot(_state(_owner(target)))
    inputs_before = _snapshot((args, kwargs))
    ep = gp.export(target, args, kwargs)
    assert_same_values(state_before, _snapshot(_state(_owner(target))), "model state after export")
    assert_same_values(inputs_before, _snapshot((args, kwargs)), "inputs after export")
    gp.verify(ep)

    # (b) eager vs ep.module(), call after call, so state carried between calls is compared.
    eager = _copy_target(model)
    exported = ep.module()
    for i, (a, k) in enumerate([(args, kwargs), *fresh_inputs]):
        e_in, x_in = clone_inputs((tuple(a), dict(k or {}))), clone_inputs((tuple(a), dict(k or {})))
        expected = _run(eager, *e_in)
        actual = _run(exported, *x_in)
        label = "example inputs" if i == 0 else f"fresh inputs #{i}"
        assert_same_values(expected, actual, f"outputs on {label}", atol)
        assert_same_values(e_in, x_in, f"user inputs after the call on {label} (mutations)", atol)
        e_bufs = dict(_owner(eager).named_buffers()) if _owner(eager) is not None else {}
        x_bufs = dict(exported.named_buffers())
        missing = set(e_bufs) - set(x_bufs)
        assert not missing, f"ep.module() lacks buffers {sorted(missing)}"
        assert_same_values({n: e_bufs[n] for n in sorted(e_bufs)}, {n: x_bufs[n] for n in sorted(e_bufs)},
                           f"buffers after the call on {label}", atol)

    # (c) torch.export as the structural oracle.
    if torch_export_check:
        problems = compare_with_torch_export(ep, torch_export(model, args, kwargs))
        if torch_export_check == "ops":
            problems = [p for p in problems if p.startswith("call_function")]
        assert not problems, "graphport differs from torch.export:\n  " + "\n  ".join(problems)
    return ep

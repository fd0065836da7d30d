"""The soundness checker: graphport's promise, tested on the user's own model.

A program is sound when, for every input its shape contract accepts, `ep.module()` computes
what eager computes, and every input the contract does not accept is refused with a
graphport error. `check` samples both sides of that line: sizes inside the declared ranges
and relations (boundaries, 0 and 1 where allowed, random interior points) compared with
eager, and sizes just outside them, which must be refused. A failure is shrunk to the
smallest sizes that still fail, because a 1x1 counterexample is what a user can debug.
"""
from __future__ import annotations

import copy
import logging
import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy
import torch

from . import _torch
from .errors import GraphportError, UnsupportedInputError
from .program import ExportedProgram
from .progress import report as report_progress
from .shapes.contract import InputDimension
from .shapes.expr import INF
from .signature import OutputKind

log = logging.getLogger("graphport.check")

pytree = _torch.pytree

Sizes = dict[sympy.Symbol, int]


@dataclass
class Finding:
    """One way the program broke its promise, at the smallest sizes found."""
    kind: str                     # "mismatch", "refused in range", "eager failed", "not refused", "wrong error"
    sizes: dict[str, int]         # dimension name -> size
    shapes: dict[str, list[int]]  # input path -> shape
    detail: str
    first_seen: dict[str, int] | None = None   # the sizes it was found at, before shrinking

    def __str__(self) -> str:
        shrunk = f" (first seen at {self.first_seen})" if self.first_seen and self.first_seen != self.sizes else ""
        shapes = ", ".join(f"{p}: {s}" for p, s in self.shapes.items())
        return f"{self.kind} at {self.sizes}{shrunk}; inputs {shapes}\n    {self.detail}"


@dataclass
class CheckReport:
    """What `check` tried and what it found. `passed` is True when nothing broke."""
    samples: int = 0              # inputs drawn inside the contract and compared with eager
    agreements: int = 0           # of those, how many matched eager
    out_of_contract: int = 0      # inputs drawn outside the contract
    refusals: int = 0             # of those, how many were refused with a graphport error
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def mismatches(self) -> int:
        return len(self.findings)

    @property
    def passed(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        return (f"{self.samples} samples inside the contract, {self.agreements} agree with eager; "
                f"{self.out_of_contract} outside, {self.refusals} refused; "
                f"{self.mismatches} problem{'' if self.mismatches == 1 else 's'}")

    def __str__(self) -> str:
        lines = [("PASSED: " if self.passed else "FAILED: ") + self.summary()]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  {f}" for f in self.findings]
        return "\n".join(lines)


def check(model: torch.nn.Module | Callable, ep_or_args: ExportedProgram | tuple, *, kwargs: dict | None = None,
          dynamic_shapes: Any = None, samples: int = 20, max_size: int = 64, seed: int = 0,
          rtol: float | None = None, atol: float | None = None,
          progress: Callable[[int, int], None] | None = None) -> CheckReport:
    """Compare an exported program with `model` in eager mode across its shape contract.

    `ep_or_args` is the ExportedProgram to check, or the example args to export `model` with
    (then `kwargs` and `dynamic_shapes` go to `graphport.export`). `samples` inputs are drawn
    inside the contract; `max_size` caps the sizes drawn for a dimension whose declared
    maximum is larger (raise it to test a large maximum). `rtol`/`atol` override the
    per-dtype tolerances of `torch.testing.assert_close`. `progress(done, total)` is called
    after every input tried.
    """
    if isinstance(ep_or_args, ExportedProgram):
        ep = ep_or_args
    elif isinstance(ep_or_args, tuple):
        from .export import export
        ep = export(model, ep_or_args, kwargs, dynamic_shapes=dynamic_shapes)
    else:
        raise UnsupportedInputError(
            f"check expects an ExportedProgram or a tuple of example args, got a {type(ep_or_args).__qualname__}",
            fix="pass graphport.check(model, ep) or graphport.check(model, (x,), dynamic_shapes=...)")
    if ep.example_inputs is None:
        raise UnsupportedInputError("the program carries no example inputs to draw new inputs like",
                                    fix="pass the example args instead: graphport.check(model, (x,), ...)")
    return _Checker(model, ep, samples, max_size, seed, rtol, atol, progress).run()


class _Checker:
    def __init__(self, model, ep, samples, max_size, seed, rtol, atol, progress):
        self.model, self.ep, self.rtol, self.atol, self.progress = model, ep, rtol, atol, progress
        self.n_samples, self.max_size, self.seed = samples, max_size, seed
        self.rng = random.Random(seed)
        self.flat, self.spec = pytree.tree_flatten(ep.example_inputs)
        self.paths = ep.input_paths or [f"input{i}" for i in range(len(self.flat))]
        self.contract = ep.shape_contract
        drawn = [] if self.contract is None else [
            f for f in self.contract.symbols.values() if isinstance(f.source, InputDimension)]
        self.facts = {f.symbol: f for f in drawn}
        self.example_sizes = {f.symbol: self._example_value(f) for f in drawn}
        self.mutates_state = any(s.kind is OutputKind.BUFFER_MUTATION for s in ep.graph_signature.output_specs)
        self.report = CheckReport()
        self.bounds = {f.symbol: self._drawn_bounds(f) for f in drawn}
        self.module = ep.module()

    # -- the plan ------------------------------------------------------------------------------

    def run(self) -> CheckReport:
        """Every draw, with the program's state (the model's own buffers, often) put back
        afterwards: running the program updates buffers it mutates in place."""
        saved = {id(t): (t, t.clone()) for t in [*self.ep.state_dict.values(), *self.ep.constants.values()]
                 if isinstance(t, torch.Tensor)} if self.mutates_state else {}
        try:
            return self._run()
        finally:
            with torch.no_grad():
                for tensor, value in saved.values():
                    tensor.copy_(value)

    def _run(self) -> CheckReport:
        inside = self._inside_draws()
        outside = self._outside_draws()
        total, done = len(inside) + len(outside), 0
        log.info("drawing %d size sets inside the contract and %d outside it", len(inside), len(outside))
        for sizes in inside:
            log.debug("inside: %s", sizes)
            self._try_inside(sizes)
            done += 1
            self._tick(done, total)
        for sizes, why, bump in outside:
            log.debug("outside (%s): %s", why, sizes)
            self._try_outside(sizes, why, bump)
            done += 1
            self._tick(done, total)
        return self.report

    def _tick(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(done, total)
        report_progress("check", done, total)

    def _example_value(self, fact) -> int:
        src = fact.source
        if src.dim is None:   # a dynamic int input
            return self.flat[src.index]
        return (int(self.flat[src.index].shape[src.dim]) - src.offset) // src.coeff

    def _drawn_bounds(self, fact) -> tuple[int, int]:
        """The sizes drawn for a symbol: its declared range, from where the program is valid,
        up to the declared maximum or `max_size` (or the example, if larger)."""
        lo = max(int(fact.range.lower), fact.valid_from or 0)
        declared_hi = fact.range.upper
        cap = max(self.max_size, self.example_sizes[fact.symbol], lo)
        if declared_hi != INF and int(declared_hi) <= cap:
            return lo, int(declared_hi)
        declared = "inf" if declared_hi == INF else int(declared_hi)
        self.report.notes.append(f"sizes of {fact.name} drawn up to {cap} (declared up to {declared}); "
                                 "raise max_size to go further")
        return lo, cap

    def _inside_draws(self) -> list[Sizes]:
        syms = list(self.facts)
        bounds = {s: self.bounds[s] for s in syms}
        candidates: list[Sizes] = [dict(self.example_sizes)]
        if syms:
            candidates.append({s: bounds[s][0] for s in syms})
            candidates.append({s: bounds[s][1] for s in syms})
            for s in syms:
                for special in (0, 1, bounds[s][0], bounds[s][0] + 1, bounds[s][1]):
                    if bounds[s][0] <= special <= bounds[s][1]:
                        candidates.append({**self.example_sizes, s: special})
        draws: list[Sizes] = []
        attempts = 0
        while len(draws) < self.n_samples and attempts < 50 * max(self.n_samples, 1):
            attempts += 1
            sizes = candidates.pop(0) if candidates else {s: self.rng.randint(*bounds[s]) for s in syms}
            if sizes not in draws and self._inside_contract(sizes):
                draws.append(sizes)
            if not syms and draws:
                break
        return draws

    def _outside_draws(self) -> list[tuple[Sizes, str, tuple[int, int] | None]]:
        """Sizes the contract refuses, each with why, and the (input, dim) to make one larger
        than its relation says (None: the sizes alone are outside)."""
        out: list[tuple[Sizes, str, tuple[int, int] | None]] = []
        for s, fact in self.facts.items():
            lo, hi = int(fact.range.lower), fact.range.upper
            if lo > 0:
                out.append(({**self.example_sizes, s: lo - 1}, f"{fact.name} below its minimum {lo}", None))
            if fact.valid_from is not None and fact.valid_from > lo:
                out.append(({**self.example_sizes, s: fact.valid_from - 1},
                            f"{fact.name} below {fact.valid_from}, where the program said it is not valid", None))
            if hi != INF:
                out.append(({**self.example_sizes, s: int(hi) + 1}, f"{fact.name} above its maximum {int(hi)}", None))
        for i, d, expr in self.contract.dims if self.contract else []:
            if not expr.is_Symbol:
                out.append((dict(self.example_sizes), f"{self.paths[i]}.shape[{d}] not equal to {expr}", (i, d)))
        for relation in self.contract.relations if self.contract else []:
            for _ in range(20 * max(len(self.facts), 1)):
                sizes = {s: self.rng.randint(*self.bounds[s]) for s in self.facts}
                if _at(relation.rel, sizes) is sympy.false:
                    out.append((sizes, f"sizes breaking the relation {relation.rel}", None))
                    break
        # a derived dimension can go negative just outside a range: no tensor has that shape
        return [o for o in out if all(d >= 0 for shape in self._shapes(o[0], o[2]) if shape for d in shape)]

    def _inside_contract(self, sizes: Sizes) -> bool:
        if self.contract is None:
            return True
        for _, _, expr in self.contract.dims:
            value = _at(expr, sizes)
            if not value.is_Integer or value < 0:
                return False
        return all(_at(r.rel, sizes) is sympy.true for r in self.contract.relations)

    # -- inputs --------------------------------------------------------------------------------

    def _shapes(self, sizes: Sizes, bump: tuple[int, int] | None = None) -> list[list[int] | None]:
        shapes = [list(x.shape) if isinstance(x, torch.Tensor) else None for x in self.flat]
        for i, d, expr in self.contract.dims if self.contract else []:
            shapes[i][d] = int(_at(expr, sizes))
        for s, fact in self.facts.items():   # a symbol's own dim, even if it is outside the contract
            src = fact.source
            if src.dim is None:
                continue
            shapes[src.index][src.dim] = src.coeff * sizes[s] + src.offset
        if bump is not None:
            shapes[bump[0]][bump[1]] += 1
        return shapes

    def _inputs(self, sizes: Sizes, seed: int, bump: tuple[int, int] | None = None) -> tuple[list, list]:
        """Random inputs of the example's dtypes at `sizes`; integers within the example's values
        (token ids stay valid indices), booleans random, non-tensors as in the example."""
        gen = torch.Generator().manual_seed(seed)
        leaves = []
        ints = {f.source.index: sizes[s] for s, f in self.facts.items() if f.source.dim is None and s in sizes}
        for i, (x, shape) in enumerate(zip(self.flat, self._shapes(sizes, bump))):
            if not isinstance(x, torch.Tensor):
                leaves.append(ints.get(i, x))   # a dynamic int takes its drawn value
            elif x.dtype == torch.bool:
                leaves.append(torch.randint(0, 2, shape, generator=gen).bool())
            elif x.dtype.is_floating_point or x.dtype.is_complex:
                leaves.append(torch.randn(shape, generator=gen, dtype=x.dtype))
            else:
                lo, hi = (int(x.min()), int(x.max())) if x.numel() else (0, 1)
                leaves.append(torch.randint(lo, hi + 1, shape, generator=gen, dtype=x.dtype))
        for i, first in self.ep.input_aliases.items():   # one tensor passed twice at export: again
            leaves[i] = leaves[first]
        clones = {id(t): t.clone() for t in leaves if isinstance(t, torch.Tensor)}
        return leaves, [clones.get(id(t), t) for t in leaves]

    def _describe(self, sizes: Sizes, bump: tuple[int, int] | None = None
                  ) -> tuple[dict[str, int], dict[str, list[int]]]:
        names = {s: self.facts[s].name for s in sizes}
        shapes = self._shapes(sizes, bump)
        return ({names[s]: v for s, v in sizes.items()},
                {p: s for p, s in zip(self.paths, shapes) if s is not None})

    # -- one input -----------------------------------------------------------------------------

    def _try_inside(self, sizes: Sizes) -> None:
        self.report.samples += 1
        problem = self._compare(sizes)
        if problem is None:
            self.report.agreements += 1
            return
        kind, detail = problem
        smallest, (kind, detail) = self._shrink(sizes, kind, (kind, detail))
        names, shapes = self._describe(smallest)
        first, _ = self._describe(sizes)
        if not any(f.kind == kind and f.sizes == names for f in self.report.findings):
            self.report.findings.append(Finding(kind, names, shapes, detail, first))

    def _compare(self, sizes: Sizes) -> tuple[str, str] | None:
        seed = zlib.crc32(repr((self.seed, sorted((s.name, v) for s, v in sizes.items()))).encode())
        ours, theirs = self._inputs(sizes, seed)
        module = self.ep.module() if self.mutates_state else self.module
        model = _fresh(self.model) if self.mutates_state else self.model
        got, got_error = _call(module, ours, self.spec, seed)
        want, want_error = _call(model, theirs, self.spec, seed)
        if want_error is not None:   # the model itself rejects these inputs: the program must fail too
            if got_error is not None:
                return None
            return "eager failed", (f"eager raised {type(want_error).__name__}: {_first_line(want_error)}, but "
                                    "the program returned a result")
        if isinstance(got_error, GraphportError):
            return "refused in range", f"the program refused an input its contract accepts: {_first_line(got_error)}"
        if got_error is not None:
            return "wrong error", f"the program raised {type(got_error).__name__}: {_first_line(got_error)}"
        difference = _difference((got, ours), (want, theirs), self.rtol, self.atol)
        return None if difference is None else ("mismatch", difference)

    def _shrink(self, sizes: Sizes, kind: str, problem: tuple[str, str]) -> tuple[Sizes, tuple[str, str]]:
        """Move each size toward its lower bound while the same kind of failure persists."""
        improved = True
        while improved:
            improved = False
            for s in sizes:
                lo = self.bounds[s][0]
                for smaller in sorted({lo, lo + (sizes[s] - lo) // 2, sizes[s] - 1}):
                    if not lo <= smaller < sizes[s]:
                        continue
                    trial = {**sizes, s: smaller}
                    if not self._inside_contract(trial):
                        continue
                    found = self._compare(trial)
                    if found is not None and found[0] == kind:
                        sizes, problem, improved = trial, found, True
                        break
        return sizes, problem

    def _try_outside(self, sizes: Sizes, why: str, bump: tuple[int, int] | None) -> None:
        self.report.out_of_contract += 1
        ours, _ = self._inputs(sizes, self.seed, bump)
        args, kwargs = _args(ours, self.spec)
        try:
            self.module(*args, **kwargs)
        except GraphportError:
            self.report.refusals += 1
            return
        except Exception as e:   # noqa: BLE001 -- refused, but not with graphport's error
            names, shapes = self._describe(sizes, bump)
            self.report.findings.append(Finding("wrong error", names, shapes,
                                                f"{why}: raised {type(e).__name__}: {_first_line(e)}, "
                                                "not a graphport error"))
            return
        names, shapes = self._describe(sizes, bump)
        self.report.findings.append(Finding("not refused", names, shapes,
                                            f"{why}: the program ran instead of refusing the input"))


def _at(expr: sympy.Basic, sizes: Sizes) -> sympy.Basic:
    """`expr` with the symbols replaced by their sizes."""
    return sympy.sympify(expr).xreplace({s: sympy.Integer(v) for s, v in sizes.items()})


def _call(fn, leaves: list, spec, seed: int) -> tuple[Any, Exception | None]:
    """fn on the inputs, from the same random state each time (so random ops draw alike),
    leaving the process's random state as it was; (result, None) or (None, the error)."""
    args, kwargs = _args(leaves, spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return fn(*args, **kwargs), None
        except Exception as e:   # noqa: BLE001 -- the caller classifies every failure
            return None, e


def _args(leaves: list, spec) -> tuple[tuple, dict]:
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    return tuple(args), dict(kwargs)


def _fresh(model):
    """A copy for one eager call, so state the model mutates (running stats) starts equal each time."""
    return copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _difference(got, want, rtol, atol) -> str | None:
    """None when the outputs (and mutated inputs) agree, else what differs first."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(want)
    if got_spec != want_spec:
        return f"the outputs are structured differently: program {got_spec}, eager {want_spec}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        where = f"output leaf {i}" if i < len(pytree.tree_leaves(got[0])) else "an input after the call (mutation)"
        if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"{where}: program gave {type(g).__name__}, eager {type(w).__name__}"
        if not isinstance(w, torch.Tensor):
            if g != w:
                return f"{where}: program gave {g!r}, eager {w!r}"
            continue
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"{where}: program gave {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        try:
            kw = {} if rtol is None and atol is None else {"rtol": rtol or 0.0, "atol": atol or 0.0}
            torch.testing.assert_close(g, w, equal_nan=True, check_device=False, **kw)
        except AssertionError as e:
            detail = " ".join(str(e).split())
            return f"{where} differs: {detail}"
    return None

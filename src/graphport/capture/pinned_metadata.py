"""One operator's metadata worked out again with some symbols pinned to small sizes.

Each set of pins gets its own session: a shape environment where those symbols are the
pinned numbers and the others keep their declared ranges, and a capture mode whose
recording is thrown away. An operator's arguments are rebuilt there from the size
expressions capture recorded, its metadata computed by the same code path capture took
(capture/mode.py), and the result compared with what capture recorded, pins applied.

Work is shared where it is the same work: a session's meta cache is kept from one outcome to
the next, each cached answer bringing the assumptions and guards of its own computation
(_SessionCache); and a re-trace at a pinned size (passes/small_sizes.py) takes over the
capture's outcomes that hold at every size of the pinned symbol, for its calls that are the
capture's at that size (ProvenOutcomes, TakenOver).
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field

import sympy
import torch

from ..shapes.env import ShapeEnv
from ..shapes.node import SymNode
from ..shapes.spec import InputShapes
from .environment import capture_environment
from .inputs import laid_out
from .meta_cache import MetaCache
from ..errors import OperatorError
from .local_proofs import DeferredAssumptions, LocalVerdicts, MetadataCall, TensorLayout, scalar_key, at_pins
from .mode import CaptureMode
from .recorder import Recorder
from .sizes import SizeValues
from .tracer import TracerTensor

_MAX_PIN_SETS_PER_CALL = 16


def proven_by_metadata(deferred: DeferredAssumptions, sessions: "PinnedSessions") -> bool:
    """Whether every recorded metadata call gives, at every combination of the small sizes
    of the deferred symbols its arguments use, the metadata capture recorded there."""
    env = deferred.env
    smalls = {s: list(range(least - 1, env.symbols[s].declared.lower - 1, -1))
              for s, least in deferred.metadata_min.items()}
    for call in deferred.calls.values():
        involved = sorted((s for s in call.symbols if smalls.get(s)), key=str)
        pin_sets = [{s: v for s, v in zip(involved, values) if v is not None}
                    for values in itertools.product(*([None, *smalls[s]] for s in involved))]
        pin_sets = [p for p in pin_sets if p and call.affected_by(p)]
        if len(pin_sets) > _MAX_PIN_SETS_PER_CALL:
            return False
        for pins in pin_sets:
            allowed = set(involved) - pins.keys()
            if not sessions.same_metadata(call, {s: sympy.Integer(v) for s, v in pins.items()}, allowed):
                return False
    return True


def proven_by_size(deferred: DeferredAssumptions, sessions: "PinnedSessions", local: set) -> LocalVerdicts:
    """The small sizes below the capture's assumptions settled one by one, as far as the
    recorded metadata calls settle them, the other symbols' sizes left open.

    A size of a symbol in `local` (no decision outside a metadata computation assumed anything
    about it) where every call gives its recorded metadata is proven. A size where, in the
    program's order, the calls before give theirs and the next one rejects its arguments is
    one where eager fails at that call too, provided the program made no decision before it
    that holds above that size only (for a symbol not in `local`, the calls made before its
    first such decision). Then the combinations of proven sizes of several symbols. Whatever
    is not settled here is left to the re-trace, which decides it as it always did."""
    env = deferred.env
    verdicts = LocalVerdicts()
    calls = list(deferred.calls.values())
    levels = {s: max(deferred.metadata_min.get(s, 0), deferred.layout_min.get(s, 0), env.assumed_min.get(s, 0))
              for s in {*deferred.metadata_min, *deferred.layout_min, *env.assumed_min}}
    for sym in sorted(levels, key=str):
        for v in range(levels[sym] - 1, env.symbols[sym].declared.lower - 1, -1):
            if sym not in local and v > 0:
                continue   # only a refusal can be settled there, and programs seldom fail above 0
            pins = {sym: sympy.Integer(v)}
            if any(g.rel.xreplace(pins) is sympy.false for g in env.guards):
                break   # the program's own guards rule it out: the spec check reports them
            before = min((i for (s, least), i in deferred.ordinary_from.items() if s == sym and least > v),
                         default=len(calls))
            failed = next((c for c in calls[:before] if c.affected_by(pins)
                           and not _same_within(sessions.outcome(c, pins, _open(c, levels, pins)), levels)), None)
            if failed is None and sym in local:
                verdicts.valid.setdefault(sym, []).append(v)
            elif failed is not None:
                error = sessions.outcome(failed, pins, _open(failed, levels, pins)).error
                if isinstance(error, OperatorError):
                    verdicts.refused[(sym, v)] = (f"the program fails there: {error.what}", failed.location)
    smalls = {s: vs for s, vs in verdicts.valid.items() if vs}
    combinations = [dict(zip(smalls, values)) for values in itertools.product(*smalls.values())]
    if len(smalls) < 2 or len(combinations) > _MAX_PIN_SETS_PER_CALL:
        return verdicts
    for combination in combinations:
        if all(_same_at(sessions, c, {s: sympy.Integer(v) for s, v in combination.items() if s in c.symbols}, levels)
               for c in calls):
            verdicts.combinations.append(combination)
    return verdicts


def _open(call: MetadataCall, levels: dict, pins: dict) -> set:
    """The symbols a call's metadata may assume things about at `pins`: the others whose
    small sizes are proven on their own (by this proof or the re-trace)."""
    return (set(call.symbols) & levels.keys()) - pins.keys()


def _same_within(outcome: "Outcome", levels: dict) -> bool:
    """The recorded metadata again, assuming no more of the other symbols than the capture
    did (their smaller sizes are proven with these pins, or refused)."""
    return outcome.same and all(least <= levels[s] for s, least in outcome.assumed.items())


def _same_at(sessions: "PinnedSessions", call: MetadataCall, pins: dict, levels: dict) -> bool:
    """Whether `call` gives its recorded metadata with two or more symbols pinned (fewer:
    proven with the single sizes)."""
    return len(pins) < 2 or not call.affected_by(pins) \
        or _same_within(sessions.outcome(call, pins, _open(call, levels, pins)), levels)


class PinnedSessions(contextlib.ExitStack):
    """The sessions of one program's proofs, by pins, with the outcomes they worked out (the
    proof of all sizes and the size-by-size one share them). The capture environment is
    entered when the first session is made. `inherited`: outcomes of the capture this program
    is a re-trace of, at these pinned sizes, that it may take over (TakenOver)."""

    def __init__(self, shapes: InputShapes, inherited: "TakenOver | None" = None):
        super().__init__()
        self.shapes = shapes
        self.inherited = inherited
        self.sessions: dict = {}   # pins -> _Session
        self.outcomes: dict = {}   # (pins, id(call), symbols left open) -> Outcome
        self.session_pins: dict = {}   # pins -> the pins its session used (tied sizes pinned too)
        self._entered = False
        self._tied_pins: dict = {}

    def same_metadata(self, call: MetadataCall, pins: dict, allowed: set) -> bool:
        """Whether `call` gives its recorded metadata at `pins`, asking no new question of the
        sizes and assuming nothing about other symbols than `allowed` (each proven at its own
        pins)."""
        return self.outcome(call, pins, allowed).same

    def outcome(self, call: MetadataCall, pins: dict, allowed: set) -> "Outcome":
        key = frozenset(pins.items())
        found = self.outcomes.get((key, id(call), frozenset(allowed)))
        if found is not None:
            return found
        if self.inherited is not None:
            found = self.inherited.outcome(call, self._tied(key, pins), allowed)
            if found is not None:
                self.outcomes[(key, id(call), frozenset(allowed))] = found
                return found
        session = self.sessions.get(key)
        if session is None:
            if not self._entered:
                self.enter_context(capture_environment(None, symbolic=True))
                self._entered = True
            session = self.sessions[key] = _Session(self.shapes, pins)
            self.session_pins[key] = session.pins
        found = self.outcomes[(key, id(call), frozenset(allowed))] = session.same(call, allowed)
        if session.spoiled:
            # a guard the program does not state was recorded there (and may have made the env
            # replace one size by another): the next outcome at these pins starts afresh
            del self.sessions[key]
        return found

    def _tied(self, key: frozenset, pins: dict) -> dict:
        """The pins a session at `pins` uses: the sizes tied to them pinned too."""
        found = self._tied_pins.get(key)
        if found is None:
            found = self._tied_pins[key] = self.shapes.env.with_tied_sizes(pins)
        return found


class ProvenOutcomes:
    """What one capture's proof established for every size of the symbols an outcome leaves
    open: its calls' outcomes that gave the recorded metadata, worked out from the declared
    ranges and the outcome's own assumptions alone (no guard in the session's env, so no fact
    that holds only where this capture's program does). Such an outcome holds at any size of
    a symbol it assumed nothing about, so a re-trace of the program with that symbol pinned
    (passes/small_sizes.py) may take it over for a call of its own that is the same call at
    those sizes (TakenOver)."""

    def __init__(self, deferred: DeferredAssumptions, sessions: PinnedSessions):
        by_id = {id(c): c for c in deferred.calls.values()}
        self.held = [(by_id[call_id], sessions.session_pins[key], outcome)
                     for (key, call_id, _), outcome in sessions.outcomes.items()
                     if outcome.same and not outcome.facts and call_id in by_id and key in sessions.session_pins]

    def pinned(self, pins: dict) -> "TakenOver | None":
        """The outcomes a re-trace with `pins` (symbol -> size, the tied ones included) may take over."""
        held = [(c, session_pins, o) for c, session_pins, o in self.held if pins.keys().isdisjoint(o.assumed)]
        return TakenOver(held, pins) if held else None


class TakenOver:
    """The outcomes of a capture a re-trace at `pins` takes over. A call of the re-trace is
    the capture's call at those sizes when its description (operator, kind, argument layouts
    as size expressions, dtypes, devices, requires_grad, every other argument) is the
    capture's with the pins substituted, expression for expression. The capture's outcome,
    worked out with some symbols pinned (its session's pins), holds at every size of the
    symbols it left open and assumed nothing about; where the re-trace's session pins
    (`session_pins`, tied sizes included) and the re-trace's own pins agree with the
    outcome's pins and it assumed nothing about any of them, the re-trace's call is that
    computation at sizes it covers. The outcome is taken over where the re-trace recorded the
    capture's metadata there (compared as the sessions compare: strides of dimensions of size
    1 aside), with no assumption about a symbol the re-trace's proof does not leave open."""

    def __init__(self, held: list, pins: dict):
        self.pins = pins
        self._held = held
        self._index: dict | None = None
        self._at: dict = {}   # (expression, pins) -> expanded value there

    def outcome(self, call: MetadataCall, session_pins: dict, allowed: set) -> "Outcome | None":
        if self._index is None:
            self._index = {}
            for held_call, held_pins, outcome in self._held:
                described = self._described((held_call.args, held_call.kwargs), self.pins)
                self._index.setdefault((held_call.kind, held_call.func, described), []).append(
                    (held_call, held_pins, outcome))
        found = self._index.get((call.kind, call.func, self._described((call.args, call.kwargs), {})))
        every = {**self.pins, **session_pins}
        for held_call, held_pins, outcome in found or ():
            if all(every.get(s) == v for s, v in held_pins.items()) and every.keys().isdisjoint(outcome.assumed) \
                    and set(outcome.assumed) <= allowed and self._same_recorded(call.out, held_call.out, session_pins):
                return Outcome(True, None, dict(outcome.assumed))
        return None

    def _expr(self, expr, pins: dict) -> sympy.Basic:
        key = (expr, frozenset(pins.items()))
        found = self._at.get(key)
        if found is None:
            found = self._at[key] = at_pins(expr, pins)
        return found

    def _described(self, described, pins: dict):
        """A description with `pins` substituted, every size expanded (one normal form), and
        a size that is a number there as the session rebuilds it (a Python number), with the
        scalars told apart as the calls' own key does (local_proofs._hashable)."""
        if isinstance(described, TensorLayout):
            return ("T", self._described(described.shape, pins), self._described(described.stride, pins),
                    self._described(described.offset, pins), self._described(described.storage_elements, pins),
                    described.dtype, described.device, described.requires_grad)
        if isinstance(described, tuple) and len(described) == 3 and described[0] == "S":
            expr = self._expr(described[2], pins)
            if expr.free_symbols:
                return ("S", described[1], expr)
            pytype = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[described[1]]
            return scalar_key(pytype(expr) if pytype is not bool else bool(expr))
        if isinstance(described, (list, tuple)):
            return (type(described).__name__, tuple(self._described(v, pins) for v in described))
        if isinstance(described, dict):
            return ("dict", tuple(sorted((k, self._described(v, pins)) for k, v in described.items())))
        return scalar_key(described)

    def _same_recorded(self, ours, theirs, pins: dict) -> bool:
        """Whether the re-trace's recorded metadata `ours` at `pins` is the capture's `theirs`
        at the re-trace's pins and `pins`, as a session compares a result with what was recorded."""
        both = {**self.pins, **pins}
        if isinstance(ours, TensorLayout) or isinstance(theirs, TensorLayout):
            if not (isinstance(ours, TensorLayout) and isinstance(theirs, TensorLayout)) \
                    or ours.dtype != theirs.dtype or len(ours.shape) != len(theirs.shape):
                return False
            shape = [self._expr(_size(a), pins) for a in ours.shape]
            if any(a != self._expr(_size(b), both) for a, b in zip(shape, theirs.shape)):
                return False
            if any(a == 0 for a in shape):
                return True   # no elements: the layout addresses nothing
            return (all(self._expr(_size(a), pins) == self._expr(_size(b), both)
                        for a, b, n in zip(ours.stride, theirs.stride, shape) if n != 1)
                    and self._expr(_size(ours.offset), pins) == self._expr(_size(theirs.offset), both))
        if isinstance(ours, tuple) and len(ours) == 3 and ours[0] == "S":
            return isinstance(theirs, tuple) and len(theirs) == 3 and theirs[0] == "S" and ours[1] is theirs[1] \
                and self._expr(ours[2], pins) == self._expr(theirs[2], both)
        if isinstance(ours, (list, tuple)):
            return isinstance(theirs, (list, tuple)) and type(ours) is type(theirs) and len(ours) == len(theirs) \
                and all(self._same_recorded(a, b, pins) for a, b in zip(ours, theirs))
        return type(ours) is type(theirs) and ours == theirs


def _size(described):
    """The expression of a described size (a plain number as it is)."""
    return described[2] if isinstance(described, tuple) and len(described) == 3 and described[0] == "S" \
        else sympy.sympify(described)


@dataclass(frozen=True)
class Outcome:
    """One metadata call worked out at pinned sizes: the recorded metadata again, or not;
    the error where the operator rejected its arguments there."""
    same: bool
    error: BaseException | None = None
    assumed: dict = field(default_factory=dict)   # what it assumed of the symbols left open
    facts: bool = False   # the session's env held guards then: it may have reasoned from them


class _Session:
    def __init__(self, shapes: InputShapes, pins: dict):
        pins = self.pins = shapes.env.with_tied_sizes(pins)
        pinned = shapes.pinned(pins)
        self.env: ShapeEnv = pinned.env
        self.original_guards = {g.rel.xreplace(pins) for g in shapes.env.guards}
        self.spoiled = False      # an outcome recorded a guard the program does not state
        self._at_pins: dict = {}   # recorded size expression -> its value at the pins, in this env
        self.rec = Recorder(locations=False)
        self.rec.meta_cache = _SessionCache(self.env)
        inputs = {}
        for i, dims in pinned.sizes.items():
            meta = laid_out(dims, list(range(len(dims) - 1, -1, -1)), torch.float32, self.env)
            inputs[i] = self.rec.placeholder(f"input_{i}", meta)
        for i, size in pinned.scalars.items():
            inputs[i] = self.rec.placeholder(f"input_{i}", self._value(("S", torch.SymInt, size)))
        self.rec.sizes = SizeValues(self.env, inputs)
        self.mode = CaptureMode(self.rec)

    def same(self, call: MetadataCall, allowed: set) -> Outcome:
        self.env.assumed_min.clear()   # what this computation assumes, cached answers' included
        guards = len(self.env.guards)
        try:
            args, kwargs = self._rebuild(call.args), self._rebuild(call.kwargs)
            if call.kind == "kept":
                func, grads = call.func
                out = self.mode.kept_composite_meta(func, args, kwargs, grads)
            elif call.kind == "inferred":   # sizes worked out by graphport's own code (view_meta.py)
                out = call.func(*args, **kwargs)
            else:
                out = self.mode.run_meta(call.func, args, kwargs, cache=call.kind == "meta")
        except Exception as e:   # the operator fails there, or cannot be repeated: the re-trace decides
            # kept for its message only: its traceback's frames would hold export's locals (both
            # graphs, the env) in a cycle, freed by the cyclic collector instead of on return
            return Outcome(False, e.with_traceback(None))
        finally:
            self.spoiled = any(g.rel not in self.original_guards for g in self.env.guards[guards:])
        return Outcome(self._same(call.out, out) and not self.spoiled
                       and all(sym in allowed for sym in self.env.assumed_min), None, dict(self.env.assumed_min),
                       bool(self.env.guards))

    # -- arguments --------------------------------------------------------------------------

    def _value(self, described):
        if not (isinstance(described, tuple) and len(described) == 3 and described[0] == "S"):
            return described
        _, kind, expr = described
        expr = self._at(expr)
        pytype = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[kind]
        if not expr.free_symbols:
            return pytype(expr) if pytype is not bool else bool(expr)
        return kind(SymNode(expr, self.env, pytype))

    def _rebuild(self, described):
        if isinstance(described, TensorLayout):
            return self._tracer(described)
        if isinstance(described, tuple) and len(described) == 3 and described[0] == "S":
            return self._value(described)
        if isinstance(described, (list, tuple)):
            return type(described)(self._rebuild(v) for v in described)
        if isinstance(described, dict):
            return {k: self._rebuild(v) for k, v in described.items()}
        return described

    def _tracer(self, t: TensorLayout) -> TracerTensor:
        size = [self._value(s) for s in t.shape]
        stride = [self._value(s) for s in t.stride]
        storage = torch.empty((self._value(t.storage_elements),), dtype=t.dtype, device="meta")
        meta = storage.as_strided(size, stride, self._value(t.offset))
        if t.requires_grad:
            meta.requires_grad_(True)
        node = self.rec.placeholder(f"arg_{len(self.rec.placeholders)}", meta)
        tracer = TracerTensor(meta, t.device, node.name)
        self.rec.root.bind(tracer, node, 0)
        return tracer

    # -- results ----------------------------------------------------------------------------

    def _expr(self, value) -> sympy.Basic:
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return sympy.expand(self.env.simplify(value.node.expr))
        return sympy.sympify(value)

    def _same(self, recorded, out) -> bool:
        if isinstance(recorded, TensorLayout):
            if not isinstance(out, torch.Tensor):
                return False
            meta = out.gp_meta if isinstance(out, TracerTensor) else out
            shape = [self._expr(s) for s in meta.shape]
            if meta.dtype != recorded.dtype or len(shape) != len(recorded.shape) \
                    or any(not _equal(a, self._pinned(b)) for a, b in zip(shape, recorded.shape)):
                return False
            if any(a == 0 for a in shape):
                return True   # no elements: the layout addresses nothing
            strides = [(self._expr(a), b) for a, b, n in zip(meta.stride(), recorded.stride, shape) if n != 1]
            return (all(_equal(a, self._pinned(b)) for a, b in strides)
                    and _equal(self._expr(meta.storage_offset()), self._pinned(recorded.offset)))
        if isinstance(recorded, tuple) and len(recorded) == 3 and recorded[0] == "S":
            return isinstance(out, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)) \
                and _equal(self._expr(out), self._pinned(recorded))
        if isinstance(recorded, (list, tuple)):
            return isinstance(out, (list, tuple)) and len(out) == len(recorded) \
                and all(self._same(r, o) for r, o in zip(recorded, out))
        if isinstance(out, torch.Tensor):
            return False
        return type(recorded) is type(out) and recorded == out

    def _pinned(self, described) -> sympy.Basic:
        if isinstance(described, tuple) and len(described) == 3 and described[0] == "S":
            return sympy.expand(self._at(described[2]))
        return sympy.sympify(described)

    def _at(self, expr) -> sympy.Basic:
        """A recorded size expression at the pins, simplified by this env: memoized, the same
        expressions come back call after call (keyed by the env's replacements too)."""
        key = (expr, len(self.env.replacements))
        found = self._at_pins.get(key)
        if found is None:
            found = self._at_pins[key] = self.env.simplify(at_pins(expr, self.pins))
        return found


class _SessionCache(MetaCache):
    """A session's meta cache, kept from one outcome to the next: an answer carries what its
    computation assumed of the sizes and the guards it recorded, and a cached answer brings
    them into the outcome that uses it, as if it had been worked out again there (the capture's
    own cache does the same with its assumptions, local_proofs.py). The assumptions are those
    of that computation alone: the env's are set aside while it runs."""

    def __init__(self, env: ShapeEnv):
        super().__init__()
        self.env = env
        self.deferred = self   # MetaCache asks current() of each answer it keeps, replay() on a hit
        self._made: tuple = ({}, ())

    def run(self, func, args: tuple, kwargs: dict, compute):
        env = self.env

        def tracked():
            outer, env.assumed_min = env.assumed_min, {}
            guards = len(env.guards)
            try:
                return compute()
            finally:
                made = env.assumed_min
                env.assumed_min = outer
                self._made = (dict(made), tuple(env.guards[guards:]))
                self.replay(self._made, guards=False)
        return super().run(func, args, kwargs, tracked)

    def current(self) -> tuple:
        return self._made

    def replay(self, made: tuple, guards: bool = True) -> None:
        assumed, recorded = made
        for sym, least in assumed.items():
            self.env.assumed_min[sym] = max(self.env.assumed_min.get(sym, 0), least)
        if guards:
            self.env.guards.extend(recorded)


def _equal(a: sympy.Basic, b: sympy.Basic) -> bool:
    if isinstance(a, sympy.logic.boolalg.Boolean) or isinstance(b, sympy.logic.boolalg.Boolean):
        return a == b
    if a == b:
        return True
    if a.is_Number and b.is_Number:   # numbers: nothing to expand
        return a - b == 0
    return sympy.expand(a - b) == 0

"""The recorder: owns the scopes being recorded and what each tracer stands for in them.

Every graph value is made here: placeholders for inputs, state and constants (in the
root scope), op calls with their metadata (`val`, the user's stack, the module stack),
size expressions, and the functional form of writes: a write to a tensor rebinds it to a
new value; a write through a view is scattered back up the view chain to its base, and
other views of that base are recomputed from it when next used.
"""
from __future__ import annotations

import contextlib
import keyword
import operator
from typing import Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..op_args import map_args
from ..errors import DataDependentError, InternalError, UnsupportedFeatureError
from ..ops.views import COVERS_SOURCE, ViewStep, replay, scatter_back
from ..values import DEVICE_KEY
from ..source import UserStacks
from .grad import GradFlow
from .custom_objects import CustomObjects, is_custom_object
from .effects import EffectTokens
from .meta_cache import MetaCache
from .scope import Scope
from .sizes import SizeValues, as_sym, emit_recipe, is_sym, recomputed_inside
from .tracer import TracerTensor, meta_like


def call_node(graph: fx.Graph, target, args: tuple, kwargs: dict, name: str) -> fx.Node:
    """`graph.create_node("call_function", ...)`, without fx's walk of the arguments with the
    general pytree looking for raw symbolic sizes to warn about (a tenth of recording a node):
    the node is made without its arguments, then given them (`graph_arg` has made every
    symbolic size a graph value already). Where the graph's module has node-creation hooks,
    which would see the node before its arguments, fx's own path is taken."""
    if graph.owning_module is None and type(args) is tuple:
        node = graph.create_node("call_function", target, (), kwargs, name=name)
        node.args = args
        return node
    return graph.create_node("call_function", target, args, kwargs, name=name)


class Recorder:
    def __init__(self, entry_frame=None, locations: bool = True):
        self.root = self.scope = Scope()
        self.entry_frame = entry_frame
        self.user_stack = UserStacks(entry_frame)   # the program's frames at each node (source.py)
        self.locations = locations   # False: nodes get no source location or module stack (a proof re-trace)
        self.module_stack: list[tuple[str, str, str]] = []  # (call key, fqn, qualified type) of active calls
        self.torch_fn: tuple | None = None                  # the torch function running (torch_fn.py)
        # its `torch_fn` metadata and `source_fn_stack` entry, made once for all the nodes it records
        self._torch_fn_meta: tuple[tuple, tuple] | None = None
        self.constants: dict[int, TracerTensor] = {}       # id(real tensor) -> its lifted tracer
        self.constant_values: dict[str, torch.Tensor] = {}  # target -> real tensor
        self.constant_names: dict[int, str] = {}           # id(attribute tensor) -> attribute fqn
        self.state_tracers: dict[int, TracerTensor] = {}   # id(real parameter or buffer) -> its tracer
        self.constant_targets: dict[str, str] = {}         # placeholder name -> constant target
        self.objects = CustomObjects(self)                  # TorchBind objects the module holds (custom_objects.py)
        self.effects: EffectTokens | None = None            # when effectful calls are chained by tokens (effects.py)
        self.placeholders: list[fx.Node] = []               # in the order they were created
        self.placeholder_tracers: set[int] = set()          # id() of tracers standing for placeholders
        self.user_calls: set[fx.Node] = set()               # nodes the program asked for (never dead code)
        self.sizes: SizeValues | None = None                # when the capture has symbolic sizes
        self.meta_cache = MetaCache()
        self.grad = GradFlow()   # which values eager would make require grad (grad.py)
        self.state_reads = None   # the mode answering the program's reads of autograd state (tensor_state.py)
        # detach of a value that would require grad is a node (rules.py); not while autograd itself
        # records the calls (the joint replay), where detach stops the gradient on its own
        self.detach_nodes = True
        self.real_values: dict[fx.Node, Any] = {}   # placeholder -> its example value (example_answers.py)
        self.fallback_stack: tuple = ()   # source location for nodes made after the program returned
        self._keepalive: list[torch.Tensor] = []
        self.until_done: contextlib.ExitStack | None = None   # exited when the capture ends
        self.deferred = None   # assumptions proven operator by operator (local_proofs.py), if so
        # id() of tensors a view-or-copy call decided with a size question left open (data-dependent
        # sizes, or dims the spec does not relate) -> that question (where it holds, eager's result
        # may be a view)
        self.unsettled_aliases: dict[int, Any] = {}

    def release(self) -> None:
        """Drop what the capture held once its graph is handed on, so that it is freed by
        reference counting when capture returns rather than left in reference cycles for
        Python's cyclic collector: capture's own frame (which holds this recorder), the
        tracers bound in the root scope, and the real tensors kept for their ids."""
        self.entry_frame = self.user_stack = None
        self.state_reads = self.until_done = self.objects = None   # each holds this recorder
        self.root._values.clear()
        self._keepalive.clear()
        self.constants.clear()
        self.state_tracers = {}

    def defer_assumptions(self, deferred) -> None:
        self.deferred = self.meta_cache.deferred = deferred

    @contextlib.contextmanager
    def view_or_copy(self, source, copy_if_undecided: bool = False):
        """A call that returns a view or a copy of `source` depending on its layout
        (`contiguous()`, `reshape`, `flatten`); the list yielded takes its result. Where the
        choice depended on a size assumed large, the deferred proof tracks it (local_proofs.py);
        where on a question nothing settled (a data-dependent size, dims the spec does not
        relate), both tensors are remembered: a write into either is refused (`written`).
        With `copy_if_undecided`, a question about input sizes that nothing settles raises
        ChoiceUndecided instead of becoming a guard (the caller makes the call on a copy)."""
        env = self.sizes.env if self.sizes is not None else None
        outer = env.undecided if env is not None else None
        outer_copy = env.copy_if_undecided if env is not None else False
        if env is not None:
            env.undecided = []
            env.copy_if_undecided = copy_if_undecided
        try:
            with self.deferred.choice(source) if self.deferred is not None else contextlib.nullcontext([]) as result:
                yield result
            undecided = env.undecided if env is not None else None
        finally:
            if env is not None:
                env.undecided = outer
                env.copy_if_undecided = outer_copy
        if undecided:
            self.unsettled_choice(source, result[0] if result else None, undecided[0])

    def unsettled_choice(self, source, result, question) -> None:
        """`result` is a view of `source` at some sizes and a copy at others (where `question`
        holds or not): a write into either is refused (`written`)."""
        for t in (source, result):
            if isinstance(t, TracerTensor):
                self.unsettled_aliases[id(t.gp_base if t.gp_base is not None else t)] = question

    def written(self, target) -> None:
        """An in-place write into `target`: refused where a view-or-copy choice left its
        aliasing open (data-dependent sizes, or dims the spec does not relate)."""
        if self.deferred is not None:
            self.deferred.written(target)
        if not self.unsettled_aliases or not isinstance(target, TracerTensor):
            return
        question = self.unsettled_aliases.get(id(target.gp_base if target.gp_base is not None else target))
        if question is None:
            return
        what = ("the program writes in place into the result of a contiguous(), reshape() or flatten() call (or "
                "into its source) whose view-or-copy choice capture could not decide")
        clone = "make the copy explicit before writing (y = x.reshape(...).clone())"
        if self.sizes.env.unbacked.involved(question):
            raise DataDependentError(
                f"{what}: it depends on data-dependent sizes ({question}); at some of their values (such as 0 or 1) "
                "eager returns a view, at others a copy, so the write reaches the source only sometimes",
                fix=f"{clone}, or write into the source before the call")
        raise UnsupportedFeatureError(
            f"{what}: it depends on whether {question}, which dynamic_shapes leaves open; eager returns a view "
            "where it holds and a copy where not, so the write reaches the source only sometimes",
            fix=f"{clone}, or relate the dims in dynamic_shapes (the same Dim, or a Dim expression)")

    def layout_read(self, tensor) -> None:
        """The program reads a tensor's strides or storage offset (local_proofs.py says why it matters)."""
        if self.deferred is not None:
            self.deferred.layout_read(tensor)

    @property
    def graph(self) -> fx.Graph:
        return self.root.graph

    @contextlib.contextmanager
    def child_scope(self, recording: bool = True):
        """Record into a new scope nested in the current one."""
        outer = self.scope
        self.scope = Scope(outer, recording)
        try:
            yield self.scope
        finally:
            self.scope = outer

    # -- placeholders -------------------------------------------------------------------

    def placeholder(self, name: str, example: Any) -> fx.Node:
        node = self.root.graph.placeholder(name)
        if node.name != name and name.isidentifier() and not keyword.iskeyword(name) \
                and all(n.name != name for n in self.placeholders):
            node.name = name    # fx avoids builtins (`input` -> `input_1`); torch.export keeps the argument's name
        node.meta["val"] = example
        self.placeholders.append(node)
        return node

    def tracer_for_placeholder(self, name: str, real: torch.Tensor, meta: torch.Tensor | None = None) -> TracerTensor:
        meta = meta_like(real) if meta is None else meta
        node = self.placeholder(name, meta)
        self.real_values[node] = real
        node.meta[DEVICE_KEY] = real.device
        tracer = TracerTensor(meta, real.device, node.name)
        self.root.bind(tracer, node, 0)
        self.placeholder_tracers.add(id(tracer))
        return tracer

    def constant(self, real: torch.Tensor) -> TracerTensor:
        """The tracer for a real tensor met during capture: a lifted constant input, or the
        placeholder of a parameter or buffer the program reached through another object
        (transformers' StaticCache holds its buffers' tensors)."""
        known = self.state_tracers.get(id(real), self.constants.get(id(real)))
        if known is not None:
            return known
        target = self.constant_target(real)
        tracer = self.tracer_for_placeholder("c_" + target.replace(".", "_"), real)
        self.constant_targets[self.root.binding(tracer)[0].name] = target
        self.constants[id(real)] = tracer
        self.constant_values[target] = real
        self._keepalive.append(real)  # ids stay unique while capture runs
        return tracer

    def constant_target(self, real: torch.Tensor) -> str:
        """The name a real tensor met during capture has as a constant: its attribute's path,
        or `lifted_tensor_<n>` for one no module attribute holds (torch.export's names)."""
        target = self.constant_names.get(id(real))
        if target is None:
            target = f"lifted_tensor_{sum(name.startswith('lifted_tensor_') for name in self.constant_values)}"
        return target

    def lifted_constant(self, tracer: TracerTensor) -> str | None:
        """The target of the lifted constant `tracer` is (or is a view of); None if it is none."""
        root = tracer.gp_base if tracer.gp_base is not None else tracer
        found = self.root.binding(root)
        return None if found is None else self.constant_targets.get(found[0].name)

    # -- values -------------------------------------------------------------------------

    def value(self, t: TracerTensor) -> fx.Node:
        """The graph value `t` stands for in the current scope, recomputing a stale view."""
        found = self.scope.binding(t)
        if found is None:
            raise InternalError(f"{t!r} has no value in the scope being recorded")
        node, version = found
        base = t.gp_base
        if base is not None and version != base.gp_version:
            node = self.value(base)
            for step in t.gp_chain:
                node = replay(step, node, self.emit)
            self.scope.bind(t, node, base.gp_version)
        return node

    def root_value(self, t: TracerTensor) -> fx.Node:
        return self.root.binding(t)[0]

    def sym_value(self, v) -> Any:
        """The graph value (node or constant) of a SymInt/SymFloat/SymBool in the current scope."""
        return self._size_in(self.scope, v)

    def _size_in(self, scope: Scope, v) -> Any:
        if scope.parent is None:
            if self.sizes is None:
                raise InternalError(f"the size {v} reached a graph recorded without a shape environment")
            return self.sizes.value(v, self._emit_root)
        if scope is self.scope and self.sizes is not None and recomputed_inside(v.node):
            return self._recompute_here(scope, v.node)
        outer = self._size_in(scope.parent, v)
        return scope.size(outer, outer) if isinstance(outer, fx.Node) else outer

    def _recompute_here(self, scope: Scope, node) -> Any:
        """A float (or bool) made from sizes, used inside a branch or loop body: computed
        there from its recipe, its integer sizes lifted in. Lifted, it would be an operand of
        the control-flow operator, and torch's cond, map and scan take tensors and ints only."""
        key = ("recomputed", id(node))
        found = scope.sizes.get(key)
        if found is not None:
            return found
        if not self.sizes.env.simplify(node.expr).free_symbols:   # its sizes were fixed: a constant
            return node.hint
        op, *args = node.recipe
        values = [self._size_in(scope, as_sym(a)) if hasattr(a, "recipe") else a for a in args]
        found = scope.sizes[key] = emit_recipe(op, values, self.emit)
        return found

    def _emit_root(self, target, args, kwargs=None) -> fx.Node:
        inner, self.scope = self.scope, self.root
        try:
            return self.emit(target, args, kwargs)
        finally:
            self.scope = inner

    def graph_arg(self, a) -> Any:
        """An op argument as a graph value: tracers and sizes become nodes."""
        if isinstance(a, TracerTensor):
            return self.value(a)
        if isinstance(a, torch.Tensor):
            return self.value(self.constant(a))
        if is_sym(a):
            return self.sym_value(a)
        if is_custom_object(a):
            return self.objects.node(a)
        return a

    # -- recording ----------------------------------------------------------------------

    def emit(self, target: Callable, args: tuple, kwargs: dict | None = None) -> fx.Node:
        """Record a call made by capture itself (view replays, scatters, size arithmetic).
        Arguments are graph values or sizes; the node's `val` is computed from theirs."""
        kwargs = kwargs or {}
        meta_args, meta_kwargs = map_args(lambda a: a.meta["val"] if isinstance(a, fx.Node) else a, (args, kwargs))
        val = target(*meta_args, **meta_kwargs)
        node_args, node_kwargs = map_args(self.graph_arg, (args, kwargs))
        return self.node(target, node_args, node_kwargs, val)

    def node(self, target, args, kwargs, val) -> fx.Node:
        name = target.overloadpacket.__name__ if isinstance(target, _torch.OpOverload) else target.__name__
        scope = self.scope
        node = call_node(scope.graph, target, args, kwargs, name)
        node.meta["val"] = val
        self.grad.note(node)
        if scope.recording and self.locations:
            node.meta["gp_stack"] = self.user_stack() or self.fallback_stack
            node.meta["nn_module_stack"] = {f"L__self__{key}": (fqn, typ) for key, fqn, typ in self.module_stack}
            if self._torch_fn_meta is not None:
                torch_fn, source_fn = self._torch_fn_meta
                node.meta["torch_fn"] = torch_fn
                node.meta["source_fn_stack"] = [source_fn]
        return node

    def enter_torch_fn(self, torch_fn: tuple | None) -> None:
        """(label, qualified name, function) of the torch function now running, or None."""
        self.torch_fn = torch_fn
        if torch_fn is None:
            self._torch_fn_meta = None
        else:
            label, qualified, func = torch_fn
            self._torch_fn_meta = ((label, qualified), (label, func))

    def wrap(self, val: Any, node: fx.Node, device: torch.device, view_of: TracerTensor | None = None,
             step: tuple | None = None) -> Any:
        """Tracer tensors for an op's meta output `val`, recorded as `node`."""
        if isinstance(val, torch.Tensor):
            return self._wrap_one(val, node, device, view_of, step, None)
        if isinstance(val, (tuple, list)):
            out = []
            for i, v in enumerate(val):
                if isinstance(v, torch.Tensor):
                    item = self.node(operator.getitem, (node, i), {}, v)
                    out.append(self._wrap_one(v, item, device, view_of, step, i))
                else:
                    out.append(v)
            return type(val)(out)
        return val

    def _wrap_one(self, meta, node, device, view_of, step, index) -> TracerTensor:
        node.meta.setdefault(DEVICE_KEY, device)
        if view_of is None:
            t = TracerTensor(meta, device, node.name)
            self.scope.bind(t, node, 0)
            return t
        base = view_of.gp_base if view_of.gp_base is not None else view_of
        op, args, kwargs = step
        t = TracerTensor(meta, device, node.name, base=base,
                         chain=view_of.gp_chain + (ViewStep(op, args, kwargs, index),))
        self.scope.bind(t, node, base.gp_version)
        return t

    def alias(self, t: TracerTensor) -> TracerTensor:
        """A new tensor that is `t` itself (detach, alias): it shares writes with `t`."""
        node = self.value(t)
        base = t.gp_base if t.gp_base is not None else t
        alias = TracerTensor(t.gp_meta, t.device, node.name, base=base, chain=t.gp_chain + (ViewStep(None, (), {}),))
        self.scope.bind(alias, node, base.gp_version)
        return alias

    # -- writes ---------------------------------------------------------------------------

    def assign(self, t: TracerTensor, new_value: fx.Node, fill: Any = None) -> None:
        """Rebind `t` (and, through its view chain, its base) to a new value; `fill` is the
        value when the write sets every element of `t` to one value (`fill_`, `zero_`)."""
        base = t.gp_base
        if base is None:
            t.gp_version += 1
            self.scope.bind(t, new_value, t.gp_version)
            return
        # Values of each view along the chain, from the base's current value.
        values = [self.value(base)]
        for step in t.gp_chain[:-1]:
            values.append(replay(step, values[-1], self.emit))
        new = new_value
        for step, source in zip(reversed(t.gp_chain), reversed(values)):
            new = scatter_back(step, source, new, source.meta["val"], new.meta["val"], self.emit, fill)
            fill = fill if step.op in COVERS_SOURCE else None
        base.gp_version += 1
        self.scope.bind(base, new, base.gp_version)
        self.scope.bind(t, new_value, base.gp_version)
        t.gp_written = True

    def output_value(self, t: TracerTensor) -> fx.Node:
        """A returned tensor's value. A view that was written through is re-derived from its
        base, so that at run time it is a view of the base again, aliasing it as in eager."""
        if t.gp_base is not None and t.gp_written:
            outer, self.fallback_stack = self.fallback_stack, self.value(t).meta.get("gp_stack", ())  # the write's line
            node = self.value(t.gp_base)
            for step in t.gp_chain:
                node = replay(step, node, self.emit)
            self.fallback_stack = outer
            return node
        return self.value(t)

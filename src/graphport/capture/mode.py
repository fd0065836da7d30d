"""The capture mode: intercepts every ATen call on tracers and records it.

Capture never runs real kernels: each op runs on the meta tensors inside the tracers,
which gives output shapes and dtypes, and is recorded through the Recorder. The graph is
functional as it is recorded: an in-place, out= or mutating op is recorded as its pure
variant and the written tensors are rebound to the new values.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from .. import _torch
from ..op_args import arg_leaves, map_args
from ..errors import (ConstantMutationError, DataDependentError, GraphportError, InternalError, OperatorError, UnsupportedFeatureError,
                      UnsupportedOperatorError)
from ..ops.kinds import DATA_DEPENDENT_SHAPE, DATA_READS, METADATA_MUTATING, Kind, is_impure, op_info
from ..ops.policy import EXPORT_DEFAULT, Aliasing, DispatchPolicy, python_decomposition
from ..ops.views import STORAGE_ADDRESSED, ViewInverseMismatch, ViewWriteError, addresses_base_storage
from . import example_answers
from ..values import DEVICE_KEY
from . import memory_overlap
from .draw_order import DRAWS_IN_MEMORY_ORDER, draw_permutation
from .data_dependent import mask_index, rules as data_dependent_rules, truth
from .eager_check import outside_storage, runs_at_the_example, with_eager_like_strides
from . import custom_ops
from .environment import register_higher_order_rules
from .grad import CHOOSES_KERNEL_BY_GRAD, as_eager_requires
from .layer_meta import META_BY_DECOMPOSITION, layer_meta
from .pointwise_meta import pointwise_meta
from .reduction_meta import reduction_meta
from .static_meta import static_meta
from .view_meta import reshape_spelled_out, view_meta
from .recorder import Recorder
from . import static_composites
from .custom_objects import is_custom_object
from .effects import orders as effects_order
from .rules import HIGHER_ORDER, SPECIAL
from .tracer import META, TracerTensor, data_dependent
from ..shapes.env import ChoiceUndecided

aten = torch.ops.aten
pytree = _torch.pytree


class _NeedsConcreteSizes(Exception):
    """A C++ kernel asked a symbolic tensor for concrete sizes (`self.sizes()`): capture
    retries the operator another way (see CaptureMode.run_decomposition)."""


# Metadata queries that only exist for C++ code reading concrete sizes of a tensor whose
# sizes Python answers: they are not operators of the dispatcher.
_CONCRETE_QUERIES = {
    aten.size.default: lambda m: list(m.shape),
    aten.stride.default: lambda m: list(m.stride()),
}


def _symbolic(meta_args: tuple) -> bool:
    return any(isinstance(s, torch.SymInt) for a in arg_leaves(meta_args) if isinstance(a, torch.Tensor) for s in a.shape)


class CaptureMode(_torch.TorchDispatchMode):
    def __init__(self, recorder: Recorder, policy: DispatchPolicy = EXPORT_DEFAULT):
        super().__init__()
        self.rec = recorder
        self.policy = policy
        self.specialize_sizes = 0   # > 0: concrete size queries specialize symbolic sizes
        register_higher_order_rules(CaptureMode, HIGHER_ORDER)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        special = SPECIAL.get(func)
        if special is not None:
            return special(self, *args, **kwargs)
        query = _CONCRETE_QUERIES.get(func)
        if query is not None:
            return self.concrete_sizes(query(self._meta(args[0])))
        rule = _DATA_DEPENDENT.get(func)
        if rule is not None:
            out = rule(self, *args, **kwargs)
            if out is not NotImplemented:
                return out
        if func is aten.index.Tensor and _masks(args):
            return mask_index(self, *args)
        if func is aten.is_nonzero.default and example_answers.active():
            return truth(self, args[0])   # draft_export: answered from the example, checked at run time
        if func in DATA_READS:
            raise data_dependent(DATA_READS[func])
        if func in DATA_DEPENDENT_SHAPE or (func is aten.index.Tensor and _masks(args)):
            raise DataDependentError(
                f"the program uses {DATA_DEPENDENT_SHAPE.get(func, 'boolean-mask indexing (x[mask])')}, whose output shape is data-dependent (it depends on "
                "tensor values)",
                fix="keep shapes static: use torch.where(mask, x, other) or multiply by the mask instead of "
                    "selecting elements")
        if func is aten.reshape.default and self.rec.deferred is not None:
            args = reshape_spelled_out(self.rec.deferred, args)   # its -1 worked out as a metadata computation
        if self.policy.keep(func):
            return self.call_kept_composite(func, args, kwargs)
        decomposition = self.policy.decomposition(func)
        if func in _CHOOSES_VIEW_OR_COPY and decomposition is not None and self._outside_choice():
            return self.inner_view_or_copy(func, decomposition, args, kwargs)
        if decomposition is not None:
            out = self.run_decomposition(func, decomposition, args, kwargs)
            if out is not NotImplemented:
                return out
        info = op_info(func)
        if info.kind is Kind.FUNCTIONAL:
            return self.call(func, args, kwargs)
        if info.kind is Kind.VIEW:
            return self.call(func, args, kwargs, view=True)
        return self.mutate(func, info, args, kwargs)

    def _outside_choice(self) -> bool:
        """No view-or-copy call of the program's own (torch_fn.py) is running: a reshape met
        now was made by an operator's decomposition."""
        return self.rec.sizes is not None and self.rec.sizes.env.undecided is None

    def inner_view_or_copy(self, func, decomposition, args, kwargs):
        """A reshape that an operator's decomposition makes (einsum reshapes its permuted
        operands for `bmm`), treated as the program's own reshape is (torch_fn.py): torch's
        kernel asks whether the strides allow a view, and where the ranges do not settle that
        (a dimension that folds away at size 1 only), the answer must not become a guard at the
        example's value, nor a view that only holds there. Eager's values are the same either
        way: the reshape is made on a contiguous copy. Where the decomposition is recorded (its
        results are the program's), a later write into the result or its source, the one thing
        that could tell the two apart, is refused; where it only works out a kept operator's
        metadata, its tensors are thrown away and no write can reach them."""
        source = args[0]
        observable = self._recorded_scope()
        try:
            with self._choice(source, observable, copy_if_undecided=True) as result:
                result.append(self.run_decomposition(func, decomposition, args, kwargs))
            return result[0]
        except ChoiceUndecided as undecided:
            with self:
                copy = source.clone(memory_format=torch.contiguous_format)
            with self._choice(copy, observable) as result:
                result.append(self.run_decomposition(func, decomposition, (copy, *args[1:]), kwargs))
            if observable:
                self.rec.unsettled_choice(source, result[0], undecided.question)
            return result[0]

    def _recorded_scope(self) -> bool:
        """Whether what runs now is recorded into the program (not only worked out for metadata)."""
        scope = self.rec.scope
        while scope is not None:
            if not scope.recording:
                return False
            scope = scope.parent
        return True

    @contextlib.contextmanager
    def _choice(self, source, observable: bool, copy_if_undecided: bool = False):
        """A view-or-copy choice: the recorder's (remembering what a write could tell apart) where
        `observable`, else only the environment's answer to undecided questions."""
        if observable:
            with self.rec.view_or_copy(source, copy_if_undecided=copy_if_undecided) as result:
                yield result
            return
        env = self.rec.sizes.env
        outer = env.undecided, env.copy_if_undecided
        env.undecided, env.copy_if_undecided = [], copy_if_undecided
        try:
            yield []
        finally:
            env.undecided, env.copy_if_undecided = outer

    def concrete_sizes(self, values: list):
        """Sizes for a C++ kernel that needs ints: symbolic ones are specialized when allowed."""
        if all(isinstance(v, int) for v in values):
            return values
        if not self.specialize_sizes:
            raise _NeedsConcreteSizes()
        return [int(v) for v in values]   # guarded to the example value, as torch.export does

    def run_decomposition(self, func, decomposition, args, kwargs):
        """Run a composite operator's decomposition under this mode.

        A C++ composite kernel that reads concrete sizes of a symbolic tensor is run as
        torch's Python reference of the operator instead; without one, the sizes it reads
        are specialized to their example values (guarded, so a Dim that cannot be a
        constant is reported at export, naming the line). Values the failed attempt
        recorded are left unused, for dead-code elimination."""
        graph = self.rec.scope.graph
        mark = next(reversed(graph.nodes), None)
        try:
            with self:
                return decomposition(*args, **kwargs)
        except _NeedsConcreteSizes:
            self._forget_since(graph, mark)
        reference = python_decomposition(func)
        if reference is not None:
            try:
                with self:
                    return reference(*args, **kwargs)
            except _NeedsConcreteSizes:
                self._forget_since(graph, mark)
        self.specialize_sizes += 1
        try:
            with self:
                return decomposition(*args, **kwargs)
        finally:
            self.specialize_sizes -= 1

    def _forget_since(self, graph, mark) -> None:
        """An abandoned decomposition attempt: its calls are no longer the program's (dead
        code removes them), and its impure ones (a random draw) go now, or they would run."""
        node = mark.next if mark is not None else next(iter(graph.nodes), None)
        abandoned = []
        while node is not None and node.op != "root":
            self.rec.user_calls.discard(node)
            abandoned.append(node)
            node = node.next
        for node in reversed(abandoned):
            if node.op == "call_function" and is_impure(node.target) and not node.users:
                graph.erase_node(node)

    # -- running on meta ----------------------------------------------------------------

    def _meta(self, a):
        if isinstance(a, TracerTensor):
            return a.gp_meta
        if isinstance(a, torch.Tensor):
            return self.rec.constant(a).gp_meta
        if isinstance(a, torch.device):
            return META
        if is_custom_object(a):
            return self.rec.objects.fake(a)   # what fake kernels of custom ops taking the object get
        return a

    def _device(self, args, kwargs) -> torch.device:
        device = kwargs.get("device")
        if device is not None:
            return torch.device(device)
        for a in arg_leaves(args):
            if isinstance(a, torch.Tensor):
                return a.device
        return torch.device("cpu")

    def run_meta(self, func, args, kwargs, cache: bool = True):
        """The op's output metadata. An op that rejects its arguments raises OperatorError
        with eager's message; an op with no meta kernel raises UnsupportedOperatorError.
        Classified by the operator and the exception's type, never by its text. The
        assumptions about small sizes it makes are proven for it alone (local_proofs.py)."""
        deferred = self.rec.deferred
        if deferred is None or custom_ops.is_custom(func):
            return self._run_meta(func, args, kwargs, cache)
        with deferred.metadata_of("meta" if cache else "view", func, args, kwargs) as result:
            result.append(self._run_meta(func, args, kwargs, cache))
        return result[0]

    def _run_meta(self, func, args, kwargs, cache: bool):
        meta_args, meta_kwargs = map_args(self._meta, (args, kwargs))
        try:
            if not cache:
                out_of_bounds = outside_storage(func, meta_args, meta_kwargs)
                if out_of_bounds is not None:
                    raise OperatorError(f"{func.name()} failed: {out_of_bounds}",
                                        fix="this call fails the same way in eager PyTorch; check the sizes, strides "
                                            "and offset it is given against the tensor's storage")
                found = view_meta(func, meta_args, meta_kwargs) if _symbolic(meta_args) else None
                return found if found is not None else func(*meta_args, **meta_kwargs)
            if custom_ops.is_custom(func):
                return custom_ops.run_fake_kernel(func, meta_args, meta_kwargs, self)
            return self.rec.meta_cache.run(func, meta_args, meta_kwargs,
                                           lambda: self._meta_kernel(func, args, kwargs, meta_args, meta_kwargs))
        except (NotImplementedError, RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, GraphportError):
                raise
            if isinstance(e, NotImplementedError) or not _torch.has_meta_kernel(func):
                raise _no_meta_kernel(func, e) from None
            raise _operator_error(func, e, meta_args, meta_kwargs) from e

    def _meta_kernel(self, func, args, kwargs, meta_args, meta_kwargs):
        """torch's meta kernel; on symbolic sizes first the closed forms for the common calls
        (capture/pointwise_meta.py, layer_meta.py, reduction_meta.py, view_meta.py), then torch's own Python
        decomposition run on the tracers, whose pieces take those closed forms; in a static
        capture first the exact closed forms at concrete sizes (static_meta.py)."""
        if _symbolic(meta_args):
            out = None
            for closed_form in (pointwise_meta, layer_meta, reduction_meta, view_meta):
                out = closed_form(func, meta_args, meta_kwargs)
                if out is not None:
                    break
            if out is None and func in META_BY_DECOMPOSITION:
                out = self.metadata_by_decomposition(func, META_BY_DECOMPOSITION[func], args, kwargs)
            if out is not None:
                return out
        elif self.rec.sizes is None:
            out = static_meta(func, meta_args, meta_kwargs)   # concrete sizes: closed forms (static_meta.py)
            if out is not None:
                return out
        return with_eager_like_strides(func, meta_args, meta_kwargs, func(*meta_args, **meta_kwargs))

    # -- recording ------------------------------------------------------------------------

    def call(self, func, args, kwargs, view: bool = False):
        if view and isinstance(args[0], TracerTensor) and args[0].gp_base is not None \
                and addresses_base_storage(func, args[0].gp_chain):
            args = (args[0].gp_base, *args[1:])   # as_strided of a view: the same window of its base
        val = self.run_meta(func, args, kwargs, cache=not view)
        if func in _INFERRED_SIZE and self.rec.sizes is not None and isinstance(val, torch.Tensor):
            args = (args[0], _spelled_out(args[1], val.shape), *args[2:])
        node_args, node_kwargs = map_args(self.rec.graph_arg, (args, kwargs))
        effects = self.rec.effects
        if effects is not None and effects.applies() and effects_order(func):
            return effects.record(func, node_args, node_kwargs, val, self._device(args, kwargs))[1]
        node = self.rec.node(func, node_args, node_kwargs, val)
        self.rec.user_calls.add(node)
        device = self._device(args, kwargs)
        if view and isinstance(args[0], TracerTensor):
            return self.rec.wrap(val, node, device, view_of=args[0], step=(func, tuple(node_args[1:]), node_kwargs))
        out = self.rec.wrap(val, node, device)
        if custom_ops.is_custom(func):
            custom_ops.bind_output_sizes(self, out)   # sizes its fake kernel made data-dependent
        return out

    def call_kept_composite(self, func, args, kwargs):
        """A composite op kept as one node. Its output metadata comes from running its
        decomposition on the tracers, in a scope whose graph is thrown away: composite ops
        pick kernels by device (CPU attention returns a transposed layout), and strides
        decide later view-or-copy choices, so they must be the ones the real run will have."""
        aliasing = self.policy.aliasing(func, args, kwargs)
        if aliasing is not None:
            return self.call_aliasing_composite(func, args, kwargs, aliasing)
        return self.keep_whole(func, args, kwargs)

    def keep_whole(self, func, args, kwargs):
        """Record the kept composite as one node (see call_kept_composite)."""
        tracers = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, TracerTensor)] \
            if func in CHOOSES_KERNEL_BY_GRAD else []
        grads = tuple(self.rec.grad.requires_grad(self.rec.value(t)) for t in tracers)
        val = self.kept_composite_meta(func, args, kwargs, grads)
        if val is None:
            return self.call(func, args, kwargs)
        node_args, node_kwargs = map_args(self.rec.graph_arg, (args, kwargs))
        node = self.rec.node(func, node_args, node_kwargs, val)
        self.rec.user_calls.add(node)
        return self.rec.wrap(val, node, self._device(args, kwargs))

    def call_aliasing_composite(self, func, args, kwargs, aliasing: Aliasing):
        """A kept composite that returns an input or views of inputs in eager (policy.aliasing).
        A result that is the input itself keeps the op's node as its value, as an alias of
        the input (`alias_computed_as`); views have the decomposition recorded (its view
        ops). Writes through the result then reach the input, and writes into the input are
        seen through it, as in eager. MAYBE: the decomposition, run on the tracers in a scope
        whose graph is thrown away, tells which, or that the result is new (the op stays
        whole). That answer may depend on a dynamic size (`sum_to_size(1, 3)` is its input
        at one row): the call is then a view-or-copy choice, so a later write into the input
        or the result has the small sizes traced again. A real tensor argument (a constant)
        is taken as its lifted tracer, which the decomposition may then return."""
        args, kwargs = map_args(self._lifted, (args, kwargs))
        if aliasing is Aliasing.INPUT:
            return self.alias_computed_as(args[0], self.keep_whole(func, args, kwargs))
        if aliasing is Aliasing.VIEWS:
            return self.run_decomposition(func, func.decompose, args, kwargs)
        inputs = [t for t in arg_leaves((args, kwargs)) if isinstance(t, TracerTensor)]
        with self.rec.view_or_copy(inputs[0] if inputs else None) as result:
            found = self._decomposed_on_tracers(func, args, kwargs)
            bases = {id(_base(t)) for t in inputs}
            if isinstance(found, TracerTensor) and any(found is t for t in inputs):
                out = self.alias_computed_as(found, self.keep_whole(func, args, kwargs))
            elif any(isinstance(t, TracerTensor) and id(_base(t)) in bases for t in arg_leaves(found)):
                out = self.run_decomposition(func, func.decompose, args, kwargs)
            else:
                out = self.keep_whole(func, args, kwargs)
            result.append(out)
        return out

    def _lifted(self, a):
        return self.rec.constant(a) if isinstance(a, torch.Tensor) and not isinstance(a, TracerTensor) else a

    def _decomposed_on_tracers(self, func, args, kwargs):
        """The results of `func`'s decomposition on the tracers, recorded nowhere; None
        when the op rejects its arguments (kept whole, its metadata then raises eager's error)."""
        try:
            with self.rec.child_scope(recording=False):
                return self.run_decomposition(func, func.decompose, args, kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError):
            return None

    def alias_computed_as(self, t: TracerTensor, computed: TracerTensor) -> TracerTensor:
        """A tensor that is `t` itself (a write through either reaches the other), whose
        value, until one of them is written, is the node computing `computed`: an operator
        that returns its input keeps its node in the graph, as in torch.export's, while
        capture knows the result aliases the input."""
        alias = self.rec.alias(t)
        self.rec.scope.bind(alias, self.rec.value(computed), _base(t).gp_version)
        return alias

    def kept_composite_meta(self, func, args, kwargs, grads: tuple):
        """A kept composite's output metadata, `grads` saying which of its tensor arguments
        eager would have require grad; None when only its meta kernel can tell."""
        tracers = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, TracerTensor)] \
            if func in CHOOSES_KERNEL_BY_GRAD else []

        def decomposed_meta():
            meta_args, meta_kwargs = map_args(self._meta, (args, kwargs))
            if _symbolic(meta_args):
                out = layer_meta(func, meta_args, meta_kwargs)
                if out is not None:
                    return out
            with as_eager_requires(tracers, grads):
                if static_composites.static_capture(self.rec):
                    try:   # the same answer without recording the insides (static_composites.py)
                        return static_composites.composite_metadata(func, args, kwargs, self)
                    except Exception:
                        pass   # not followed there, or an error the plain path raises as the user should see it
                return self.metadata_by_decomposition(func, func.decompose, args, kwargs)

        deferred = self.rec.deferred
        if deferred is None:
            return self.rec.meta_cache.run(self.kept_key(func, *grads), args, kwargs, decomposed_meta)
        with deferred.metadata_of("kept", (func, grads), args, kwargs) as result:
            result.append(self.rec.meta_cache.run(self.kept_key(func, *grads), args, kwargs, decomposed_meta))
        return result[0]

    @staticmethod
    def kept_key(func, *grads) -> tuple:
        """The meta cache's key for a kept composite's metadata (with which inputs require grad,
        where its kernel chooses by that)."""
        return ("decomposed", func, *grads)

    def metadata_by_decomposition(self, func, decomposition, args, kwargs):
        """`func`'s output metadata from running `decomposition` on the tracers, in a scope
        whose graph is thrown away; None when capture cannot follow it (then its meta kernel
        answers)."""
        try:
            with self.rec.child_scope(recording=False):
                out = self.run_decomposition(func, decomposition, args, kwargs)
        except ConstantMutationError:
            raise        # the kept node would write into the constant at run time: refused, as a direct write is
        except UnsupportedFeatureError:
            return None  # its insides do what capture cannot express; its meta kernel can still answer
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, GraphportError):
                raise
            raise _operator_error(func, e, *map_args(self._meta, (args, kwargs))) from e   # the op's own checks
        if out is NotImplemented:
            return None
        if isinstance(out, tuple):
            out = tuple(out)   # a decomposition may return a named tuple; operators return plain ones
        return pytree.tree_map_only(TracerTensor, lambda t: t.gp_meta, out)

    def mutate(self, func, info, args, kwargs):
        if info.functional is None and custom_ops.is_custom(func):
            return custom_ops.functionalize(self, func, _bind(func._schema, args, kwargs), info.mutated_args)
        if info.functional is None:
            raise UnsupportedFeatureError(
                f"the in-place operator {func} has no functional counterpart graphport knows",
                fix="use the out-of-place form of the operation (for example `x = x.op(...)` instead of `x.op_(...)`)")
        # a write into a buffer reached through another object (a StaticCache layer) is the buffer's
        args = tuple(self.rec.state_tracers.get(id(a), a) if type(a) is torch.Tensor else a for a in args)
        self.run_meta(func, args, kwargs)  # eager's checks (dtype casts, broadcast into self)
        schema = func._schema
        bound = _bind(schema, args, kwargs)
        if func not in _FILLS:   # eager fills even views whose elements share memory
            if info.kind is Kind.INPLACE:
                written, inputs = [args[0]], (args[1:], kwargs)
            else:
                written = [bound[name] for name in info.mutated_args if bound.get(name) is not None]
                inputs = [v for name, v in bound.items() if name not in info.mutated_args]
            self.check_memory_overlap(func, written, inputs, args, kwargs)
        if info.kind is Kind.INPLACE:
            target = args[0]
            if func is aten.copy_.default and _overwrites_input(self.rec, target, args[1]):
                self.write(target, args[1])  # the input's new value is the source itself
                return target
            if func is aten.as_strided_.default and self._computed_here(target):
                return self.restride(target, args, kwargs)
            if func.overloadpacket.__name__ in METADATA_MUTATING:
                raise UnsupportedFeatureError(
                    f"the in-place operator {func} changes a tensor's shape or strides in place",
                    fix=f"use the out-of-place form: `x = x.{func.overloadpacket.__name__.rstrip('_')}(...)`")
            fargs, fkwargs = _with_defaults(schema, info.functional._schema, args, kwargs)
            if func in DRAWS_IN_MEMORY_ORDER:
                self.write(target, self.draw_in_memory_order(info.functional, fargs, fkwargs))
                return target
            self.write(target, self.call(info.functional, fargs, fkwargs), _FILLS.get(func, lambda *a: None)(*args))
            return target
        if info.kind is Kind.OUT:
            outs = [bound[name] for name in info.mutated_args]
            fargs, fkwargs = _unbind(info.functional._schema, bound)
            result = self.call(info.functional, fargs, fkwargs)
            results = result if isinstance(result, (tuple, list)) else (result,)
            for out, value in zip(outs, results):
                self.write(out, value)
            return outs[0] if len(outs) == 1 else tuple(outs)
        # MUTATING: the functional variant returns the op's results then the new values.
        fargs, fkwargs = _unbind(info.functional._schema, bound)
        result = self.call(info.functional, fargs, fkwargs)
        n_returns = len(schema.returns)
        for name, value in zip(info.mutated_args, result[n_returns:]):
            if bound.get(name) is not None:
                self.write(bound[name], value)
        kept = tuple(result[:n_returns])
        return kept[0] if n_returns == 1 else kept

    def check_memory_overlap(self, func, written: list, inputs, args, kwargs) -> None:
        """Eager's memory-overlap error, or a refusal where eager's answer depends on the order
        it writes shared memory (capture/memory_overlap.py)."""
        windows = [w for w in written if isinstance(w, TracerTensor)
                   and any(step.op in STORAGE_ADDRESSED for step in (w.gp_chain or ()))]
        found = memory_overlap.check(func, written, windows, inputs, args, kwargs, base_of=_base, meta_of=self._meta,
                                     is_tracer=lambda a: isinstance(a, TracerTensor))
        if found is None:
            return
        kind, text = found
        if kind == "eager":
            raise OperatorError(f"{func.name()} failed on the example inputs: {text}",
                                fix="this call fails the same way in eager PyTorch: clone() the tensor it reads "
                                    "(or the view it writes) before the in-place operation")
        raise UnsupportedFeatureError(
            f"the program writes in place with {func.name()} where {text}: eager's answer then depends on the "
            "order it writes the elements, which a functional program cannot reproduce",
            fix="clone() the tensor the call reads (or compute the new values out of place) before writing")

    def draw_in_memory_order(self, functional, args, kwargs) -> TracerTensor:
        """The functional form of an in-place draw, on the written tensor permuted so that its
        logical order is its memory order, permuted back (capture/draw_order.py)."""
        order = draw_permutation(self._meta(args[0]))
        if order is None:
            return self.call(functional, args, kwargs)
        permuted = self.call(aten.permute.default, (args[0], order), {}, view=True)
        drawn = self.call(functional, (permuted, *args[1:]), kwargs)
        return self.call(aten.permute.default, (drawn, [order.index(d) for d in range(len(order))]), {}, view=True)

    def _computed_here(self, t) -> bool:
        """Whether `t` is a tensor the code being recorded computed in this scope: not an
        input, a buffer, a constant or a view, and unknown to enclosing scopes."""
        scope = self.rec.scope
        return (isinstance(t, TracerTensor) and t.gp_base is None and id(t) not in self.rec.placeholder_tracers
                and scope.bound_here(t) is not None and (scope.parent is None or scope.parent.find(t) is None))

    def restride(self, target: TracerTensor, args, kwargs) -> TracerTensor:
        """`as_strided_` on a tensor computed here: composite kernels restride their fresh
        outputs this way (adaptive_avg_pool2d's channels-last result). As torch's
        functionalization does, the tensor stands for `as_strided` of its value from now on;
        its data is unchanged, so views taken before keep theirs."""
        self.rec.written(target)
        val = self.run_meta(aten.as_strided.default, args, kwargs, cache=False)
        node_args, node_kwargs = pytree.tree_map(self.rec.graph_arg, (args, kwargs))
        node = self.rec.node(aten.as_strided.default, node_args, node_kwargs, val)
        node.meta.setdefault(DEVICE_KEY, target.device)
        with _torch.skip_torch_dispatch():
            torch.Tensor.as_strided_(target, *args[1:], **kwargs)
        target.gp_meta = val
        self.rec.scope.bind(target, node, target.gp_version)
        return target

    def write(self, target, value: TracerTensor, fill: Any = None) -> None:
        """Make `target` hold `value` from now on, as an in-place write would (`fill`: the
        one value every element takes, for fills)."""
        self.rec.written(target)
        constant = self.rec.constant_target(target) if not isinstance(target, TracerTensor) \
            else self.rec.lifted_constant(target)
        if constant is not None:
            raise ConstantMutationError(
                "the program writes in place into a tensor that is not an input, parameter, buffer or "
                "a tensor computed inside forward",
                fix="register the tensor as a buffer (self.register_buffer(name, tensor)) so its update is captured",
                torch_phrase=f"Constant {constant} is mutated in the forward method. Pls register it as buffer")
        if tuple(value.shape) != tuple(target.shape):
            raise UnsupportedFeatureError(
                f"an out= or in-place write resizes a tensor from {list(target.shape)} to {list(value.shape)}",
                fix="assign the result to a new variable instead of writing into an existing tensor")
        node = self.rec.value(value)
        if value.dtype != target.dtype:
            node = self.rec.emit(aten._to_copy.default, (node,), {"dtype": target.dtype})
        try:
            self.rec.assign(target, node, self.rec.graph_arg(fill) if fill is not None else None)
        except ViewWriteError as e:
            raise UnsupportedFeatureError(
                f"the program writes in place through a view graphport cannot write back: {e.what}", fix=e.fix) from None
        except ViewInverseMismatch as e:
            raise InternalError(f"writing back through a view went wrong: {e}", find_location=True) from e
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, GraphportError):
                raise
            # the write itself passed eager's checks (run_meta above): its inverse is graphport's
            raise InternalError(f"writing back through a view of {target.gp_label} failed: "
                                f"{type(e).__name__}: {str(e).strip()[:300]}", find_location=True) from e


# Composite ops returning a view of their input or a copy depending on its strides.
_CHOOSES_VIEW_OR_COPY = frozenset({aten.reshape.default})

_DATA_DEPENDENT = data_dependent_rules()   # .item(), nonzero, ... (capture/data_dependent.py)


# Ops whose size argument may say -1 for "the rest": a symbolic capture records the size
# the -1 stands for, so the graph does not depend on whether the program spelled a size out
# (torch's reshape does at some sizes and not at others) and a trace at a pinned size
# compares equal to the general one.
_INFERRED_SIZE = frozenset({aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default})


def _spelled_out(size, shape):
    if not isinstance(size, (list, tuple)) or len(size) != len(shape):
        return size
    return type(size)(shape[i] if isinstance(s, int) and not isinstance(s, bool) and s == -1 else s
                      for i, s in enumerate(size))


def _overwrites_input(rec: Recorder, dst, src) -> bool:
    """`buf.copy_(x)` on a whole input or buffer: its new value is x, no copy node needed."""
    return (isinstance(src, TracerTensor) and isinstance(dst, TracerTensor) and dst.gp_base is None
            and id(dst) in rec.placeholder_tracers
            and src.shape == dst.shape and src.dtype == dst.dtype and src.device == dst.device)


# In-place fills: the one value they give every element (a write eager allows even through
# views whose elements share memory).
_FILLS = {aten.fill_.Scalar: lambda t, value: value, aten.fill_.Tensor: lambda t, value: value,
          aten.zero_.default: lambda t: 0}


def _base(t: TracerTensor) -> TracerTensor:
    return t.gp_base if t.gp_base is not None else t


def _masks(args) -> bool:
    """Whether an `index` call selects with a boolean mask (its result size is data-dependent)."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _bind(schema, args, kwargs) -> dict:
    bound = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            bound[a.name] = None
    return bound


def _with_defaults(inplace, functional, args, kwargs) -> tuple[tuple, dict]:
    """The in-place call's arguments for its functional counterpart, with the values of the
    arguments the caller left at the in-place schema's default where the functional schema
    has none (`x.bernoulli_(0.5)` reaches us without p; `bernoulli.p` requires it)."""
    defaults = {a.name: a.default_value for a in inplace.arguments if a.has_default_value()}
    args, kwargs = list(args), dict(kwargs)
    for i, a in enumerate(functional.arguments):
        given = (i < len(args) and not a.kwarg_only) or a.name in kwargs
        if given or a.has_default_value() or a.name not in defaults:
            continue
        if a.kwarg_only:
            kwargs[a.name] = defaults[a.name]
        elif i == len(args):
            args.append(defaults[a.name])
    return tuple(args), kwargs


def _unbind(schema, bound: dict) -> tuple[tuple, dict]:
    args, kwargs = [], {}
    for a in schema.arguments:
        if a.name not in bound:
            continue
        if a.kwarg_only:
            kwargs[a.name] = bound[a.name]
        else:
            args.append(bound[a.name])
    return tuple(args), kwargs


def _operator_error(func, e: Exception, meta_args: tuple, meta_kwargs: dict) -> GraphportError:
    """The operator rejected its arguments on the capture's symbolic sizes. Eager is asked at the
    example's concrete layout before the error says it fails there too."""
    message = str(e).strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__
    in_eager = runs_at_the_example(func, meta_args, meta_kwargs)
    if in_eager:
        return UnsupportedFeatureError(
            f"{func.name()} fails on the symbolic sizes graphport worked out ({message}), but eager PyTorch runs it "
            "at the example's sizes: graphport cannot yet show this call valid over the declared ranges",
            fix="mark the dimensions reaching this call static, or narrow their Dims, to export for now")
    return OperatorError(   # not "on the example": a small-size proof traces other sizes
        f"{func.name()} failed: {message}",
        fix="this call fails the same way in eager PyTorch; check the shapes and dtypes reaching it"
            if in_eager is False else "check the shapes and dtypes reaching this call")


def _no_meta_kernel(func, error: Exception) -> UnsupportedOperatorError:
    name = func.name().split(".")[0]
    return UnsupportedOperatorError(
        f"the operator {name} has no meta (fake) kernel, so graphport cannot compute its output shape "
        f"without running it ({str(error).splitlines()[0][:200] if str(error) else type(error).__name__})",
        fix=f'register a shape function for it:\n'
            f'    @torch.library.register_fake("{name}")\n'
            f'    def _(x, ...):\n'
            f'        return torch.empty_like(x)  # a tensor with the output\'s shape and dtype')

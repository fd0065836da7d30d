"""Every private PyTorch module and function graphport touches, reached through this module.

Written for torch 2.13. These names are not covered by torch's compatibility promise, so
when torch moves one of them, this file is the one place to change. Public torch APIs
(`torch.fx`, `torch.library`, `torch.SymInt`, ...) are used directly elsewhere, and so are
the private attributes of public objects that every torch extension reads (an operator's
`_schema`, a module's `_parameters` / `_buffers`, a higher-order operator's `py_impl`).
"""
from __future__ import annotations

import contextlib
import warnings

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _disable_current_modes as outside_dispatch_modes

WRITTEN_FOR = "2.13"

if not torch.__version__.startswith(WRITTEN_FOR):
    warnings.warn(f"graphport was written for torch {WRITTEN_FOR}.x; this is torch {torch.__version__}, "
                  "whose private APIs graphport relies on (graphport/_torch.py) may differ", stacklevel=2)

OpOverload = torch._ops.OpOverload
HigherOrderOperator = torch._ops.HigherOrderOperator
disabled_torch_function_impl = torch._C._disabled_torch_function_impl
# Dispatch below autograd: composite ops reach a dispatch mode whole, as export wants them.
below_autograd = torch._C._AutoDispatchBelowADInplaceOrView
make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
# Calls on a tensor subclass that skip its __torch_dispatch__ (to set a wrapper's own metadata).
skip_torch_dispatch = torch._C._DisableTorchDispatch
# Within: operators run their C++ kernels even where torch has a Python meta kernel or reference.
cpp_kernels = torch._C._DisablePythonDispatcher
# Whether any module hook is registered process-wide (nn.Module.__call__ then runs them).
has_global_module_hooks = torch.nn.modules.module._has_any_global_hook

__all__ = ["OpOverload", "HigherOrderOperator", "TorchDispatchMode", "enable_python_dispatcher", "pytree",
           "below_autograd", "make_wrapper_subclass", "disabled_torch_function_impl", "has_kernel",
           "is_composite_implicit", "has_meta_kernel", "higher_order_operators", "compiler_flags",
           "set_compiler_flags", "hop_entry_module", "decomposition_table", "python_reference", "while_loop",
           "scan", "outside_dispatch_modes", "core_aten_decompositions", "auto_functionalized", "cpu_backend_kernels",
           "fake_kernel", "fake_kernel_context", "composite_implicit_op_names", "is_core_aten",
           "skip_torch_dispatch", "cpp_kernels", "lazy_graph_module", "has_global_module_hooks", "fake_class",
           "registered_effect"]

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd
_META_CAPABLE = (torch._C.DispatchKey.Meta, torch._C.DispatchKey.CompositeExplicitAutograd,
                 torch._C.DispatchKey.CompositeExplicitAutogradNonFunctional, _CIA)


def has_kernel(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel(op.name())


def is_composite_implicit(op: OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), _CIA) or _CIA in op.py_kernels


def has_meta_kernel(op: OpOverload) -> bool:
    """Whether the op can compute on meta tensors: a Meta or composite kernel, in C++ or
    Python (torch.library's register_fake registers a Meta kernel)."""
    custom = _custom_op_definition(op)
    if custom is not None:   # torch.library.custom_op: a fake kernel is registered with register_fake
        return custom._abstract_fn is not None
    name = op.name()
    if any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) or key in op.py_kernels
           for key in _META_CAPABLE):
        return True
    return False


def _custom_op_definition(op: OpOverload):
    from torch._library.custom_ops import OPDEFS
    return OPDEFS.get(op._schema.name)


def decomposition_table() -> dict:
    """torch's own decompositions (`torch._decomp`): op semantics written for symbolic sizes."""
    import torch._decomp
    return torch._decomp.decomposition_table


def core_aten_decompositions() -> dict:
    """torch's table lowering non-composite ops to the Core ATen opset (op semantics)."""
    import torch._decomp
    return torch._decomp._core_aten_decompositions_post_autograd()


def composite_implicit_op_names() -> list[str]:
    """Qualified names (`aten::linear`, `ns::op.overload`) of every op with a C++
    CompositeImplicitAutograd kernel registered so far."""
    return torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")


def is_core_aten(op: OpOverload) -> bool:
    """Whether torch's registry tags the op as part of the Core ATen opset."""
    return torch.Tag.core in op.tags


@contextlib.contextmanager
def cpu_backend_kernels(enabled: bool):
    """Whether composite kernels and decompositions may pick mkldnn / nnpack kernels."""
    saved = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(enabled)
    try:
        with torch.backends.nnpack.flags(enabled=enabled):
            yield
    finally:
        torch._C._set_mkldnn_enabled(saved)


def fake_kernel(op: OpOverload):
    """The Python fake kernel registered for a custom op (torch.library.register_fake /
    impl_abstract), or None."""
    from torch._library.simple_registry import singleton
    return singleton.find(op._schema.name).fake_impl.kernel


def fake_kernel_context(getter):
    """Make `torch.library.get_ctx()` answer `getter()` inside a fake kernel."""
    from torch._library.fake_impl import set_ctx_getter
    return set_ctx_getter(getter)


def auto_functionalized() -> HigherOrderOperator:
    """torch's higher-order operator for a mutating custom op made functional."""
    import torch._higher_order_ops.auto_functionalize as af
    return af.auto_functionalized


def python_reference(op: OpOverload):
    """torch's Python reference implementation (`torch._refs`) of an op's packet, or None."""
    import torch._refs
    return getattr(torch._refs, op.overloadpacket.__name__, None)


def higher_order_operators() -> list[HigherOrderOperator]:
    """Every higher-order operator torch has created so far (they register as imported)."""
    return list(torch._ops._higher_order_ops.values())


def compiler_flags() -> tuple[bool, bool]:
    """(is_exporting, is_compiling) as `torch.compiler` reports them."""
    import torch.compiler as tc
    return tc._is_exporting_flag, tc._is_compiling_flag


def set_compiler_flags(exporting: bool, compiling: bool) -> None:
    import torch.compiler as tc
    tc._is_exporting_flag, tc._is_compiling_flag = exporting, compiling


def hop_entry_module():
    """The module whose `_hop_compile_and_call` every Python entry point of a control-flow
    operator (torch.cond, while_loop, map, scan) funnels through outside torch.compile."""
    import torch._higher_order_ops.utils as hop_utils
    return hop_utils


def lazy_graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A GraphModule whose Python code is generated on first call or first read of `.code`,
    not when it is made (export and load make graphs that are often printed, saved or
    rebuilt before they ever run)."""
    from torch.fx._lazy_graph_module import _LazyGraphModule
    from .graph_code import keyword_safe
    return _LazyGraphModule(root, keyword_safe(graph), class_name="GraphModule")


def rename_node(node: torch.fx.Node, candidate: str) -> str:
    """Give `node` the name `candidate` (made unique in its graph, as fx names new nodes);
    returns the name it got."""
    node._rename(candidate)
    return node.name


def fake_class(qualified_name: str):
    """The fake class registered with `torch._library.register_fake_class` for the TorchBind
    class `qualified_name` (`__torch__.torch.classes.ns.Name`), or None."""
    from torch._library.fake_class_registry import find_fake_class
    return find_fake_class(qualified_name)


def registered_effect(op) -> bool:
    """Whether torch's effect registry marks the operator (an OpOverload or a higher-order
    operator) as having an ordered side effect: `call_torchbind`, `aten._print`, custom ops
    taking a TorchBind object, and ops registered effectful by their authors."""
    import torch._higher_order_ops.effects as effects
    if isinstance(op, OpOverload) and effects.has_aliasing(op):
        return False
    return effects._get_effect(op) is not None



def dispatch_modes() -> list:
    """The TorchDispatchModes active now, outermost first (empty fast where there are none)."""
    if torch._C._len_torch_dispatch_stack() == 0:
        return []
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    return _get_current_dispatch_mode_stack()


def dispatch_mode_count() -> int:
    """How many TorchDispatchModes are active now (one C call: checked on every torch function)."""
    return torch._C._len_torch_dispatch_stack()


__all__ += ["dispatch_modes", "dispatch_mode_count"]


def elementwise_output_order(*tensors: torch.Tensor) -> list[int]:
    """The logical-to-physical order of dimensions torch's pointwise references give their
    result, for operands already broadcast to one shape (the rule of their meta kernels)."""
    return torch._prims_common.compute_elementwise_output_logical_to_physical_perm(*tensors)[0]


__all__ += ["elementwise_output_order"]

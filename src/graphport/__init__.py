"""graphport: sound ahead-of-time whole-graph capture of PyTorch programs.

The public API mirrors `torch.export`, so switching is a change of import.
"""
import sys
import types

from .errors import (
    CommandLineError,
    ArtifactError,
    CallSignatureError,
    ConstantMutationError,
    ConstraintViolationError,
    FlatArgsError,
    ControlFlowError,
    DataDependentError,
    GraphportError,
    InputGuardError,
    InputMismatchError,
    InputStructureError,
    InternalError,
    InvalidDimError,
    RuntimeCheckError,
    OperatorError,
    PythonEffectError,
    UnsupportedFeatureError,
    UnsupportedInputError,
    UnsupportedOperatorError,
    UserError,
)
from .logs import configure_from_env as _configure_logs_from_env

_configure_logs_from_env()

# Everything else loads on first use (PEP 562), so that `import graphport` -- and with it the
# `graphport` command's --help and argument checks -- does not wait for torch to import.
_LAZY = {
    "export": ".export", "draft_export": ".draft", "DraftExportReport": ".draft",
    "ExportedProgram": ".program", "ModuleCallEntry": ".program", "ModuleCallSignature": ".program",
    "ExportGraphSignature": ".signature", "ExportBackwardSignature": ".signature", "InputKind": ".signature", "InputSpec": ".signature",
    "OutputKind": ".signature", "OutputSpec": ".signature", "CustomObjArgument": ".signature",
    "TokenArgument": ".signature",
    "register_dataclass": ".pytree",
    "refine_dynamic_shapes_from_suggested_fixes": ".shapes.check",
    "AdditionalInputs": ".shapes.dims", "Dim": ".shapes.dims", "ShapesCollection": ".shapes.dims",
    "dims": ".shapes.dims",
    "verify": ".passes.verifier",
    "cond": ".control_flow", "map": ".control_flow", "scan": ".control_flow", "while_loop": ".control_flow",
    "CheckReport": ".check", "check": ".check",
    "load": ".serde", "save": ".serde",
    "unflatten": ".unflatten", "FlatArgsAdapter": ".unflatten", "UnflattenedModule": ".unflatten",
    "default_decompositions": ".ops.decompositions", "CustomDecompTable": ".ops.decompositions",
    "configure_logging": ".logs", "on_progress": ".progress",
    "PythonEffect": ".audit", "PythonEffectWarning": ".audit",
}


def __getattr__(name: str):
    import importlib
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("graphport")
        except PackageNotFoundError:   # a source tree that was never installed
            return "0+unknown"
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value   # later lookups do not come back here
        return value
    raise AttributeError(f"module 'graphport' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """`graphport.export`, `graphport.check` and `graphport.unflatten` name both a submodule
    and the function it defines. Importing the submodule makes the import system set the
    package attribute to the module; the function is what users mean, so it is kept."""

    def __setattr__(self, name, value):
        if name in _SHADOWED and isinstance(value, types.ModuleType) and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


_SHADOWED = {"export", "check", "unflatten"}
sys.modules[__name__].__class__ = _Package


__all__ = [
    "export", "draft_export", "DraftExportReport", "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes", "ExportedProgram", "ExportGraphSignature", "ExportBackwardSignature", "InputKind", "InputSpec", "OutputKind",
    "OutputSpec", "CustomObjArgument", "TokenArgument", "ModuleCallEntry", "ModuleCallSignature", "register_dataclass", "verify",
    "GraphportError", "UserError", "DataDependentError", "UnsupportedOperatorError",
    "UnsupportedInputError", "InputMismatchError", "InputGuardError", "InputStructureError", "FlatArgsError", "InvalidDimError", "OperatorError", "UnsupportedFeatureError",
    "ConstraintViolationError", "ConstantMutationError", "InternalError",
    "ControlFlowError", "cond", "map", "while_loop", "scan",
    "check", "CheckReport", "CommandLineError",
    "save", "load", "ArtifactError",
    "unflatten", "FlatArgsAdapter", "UnflattenedModule", "CallSignatureError", "RuntimeCheckError",
    "default_decompositions", "CustomDecompTable", "configure_logging", "on_progress", "__version__",
    "PythonEffect", "PythonEffectError", "PythonEffectWarning",
]

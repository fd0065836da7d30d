"""graphport: sound ahead-of-time whole-graph capture of PyTorch programs.

The public API mirrors `torch.export`, so switching is a change of import.
"""
from .errors import (
    ConstraintViolationError,
    DataDependentError,
    GraphportError,
    InputGuardError,
    InputMismatchError,
    InputStructureError,
    InternalError,
    InvalidDimError,
    OperatorError,
    UnsupportedFeatureError,
    UnsupportedInputError,
    UnsupportedOperatorError,
    UserError,
)
from .export import export
from .program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec
from .pytree import register_dataclass
from .shapes.check import refine_dynamic_shapes_from_suggested_fixes
from .shapes.dims import Dim, ShapesCollection, dims
from .passes.verifier import verify
from .ops.decompositions import default_decompositions

__all__ = [
    "export", "Dim", "dims", "ShapesCollection", "refine_dynamic_shapes_from_suggested_fixes", "ExportedProgram", "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind",
    "OutputSpec", "ModuleCallEntry", "ModuleCallSignature", "register_dataclass", "verify",
    "GraphportError", "UserError", "DataDependentError", "UnsupportedOperatorError",
    "UnsupportedInputError", "InputMismatchError", "InputGuardError", "InputStructureError", "InvalidDimError", "OperatorError", "UnsupportedFeatureError",
    "ConstraintViolationError", "InternalError",
    "default_decompositions",
]

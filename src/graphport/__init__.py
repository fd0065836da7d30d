"""graphport: sound ahead-of-time whole-graph capture of PyTorch programs.

The public API mirrors `torch.export`, so switching is a change of import.
"""
from .errors import (
    CommandLineError,
    ArtifactError,
    CallSignatureError,
    ConstraintViolationError,
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
from .audit import PythonEffect, PythonEffectWarning
from .export import export
from .draft import DraftExportReport, draft_export
from .program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
from .signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec
from .pytree import register_dataclass
from .shapes.check import refine_dynamic_shapes_from_suggested_fixes
from .shapes.dims import AdditionalInputs, Dim, ShapesCollection, dims
from .passes.verifier import verify
from .control_flow import cond, map, scan, while_loop
from .check import CheckReport, check
from .serde import load, save
from .unflatten import unflatten
from .ops.decompositions import default_decompositions

__all__ = [
    "export", "draft_export", "DraftExportReport", "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes", "ExportedProgram", "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind",
    "OutputSpec", "ModuleCallEntry", "ModuleCallSignature", "register_dataclass", "verify",
    "GraphportError", "UserError", "DataDependentError", "UnsupportedOperatorError",
    "UnsupportedInputError", "InputMismatchError", "InputGuardError", "InputStructureError", "InvalidDimError", "OperatorError", "UnsupportedFeatureError",
    "ConstraintViolationError", "InternalError",
    "ControlFlowError", "cond", "map", "while_loop", "scan",
    "check", "CheckReport", "CommandLineError",
    "save", "load", "ArtifactError",
    "unflatten", "CallSignatureError", "RuntimeCheckError",
    "default_decompositions",
    "PythonEffect", "PythonEffectError", "PythonEffectWarning",
]

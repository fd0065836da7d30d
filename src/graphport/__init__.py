"""graphport: sound ahead-of-time whole-graph capture of PyTorch programs.

The public API mirrors `torch.export`, so switching is a change of import.
"""
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
    UnsupportedFeatureError,
    UnsupportedInputError,
    UnsupportedOperatorError,
    UserError,
)
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
from .unflatten import FlatArgsAdapter, UnflattenedModule, unflatten
from .ops.decompositions import CustomDecompTable, default_decompositions

__all__ = [
    "export", "draft_export", "DraftExportReport", "Dim", "dims", "ShapesCollection", "AdditionalInputs", "refine_dynamic_shapes_from_suggested_fixes", "ExportedProgram", "ExportGraphSignature", "InputKind", "InputSpec", "OutputKind",
    "OutputSpec", "ModuleCallEntry", "ModuleCallSignature", "register_dataclass", "verify",
    "GraphportError", "UserError", "DataDependentError", "UnsupportedOperatorError",
    "UnsupportedInputError", "InputMismatchError", "InputGuardError", "InputStructureError", "FlatArgsError", "InvalidDimError", "OperatorError", "UnsupportedFeatureError",
    "ConstraintViolationError", "ConstantMutationError", "InternalError",
    "ControlFlowError", "cond", "map", "while_loop", "scan",
    "check", "CheckReport", "CommandLineError",
    "save", "load", "ArtifactError",
    "unflatten", "FlatArgsAdapter", "UnflattenedModule", "CallSignatureError", "RuntimeCheckError",
    "default_decompositions", "CustomDecompTable",
]

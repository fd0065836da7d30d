"""The two exporters side by side: the same user code runs against each (torch.export is
the oracle). Tests take one through the `ex` fixture (conftest.py)."""
from __future__ import annotations

import types

import torch
import torch.export.passes

import graphport as gp
import graphport.passes

EXPORTERS = {
    "graphport": types.SimpleNamespace(
        export=gp.export, Dim=gp.Dim, draft_export=gp.draft_export, ShapesCollection=gp.ShapesCollection,
        AdditionalInputs=gp.AdditionalInputs, refine=gp.refine_dynamic_shapes_from_suggested_fixes,
        unflatten=gp.unflatten, save=gp.save, load=gp.load, cond=gp.cond,
        default_decompositions=gp.default_decompositions, register_dataclass=gp.register_dataclass,
        move_to_device_pass=graphport.passes.move_to_device_pass, CustomDecompTable=gp.CustomDecompTable,
        suffix=".gport"),
    "torch": types.SimpleNamespace(
        export=torch.export.export, Dim=torch.export.Dim, draft_export=torch.export.draft_export,
        ShapesCollection=torch.export.ShapesCollection, AdditionalInputs=torch.export.AdditionalInputs,
        refine=torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes,
        unflatten=torch.export.unflatten, save=torch.export.save, load=torch.export.load, cond=torch.cond,
        default_decompositions=torch.export.default_decompositions,
        register_dataclass=torch.export.register_dataclass,
        move_to_device_pass=torch.export.passes.move_to_device_pass,
        CustomDecompTable=torch.export.CustomDecompTable, suffix=".pt2"),
}

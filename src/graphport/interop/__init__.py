"""Hand-off to torch.export's ecosystem: convert programs to and from torch.export.ExportedProgram.

The one part of graphport allowed to import torch's export internals (FakeTensor, ShapeEnv,
torch.export itself), so it is imported on demand (`import graphport.interop`), never by
`import graphport`.
"""
from .from_torch import from_torch
from .to_torch import to_torch

__all__ = ["to_torch", "from_torch"]

"""ExportedProgram: the graph, its signature, its state, and the ways to use it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import sympy
import torch
import torch.fx as fx

from .errors import InternalError
from .values import plain_values
from .passes.verifier import TrainingIRVerifier, Verifier
from .shapes.contract import ShapeContract
from .shapes.node import display_names
from .signature import ExportGraphSignature, InputKind


@dataclass
class ModuleCallSignature:
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    in_spec: Any = None          # pytree TreeSpec of (args, kwargs)
    out_spec: Any = None         # pytree TreeSpec of the outputs
    forward_arg_names: list[str] | None = None
    # every keyword argument binds a named parameter (none lands in **kwargs, whose order the
    # program could observe): callers may pass them in any order
    keywords_by_name: bool = False
    # buffers a preserved call wrote: target -> the node of the value it left there, which a later
    # call of the program reads as that buffer's state (a module called several times)
    state_writes: dict[str, str] = field(default_factory=dict)


@dataclass
class ModuleCallEntry:
    fqn: str
    signature: ModuleCallSignature | None = None
    alias_of: str | None = None   # this path reaches the same module object as that earlier path


class ExportedProgram:
    """A captured program: one functional ATen graph plus everything needed to run it.

    Every field is given to the constructor, which checks that they fit together (the
    IR contract itself is the verifier's: graphport.verify)."""

    graph_module: fx.GraphModule
    graph_signature: ExportGraphSignature
    state_dict: dict[str, torch.Tensor]           # parameters and persistent buffers, by name
    range_constraints: dict                       # symbol or derived expression -> ValueRange
    module_call_graph: list[ModuleCallEntry]
    example_inputs: tuple[tuple, dict] | None
    constants: dict[str, Any]                     # lifted constants, non-persistent buffers, custom objects
    input_paths: list[str]                        # printable path of each flat user input
    input_aliases: dict[int, int]                 # flat input index -> earlier index it must be the same tensor as
    shape_contract: ShapeContract | None          # shape facts of a dynamic program
    shape_report: list[str]                       # dims that became static or were narrowed, and why
    python_effects: list                          # graphport.PythonEffect: what the program's Python did
                                                  # at export that the graph does not carry (not saved)

    def __init__(self, graph_module: fx.GraphModule, graph_signature: ExportGraphSignature,
                 state_dict: dict[str, torch.Tensor], range_constraints: dict,
                 module_call_graph: list[ModuleCallEntry], example_inputs: tuple[tuple, dict] | None = None,
                 constants: dict[str, torch.Tensor] | None = None, input_paths: list[str] | None = None,
                 input_aliases: dict[int, int] | None = None, shape_contract: ShapeContract | None = None,
                 shape_report: list[str] | None = None, verifiers: list[type[Verifier]] | None = None,
                 python_effects: list | None = None):
        self.graph_module = graph_module
        self.graph_signature = graph_signature
        self.state_dict = state_dict
        self.range_constraints = range_constraints
        self.module_call_graph = module_call_graph
        self.example_inputs = example_inputs
        self.constants = constants or {}
        self.input_paths = input_paths or []
        self.input_aliases = input_aliases or {}
        self.shape_contract = shape_contract
        self.shape_report = shape_report or []
        self._verifiers = list(verifiers or [TrainingIRVerifier])
        self.python_effects = list(python_effects or [])
        self._validate()

    def _validate(self) -> None:
        if not isinstance(self.graph_module, fx.GraphModule):
            raise InternalError(f"graph_module must be a torch.fx.GraphModule, got {type(self.graph_module)}")
        if not self.module_call_graph or self.module_call_graph[0].fqn != "":
            raise InternalError("module_call_graph must start with the root module's entry")
        for spec in self.graph_signature.input_specs:
            if spec.kind is InputKind.PARAMETER and spec.target not in self.state_dict:
                raise InternalError(f"parameter {spec.target} has no entry in state_dict")
            if spec.kind is InputKind.BUFFER and spec.target not in self.state_dict \
                    and spec.target not in self.constants:
                raise InternalError(f"buffer {spec.target} has no entry in state_dict or constants")
            if spec.kind is InputKind.CONSTANT_TENSOR and spec.target not in self.constants:
                raise InternalError(f"constant {spec.target} has no entry in constants")

    @property
    def verifiers(self) -> list[type[Verifier]]:
        """The verifier classes that check this program (`validate()` runs them)."""
        return list(self._verifiers)

    @property
    def verifier(self) -> type[Verifier]:
        return self._verifiers[0]

    @property
    def dialect(self) -> str:
        """torch.export's name of the program's operator level: "TRAINING" as exported,
        "ATEN" after run_decompositions()."""
        return self._verifiers[0].dialect

    @property
    def tensor_constants(self) -> dict[str, torch.Tensor]:
        """The lifted constants and non-persistent buffers (torch.export's name for `constants`)."""
        return self.constants

    def validate(self) -> None:
        """Check the program against the IR contract with each of its verifiers (raises
        InternalError on a violation): after editing `graph_module` by hand, for instance."""
        for verifier in self._verifiers:
            verifier().check(self)

    @property
    def graph(self) -> fx.Graph:
        return self.graph_module.graph

    @property
    def call_spec(self) -> ModuleCallSignature:
        return self.module_call_graph[0].signature

    def parameters(self) -> Iterator[torch.Tensor]:
        for _, p in self.named_parameters():
            yield p

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name in self.graph_signature.parameters:
            yield name, self.state_dict[name]

    def buffers(self) -> Iterator[torch.Tensor]:
        for _, b in self.named_buffers():
            yield b

    def named_buffers(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name in self.graph_signature.buffers:
            yield name, self.state_dict[name] if name in self.state_dict else self.constants[name]

    def module(self) -> torch.nn.Module:
        """An nn.Module that runs the graph and checks each call's inputs against the capture."""
        from .runtime import ExportedModule
        return ExportedModule(self)

    def run_decompositions(self, decomp_table: dict | None = None,
                           decompose_custom_triton_ops: bool = False) -> "ExportedProgram":
        """A new program with the operators of `decomp_table` expanded: by default the Core
        ATen table (`graphport.default_decompositions()`); `{}` expands nothing. This program
        is left untouched."""
        from .passes.decompose import run_decompositions
        return run_decompositions(self, decomp_table, decompose_custom_triton_ops)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("an ExportedProgram is not callable; call ep.module()(*args) instead")

    def __str__(self) -> str:
        names = self.shape_contract.display_symbols() if self.shape_contract is not None else {}
        with plain_values(self.graph_module), display_names(names):
            body = self.graph_module.print_readable(print_output=False, colored=False).replace("\n", "\n    ")
        signature = str(self.graph_signature).replace("\n", "\n    ")
        ranges = {sympy.sympify(k).xreplace(names): v for k, v in self.range_constraints.items()}
        return (f"ExportedProgram:\n    {body}\nGraph signature: \n    {signature}\n"
                f"Range constraints: {ranges}\n")

    def __repr__(self) -> str:
        return str(self)

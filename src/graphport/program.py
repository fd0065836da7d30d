"""ExportedProgram: the graph, its signature, its state, and the ways to use it.

A program is a record: every field is given to its constructor by keyword, and the
constructor is the one way a program comes to be (export, run_decompositions, load,
from_torch, move_to_device_pass all call it). It checks the fields against the IR
contract with the program's verifiers and finishes the nodes' metadata, so a program's
`node.meta["val"]` is the same whichever way it was made. A program is not changed after
that: a transformation returns a new record (`ep.replace(...)`, `run_decompositions`).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import torch
import torch.fx as fx

from . import _torch
from .errors import UnsupportedFeatureError, UnsupportedInputError
from .values import finish_metadata, module_copy, plain_copy
from .passes.verifier import TrainingIRVerifier, Verifier
from .signature import ExportGraphSignature

if TYPE_CHECKING:   # a static program's load and call do not import the shape algebra (sympy)
    from .shapes.contract import ShapeContract
    from .shapes.env import ShapeEnv

# A field with this metadata is not part of the artifact: `gp.save` leaves it out and a loaded
# program has its default (tests/test_program_record.py checks every other field is written).
TRANSIENT = {"transient": True}


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


@dataclass(kw_only=True, eq=False, repr=False)
class ExportedProgram:
    """A captured program: one functional ATen graph plus everything needed to run it.

    Built only by keyword (`ExportedProgram(graph_module=..., ...)`), which verifies it
    against the IR contract with each of `verifiers` and finishes its nodes' metadata; not
    changed afterwards (`replace` makes a new one). `range_constraints` is derived from
    `shape_contract`; `shape_env` is the environment of the graph's symbolic sizes, which
    this program owns: a transformation that reasons about sizes forks it."""

    graph_module: fx.GraphModule
    graph_signature: ExportGraphSignature
    state_dict: dict[str, torch.Tensor]           # parameters and persistent buffers, by name
    module_call_graph: list[ModuleCallEntry]
    example_inputs: tuple[tuple, dict] | None = None
    # lifted constants, non-persistent buffers, custom objects (torch.classes)
    constants: dict[str, Any] = field(default_factory=dict)
    input_paths: list[str] = field(default_factory=list)       # printable path of each flat user input
    input_aliases: dict[int, int] = field(default_factory=dict)  # flat input index -> earlier index, same tensor
    shape_contract: ShapeContract | None = None   # shape facts of a dynamic program
    shape_env: ShapeEnv | None = None             # the symbols of the graph's values (None: all static)
    shape_report: list[str] = field(default_factory=list)      # dims made static or narrowed, and why
    # the IR levels the program is checked at: TrainingIRVerifier as exported, another after
    # lowering; written as the first one's dialect name (the "dialect" key, for lowered programs)
    verifiers: tuple[type[Verifier], ...] = field(default=(TrainingIRVerifier,), metadata={"written_as": "dialect"})
    # graphport.PythonEffect: what the program's Python did at export that the graph does not carry
    python_effects: list = field(default_factory=list, metadata=TRANSIENT)
    # draft_export's report on how the program was exported (torch's `ep._report`)
    draft_report: Any = field(default=None, metadata=TRANSIENT)

    def __post_init__(self) -> None:
        self.verifiers = tuple(self.verifiers)
        self.python_effects = list(self.python_effects)
        self.validate()
        finish_metadata(self.graph_module)
        object.__setattr__(self, "_built", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_built"):
            object.__setattr__(self, name, value)
        elif name == "example_inputs":   # torch.export allows this one, checked as it checks it
            object.__setattr__(self, name, _checked_example_inputs(value, self.call_spec.in_spec))
        else:
            raise UnsupportedFeatureError(
                f"an ExportedProgram is not changed after it is built, so its {name} cannot be set",
                fix=f"make a new program with it: ep = ep.replace({name}=...)",
                torch_phrase=f"Unable to set ExportedProgram's {name} attribute.")

    def __delattr__(self, name: str) -> None:
        raise UnsupportedFeatureError(f"an ExportedProgram is not changed after it is built, so its {name} "
                                      "cannot be deleted", fix=f"make a new program: ep = ep.replace({name}=...)")

    def __deepcopy__(self, memo: dict) -> "ExportedProgram":
        """An independent program built from deep copies of the fields, its nodes keeping their
        names (the signature names the placeholders)."""
        fields = {f.name: module_copy(self.graph_module, memo) if f.name == "graph_module"
                  else copy.deepcopy(getattr(self, f.name), memo) for f in dataclasses.fields(self)}
        return type(self)(**fields)

    def replace(self, **changes: Any) -> "ExportedProgram":
        """A new program with `changes` to these fields, built (and so verified) as any other."""
        return dataclasses.replace(self, **changes)

    @property
    def range_constraints(self) -> dict:
        """torch.export's range of each size symbol and derived dimension, from the shape contract."""
        return self.shape_contract.range_constraints() if self.shape_contract is not None else {}

    @property
    def verifier(self) -> type[Verifier]:
        return self.verifiers[0]

    @property
    def dialect(self) -> str:
        """torch.export's name of the program's operator level: "TRAINING" as exported,
        "ATEN" after run_decompositions()."""
        return self.verifiers[0].dialect

    @property
    def tensor_constants(self) -> dict[str, torch.Tensor]:
        """The lifted constants and non-persistent buffers (torch.export's name for `constants`)."""
        return self.constants

    @property
    def _report(self):
        """draft_export's report, by torch's name for it."""
        return self.draft_report

    def validate(self) -> None:
        """Check the program against the IR contract with each of its verifiers (raises
        InternalError on a violation): after editing `graph_module` by hand, for instance."""
        for verifier in self.verifiers:
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
        import sympy

        from .shapes.node import display_names
        names = self.shape_contract.display_symbols() if self.shape_contract is not None else {}
        with display_names(names):
            body = plain_copy(self.graph_module).print_readable(print_output=False, colored=False).replace(
                "\n", "\n    ")
        signature = str(self.graph_signature).replace("\n", "\n    ")
        ranges = {sympy.sympify(k).xreplace(names): v for k, v in self.range_constraints.items()}
        return (f"ExportedProgram:\n    {body}\nGraph signature: \n    {signature}\n"
                f"Range constraints: {ranges}\n")

    def __repr__(self) -> str:
        return str(self)


def _checked_example_inputs(value: Any, in_spec) -> tuple[tuple, dict] | None:
    """torch.export's rule for setting example_inputs: None, or (args tuple, kwargs dict) of
    the structure the program takes."""
    if value is None:
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and isinstance(value[1], dict):
        structure = _torch.pytree.tree_structure(value)
        if in_spec is None or structure == in_spec:
            return value
        raise UnsupportedInputError(
            f"the example inputs have the structure {structure}, but the program takes {in_spec}",
            fix="set example inputs of the structure the program was exported with")
    raise UnsupportedInputError(
        f"example_inputs must be None or a tuple (args, kwargs) of a tuple and a dict, got {type(value).__qualname__}",
        fix="set ep.example_inputs = (args, kwargs), e.g. ((x,), {})",
        torch_phrase="Example inputs should be a tuple containing example arguments (as a tuple), "
                     "and example kwargs (as a dictionary).")

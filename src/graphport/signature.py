"""The graph signature: what each placeholder and each output of the graph means.

Same classes, fields and printed layout as torch.export's graph signature, so code
written against torch.export reads ours unchanged.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TensorArgument:
    name: str


@dataclass(frozen=True)
class SymIntArgument:
    name: str


@dataclass(frozen=True)
class SymFloatArgument:
    name: str


@dataclass(frozen=True)
class SymBoolArgument:
    name: str


@dataclass(frozen=True)
class ConstantArgument:
    name: str
    value: Any


@dataclass(frozen=True)
class CustomObjArgument:
    """A custom object (an instance of a TorchBind class, `torch.classes.ns.Name`): its
    placeholder's name, the class's qualified name, and, on a placeholder's `meta["val"]`,
    the fake object capture computed with (None in a signature)."""
    name: str
    class_fqn: str
    fake_val: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TokenArgument:
    """An effect token: the value that orders a program's effectful calls (`with_effects`)."""
    name: str


ArgumentSpec = (TensorArgument | SymIntArgument | SymFloatArgument | SymBoolArgument | ConstantArgument
                | CustomObjArgument | TokenArgument)


class InputKind(enum.Enum):
    USER_INPUT = enum.auto()
    PARAMETER = enum.auto()
    BUFFER = enum.auto()
    CONSTANT_TENSOR = enum.auto()
    CUSTOM_OBJ = enum.auto()
    TOKEN = enum.auto()


class OutputKind(enum.Enum):
    USER_OUTPUT = enum.auto()
    BUFFER_MUTATION = enum.auto()
    PARAMETER_MUTATION = enum.auto()
    USER_INPUT_MUTATION = enum.auto()
    # a joint forward-backward program's (graphport.experimental._export_forward_backward)
    LOSS_OUTPUT = enum.auto()
    GRADIENT_TO_PARAMETER = enum.auto()
    GRADIENT_TO_USER_INPUT = enum.auto()
    TOKEN = enum.auto()


@dataclass
class InputSpec:
    kind: InputKind
    arg: ArgumentSpec
    target: str | None = None
    persistent: bool | None = None

    def __str__(self) -> str:
        text = f"{self.arg.name}: {self.kind.name}"
        if self.target is not None:
            text += f" target='{self.target}'"
        if self.persistent is not None:
            text += f" persistent={self.persistent}"
        return text


@dataclass
class OutputSpec:
    kind: OutputKind
    arg: ArgumentSpec
    target: str | None = None

    def __str__(self) -> str:
        name = self.arg.name if not isinstance(self.arg, ConstantArgument) else ""
        text = f"{name}: {self.kind.name}"
        return text + (f" target='{self.target}'" if self.target is not None else "")


@dataclass
class ExportBackwardSignature:
    """A joint forward-backward program's backward: which output is the gradient of the
    loss with respect to which parameter (by its target) or user input (by its
    placeholder's name), and which output is the loss."""
    gradients_to_parameters: dict[str, str]
    gradients_to_user_inputs: dict[str, str]
    loss_output: str


@dataclass
class ExportGraphSignature:
    input_specs: list[InputSpec] = field(default_factory=list)
    output_specs: list[OutputSpec] = field(default_factory=list)

    def _inputs(self, kind: InputKind) -> list[InputSpec]:
        return [s for s in self.input_specs if s.kind is kind]

    @property
    def parameters(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.PARAMETER)]

    @property
    def buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER)]

    @property
    def non_persistent_buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER) if s.persistent is False]

    @property
    def lifted_tensor_constants(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)]

    @property
    def lifted_custom_objs(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.CUSTOM_OBJ)]

    @property
    def inputs_to_lifted_custom_objs(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.CUSTOM_OBJ)}

    @property
    def input_tokens(self) -> list[str]:
        return [s.arg.name for s in self._inputs(InputKind.TOKEN)]

    @property
    def output_tokens(self) -> list[str]:
        return [s.arg.name for s in self.output_specs if s.kind is OutputKind.TOKEN]

    @property
    def user_inputs(self) -> list[Any]:
        return [s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                for s in self._inputs(InputKind.USER_INPUT)]

    @property
    def user_outputs(self) -> list[Any]:
        return [s.arg.value if isinstance(s.arg, ConstantArgument) else s.arg.name
                for s in self.output_specs if s.kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT)]

    @property
    def inputs_to_parameters(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.PARAMETER)}

    @property
    def inputs_to_buffers(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.BUFFER)}

    @property
    def inputs_to_lifted_tensor_constants(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)}

    @property
    def buffers_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self.output_specs if s.kind is OutputKind.BUFFER_MUTATION}

    @property
    def parameters_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self.output_specs if s.kind is OutputKind.PARAMETER_MUTATION}

    @property
    def user_inputs_to_mutate(self) -> dict[str, str]:
        return {s.arg.name: s.target for s in self.output_specs if s.kind is OutputKind.USER_INPUT_MUTATION}

    @property
    def backward_signature(self) -> ExportBackwardSignature | None:
        """The backward of a joint forward-backward program; None for any other program."""
        loss = [s.arg.name for s in self.output_specs if s.kind is OutputKind.LOSS_OUTPUT]
        if not loss:
            return None
        return ExportBackwardSignature(
            gradients_to_parameters={s.arg.name: s.target for s in self.output_specs
                                     if s.kind is OutputKind.GRADIENT_TO_PARAMETER},
            gradients_to_user_inputs={s.arg.name: s.target for s in self.output_specs
                                      if s.kind is OutputKind.GRADIENT_TO_USER_INPUT},
            loss_output=loss[0])

    def __str__(self) -> str:
        lines = ["# inputs", *map(str, self.input_specs), "", "# outputs", *map(str, self.output_specs)]
        return "\n".join(lines)

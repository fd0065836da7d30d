"""Module state: parameters, buffers and tensor attributes lifted to graph inputs.

During capture every parameter and buffer of the root module is replaced in place by a
tracer (its placeholder named as torch.export names it: `p_layer_weight`, `b_running_mean`);
afterwards the real tensors are put back. Writes to buffers (and a buffer replaced by
assignment) become mutation outputs.
"""
from __future__ import annotations

import contextlib

import torch
import torch.fx as fx

from ..errors import UnsupportedFeatureError
from ..signature import InputKind, InputSpec, OutputKind, TensorArgument
from .recorder import Recorder
from .tracer import TracerTensor


class ModuleState:
    def __init__(self, root: torch.nn.Module, rec: Recorder):
        self.root = root
        self.rec = rec
        self.module_names: dict[int, str] = {}
        for name, mod in root.named_modules(remove_duplicate=False):
            self.module_names.setdefault(id(mod), name)
        self.params: list[tuple[str, torch.Tensor, TracerTensor]] = []
        self.buffers: list[tuple[str, torch.Tensor, TracerTensor, bool]] = []
        self.by_id: dict[int, TracerTensor] = {}
        self.nodes: dict[int, fx.Node] = {}   # id(tracer) -> its placeholder
        for name, p in root.named_parameters():
            t = rec.tracer_for_placeholder("p_" + name.replace(".", "_"), p)
            _keep_python_attributes(p, t)
            self.params.append((name, p, t))
            self.by_id[id(p)] = t
            self.nodes[id(t)] = rec.root_value(t)
        for name, b in root.named_buffers():
            owner, _, attr = name.rpartition(".")
            persistent = attr not in root.get_submodule(owner)._non_persistent_buffers_set
            t = rec.tracer_for_placeholder("b_" + name.replace(".", "_"), b)
            _keep_python_attributes(b, t)
            self.buffers.append((name, b, t, persistent))
            self.by_id[id(b)] = t
            self.nodes[id(t)] = rec.root_value(t)
        for mod_name, mod in root.named_modules():
            for attr, value in vars(mod).items():
                if isinstance(value, torch.Tensor) and id(value) not in self.by_id:
                    rec.constant_names.setdefault(id(value), f"{mod_name}.{attr}" if mod_name else attr)
        self.reassigned: dict[str, torch.Tensor] = {}
        rec.state_tracers = self.by_id

    @contextlib.contextmanager
    def swapped(self):
        """Module state replaced by tracers for the duration of capture, restored after."""
        saved = []
        for _, mod in self.root.named_modules(remove_duplicate=False):
            for table in (mod._parameters, mod._buffers):
                for key, value in list(table.items()):
                    if value is not None and id(value) in self.by_id:
                        saved.append((table, key, value))
                        table[key] = self.by_id[id(value)]
        try:
            yield
        finally:
            self._collect_reassigned()
            for table, key, value in saved:
                table[key] = value

    def _collect_reassigned(self) -> None:
        """Buffers the program replaced with `self.buf = new_tensor`: captured as writes."""
        for name, _, tracer, _ in self.buffers:
            owner, _, attr = name.rpartition(".")
            current = self.root.get_submodule(owner)._buffers.get(attr)
            if current is not tracer and isinstance(current, torch.Tensor):
                self.reassigned[name] = current

    def mutations(self):
        """(new value, kind, target) of every parameter and buffer the program changed."""
        rec = self.rec
        for name, _, tracer in self.params:
            if self.changed(tracer):
                yield tracer, OutputKind.PARAMETER_MUTATION, name
        for name, _, tracer, _ in self.buffers:
            if name in self.reassigned:
                new = self.reassigned[name]
                yield (new if isinstance(new, TracerTensor) else rec.constant(new)), OutputKind.BUFFER_MUTATION, name
            elif self.changed(tracer):
                yield tracer, OutputKind.BUFFER_MUTATION, name

    def input_specs(self) -> list[InputSpec]:
        specs = [InputSpec(InputKind.PARAMETER, TensorArgument(self.nodes[id(t)].name), name)
                 for name, _, t in self.params]
        specs += [InputSpec(InputKind.BUFFER, TensorArgument(self.nodes[id(t)].name), name, persistent)
                  for name, _, t, persistent in self.buffers]
        return specs

    def changed(self, tracer: TracerTensor) -> bool:
        return self.rec.root_value(tracer) is not self.nodes[id(tracer)]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every name the module's own state_dict() has: a tensor shared by two modules (tied
        embeddings) appears under both names, one tensor behind them."""
        lifted = {id(p) for _, p, _ in self.params} | {id(b) for _, b, _, keep in self.buffers if keep}
        named = {n: t for n, t in self.root.state_dict(keep_vars=True).items()
                 if isinstance(t, torch.Tensor) and id(t) in lifted}
        return {**named, **{n: p for n, p, _ in self.params}, **{n: b for n, b, _, keep in self.buffers if keep}}

    def non_persistent(self) -> dict[str, torch.Tensor]:
        """Non-persistent buffers live with the constants, as in torch.export."""
        return {n: b for n, b, _, keep in self.buffers if not keep}



def _keep_python_attributes(real: torch.Tensor, tracer: TracerTensor) -> None:
    """The Python attributes set on a parameter or buffer (`self.w.scale = 2.0`), on the tracer
    that stands for it: forward reads them through the tracer, and must read the original's."""
    for attr, value in vars(real).items():
        if attr in TracerTensor.__slots__ or attr in vars(tracer):
            raise UnsupportedFeatureError(
                f"a parameter or buffer has a Python attribute named {attr!r}, a name graphport's capture uses "
                "for its own tensors", fix=f"rename the attribute {attr!r}")
        setattr(tracer, attr, value)

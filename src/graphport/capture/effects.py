"""Effect tokens: the order of a lowered program's effectful calls, made data flow.

An effectful call (a method of a custom object, a custom operator taking one, `aten._print`,
any operator registered effectful in torch's effect registry) changes state the graph does
not show, so passes must neither drop nor reorder it. torch's lowering
(`run_decompositions()`, dialect ATEN) says so in the graph: each such call becomes
`with_effects(token, op, *args)`, returning a new token and the call's results; the tokens
chain the calls from a `token` input (kind TOKEN, placeholder first) to a token output
(kind TOKEN, output first). graphport's lowering writes the same (`ReplayInputs.effect_tokens`);
its exported programs, like torch.export's, record the calls directly, in program order.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx

from .. import _torch

with_effects = torch.ops.higher_order.with_effects
TOKEN_NAME = "token"


def orders(target: Any) -> bool:
    """Whether calls of `target` are effectful, so tokens order them."""
    if isinstance(target, _torch.HigherOrderOperator):
        return target.name() == "call_torchbind"
    return isinstance(target, _torch.OpOverload) and _torch.registered_effect(target)


def _token_value() -> torch.Tensor:
    return torch.empty(0, device="meta")   # torch's token is an empty tensor, torch.tensor([])


class EffectTokens:
    """The token chain of the graph being recorded (its root scope)."""

    def __init__(self, rec):
        self.rec = rec
        self.input: fx.Node | None = None     # the token placeholder, made at the first effectful call
        self.current: fx.Node | None = None   # the token the next effectful call takes

    def applies(self) -> bool:
        """Tokens chain the program's own graph; a call inside a branch or loop body stays as it is."""
        return self.rec.scope is self.rec.root

    def record(self, target, node_args: tuple, node_kwargs: dict, val: Any, device: torch.device
               ) -> tuple[fx.Node, Any]:
        """Record `target(*node_args, **node_kwargs)` (output metadata `val`) as `with_effects`
        on the current token; return the node and its results as tracers."""
        rec = self.rec
        if self.current is None:
            self.input = self.current = rec.placeholder(TOKEN_NAME, _token_value())
        results = tuple(val) if isinstance(val, tuple) else (val,)
        node = rec.node(with_effects, (self.current, target, *node_args), node_kwargs, (_token_value(), *results))
        rec.user_calls.add(node)
        self.current = rec.node(operator.getitem, (node, 0), {}, _token_value())
        wrapped = [rec.wrap(v, rec.node(operator.getitem, (node, i + 1), {}, v), device)
                   if isinstance(v, torch.Tensor) else v for i, v in enumerate(results)]
        return node, (tuple(wrapped) if isinstance(val, tuple) else wrapped[0])

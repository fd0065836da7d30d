"""One finding of the Python audit: what the program's Python did, where, and how to fix it."""
from __future__ import annotations

from dataclasses import dataclass

from ..source import SourceLocation

# Kinds of effect that outlive the call or lie outside the graph; strict export refuses them.
GLOBAL, CLOSURE, ATTRIBUTE, CONTAINER, OUTPUT, LOGGING, CLOCK, RANDOM, IO, NETWORK, ENVIRONMENT, CACHE = (
    "global write", "closure write", "attribute write", "container write", "output", "logging", "clock",
    "random", "I/O", "network", "environment", "cache")
ITERATOR = "iterator advance"
# A Python value read by the program and frozen into the graph: reported, never refused.
BAKED = "baked value"

_GUARD = "or, to keep it in eager only, guard it with `if not torch.compiler.is_exporting():`"
FIXES = {
    GLOBAL: "keep the state in a buffer (self.register_buffer) updated with tensor ops, or make the write in the "
            "caller, after calling the exported program; " + _GUARD,
    CLOSURE: "return the new value from forward instead of writing it to the enclosing function's variable; "
             + _GUARD,
    ATTRIBUTE: "keep the state in a buffer (self.register_buffer) updated with tensor ops, or return the new value "
               "from forward; " + _GUARD,
    CONTAINER: "return the value from forward instead of storing it in a container that outlives the call; "
               + _GUARD,
    OUTPUT: "remove it from forward, " + _GUARD,
    LOGGING: "remove it from forward, " + _GUARD,
    CLOCK: "pass the time as an input (a tensor), or, to keep it in eager only, guard it with "
           "`if not torch.compiler.is_exporting():`",
    RANDOM: "use torch's generators (torch.rand, torch.randint), which the graph carries, or pass the random "
            "values as inputs; " + _GUARD,
    IO: "read or write the file outside forward and pass the data as inputs; " + _GUARD,
    NETWORK: "do the network call outside forward and pass the data as inputs; " + _GUARD,
    ENVIRONMENT: "set the environment outside forward; " + _GUARD,
    CACHE: "call the undecorated function (`fn.__wrapped__`) in forward, or compute the value once in __init__; "
           + _GUARD,
    ITERATOR: "make the iterator inside forward, or take the values it yields as inputs; " + _GUARD,
    BAKED: "if the value can change between calls, pass it as an input (a tensor for a number), or export once per "
           "value",
}


class PythonEffectWarning(UserWarning):
    """A Python effect found by a non-strict export (strict=True would refuse it)."""


@dataclass(frozen=True)
class PythonEffect:
    """What the program's Python did during capture that the graph does not carry."""
    kind: str
    what: str
    location: SourceLocation
    # a write to the exported module's own plain attributes or their lists/dicts/sets: export
    # puts them back after each capture, so tracing the program again does not accumulate it
    restored: bool = False

    @property
    def fix(self) -> str:
        return FIXES[self.kind]

    @property
    def refused_by_strict(self) -> bool:
        return self.kind != BAKED

    def __str__(self) -> str:
        return f"[{self.kind}] {self.what}\n    at {self.location.describe()}\n    fix: {self.fix}"

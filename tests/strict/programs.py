"""A corpus of small programs for strict export: each either has a Python effect the graph
cannot carry (its line is marked `# effect`) or none.

`PROGRAMS` maps a name to a Program: `build()` gives a fresh (module, args); `effect` is the
kind of effect graphport's audit must find (None: the program must export under strict);
`state()` where given returns a snapshot of the Python state the effect would change, so a
test can check that strict export refused before the effect ran.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import os
import random
import sys
import tempfile
import time
import types
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import nn


@dataclass
class Program:
    name: str
    build: Callable[[], tuple[nn.Module, tuple]]
    effect: str | None
    state: Callable[[], Any] | None = None


PROGRAMS: dict[str, Program] = {}


def program(effect: str | None, state: Callable[[], Any] | None = None):
    def register(cls):
        PROGRAMS[cls.__name__] = Program(cls.__name__, lambda: (cls(), cls.inputs()), effect, state)
        return cls
    return register


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @staticmethod
    def inputs():
        return (torch.randn(2, 4),)


# -- effects -------------------------------------------------------------------------------------

LOG: list = []
COUNT = 0
CACHE: dict = {"k": 0}
STATE = types.SimpleNamespace(calls=0)
QUEUE: collections.deque = collections.deque()
REGISTRY: set = set()
logger = logging.getLogger("graphport.tests.strict")


@program("container write", lambda: list(LOG))
class GlobalListAppend(Base):
    def forward(self, x):
        LOG.append(1)  # effect
        return self.lin(x)


@program("global write", lambda: COUNT)
class GlobalCounter(Base):
    def forward(self, x):
        global COUNT
        COUNT += 1  # effect
        return self.lin(x)


@program("container write", lambda: dict(CACHE))
class GlobalDictSetitem(Base):
    def forward(self, x):
        CACHE["last"] = 1  # effect
        return self.lin(x)


@program("container write", lambda: dict(CACHE))
class GlobalDictDelete(Base):
    def forward(self, x):
        CACHE["tmp"] = 0 if "tmp" not in CACHE else CACHE["tmp"]  # effect
        del CACHE["tmp"]
        return self.lin(x)


@program("attribute write", lambda: STATE.calls)
class GlobalNamespaceAttr(Base):
    def forward(self, x):
        STATE.calls += 1  # effect
        return self.lin(x)


@program("container write", lambda: list(QUEUE))
class GlobalDequeAppend(Base):
    def forward(self, x):
        QUEUE.append(x.shape[0])  # effect
        return self.lin(x)


@program("container write", lambda: set(REGISTRY))
class GlobalSetAdd(Base):
    def forward(self, x):
        REGISTRY.add("seen")  # effect
        return self.lin(x)


class Counted(Base):
    instances = 0


@program("attribute write", lambda: Counted.instances)
class ClassAttribute(Counted):
    def forward(self, x):
        Counted.instances += 1  # effect
        return self.lin(x)


def _make_counter():
    n = 0

    def bump():
        nonlocal n
        n += 1  # effect
        return n
    return bump


_bump = _make_counter()


@program("closure write", lambda: _bump.__closure__[0].cell_contents)
class ClosureNonlocal(Base):
    def forward(self, x):
        return self.lin(x) * _bump()


def _make_history():
    history = []

    def record(v):
        history.append(v)  # effect
    return record, history


_record, _history = _make_history()


@program("container write", lambda: list(_history))
class ClosureListAppend(Base):
    def forward(self, x):
        _record(x.shape[0])
        return self.lin(x)


class CallsCounter(Base):
    def __init__(self):
        super().__init__()
        self.calls = 0


@program("attribute write")
class ModulePlainAttribute(CallsCounter):
    def forward(self, x):
        self.calls += 1  # effect
        return self.lin(x)


class Helper:
    def __init__(self):
        self.count = 0


class WithHelper(Base):
    def __init__(self):
        super().__init__()
        self.helper = Helper()


@program("attribute write")
class PlainObjectAttribute(WithHelper):
    def forward(self, x):
        self.helper.count += 1  # effect
        return self.lin(x)


@program("attribute write")
class SetattrBuiltin(WithHelper):
    def forward(self, x):
        setattr(self.helper, "last", 1)  # effect
        return self.lin(x)


@program("attribute write")
class ModuleCacheTensor(Base):
    def forward(self, x):
        y = self.lin(x)
        self.last_output = y  # effect
        return y


@dataclass
class Settings:
    scale: float = 2.0
    calls: int = 0


class WithSettings(Base):
    def __init__(self):
        super().__init__()
        self.settings = Settings()


@program("attribute write")
class DataclassConfigWrite(WithSettings):
    def forward(self, x):
        self.settings.calls += 1  # effect
        return self.lin(x) * self.settings.scale


class ListInput(nn.Module):
    @staticmethod
    def inputs():
        return (torch.randn(2, 4), [torch.randn(2, 4)])


@program("container write")
class InputListAppend(ListInput):
    def forward(self, x, outs):
        outs.append(x * 2)  # effect
        return x + outs[0]


class DictInput(nn.Module):
    @staticmethod
    def inputs():
        return (torch.randn(2, 4), {"a": torch.randn(2, 4)})


@program("container write")
class InputDictSetitem(DictInput):
    def forward(self, x, d):
        d["b"] = x + 1  # effect
        return x * d["a"]


@program("output")
class Print(Base):
    def forward(self, x):
        print("forward called")  # effect
        return self.lin(x)


@program("output")
class StdoutWrite(Base):
    def forward(self, x):
        sys.stdout.write("forward called\n")  # effect
        return self.lin(x)


@program("logging")
class LoggingInfo(Base):
    def forward(self, x):
        logger.info("shape %s", x.shape)  # effect
        return self.lin(x)


@program("logging")
class LoggingModuleLevel(Base):
    def forward(self, x):
        logging.debug("forward")  # effect
        return self.lin(x)


@program("clock")
class TimeTime(Base):
    def forward(self, x):
        t = time.time()  # effect
        return self.lin(x) + (t > 0)


class Timer:
    """A user context manager that reads the clock."""

    def __enter__(self):
        self.start = time.perf_counter()  # effect
        return self

    def __exit__(self, *exc):
        self.elapsed = time.perf_counter() - self.start
        return False


@program("clock")
class TimerContextManager(Base):
    def forward(self, x):
        with Timer():
            y = self.lin(x)
        return y


@program("random")
class RandomRandom(Base):
    def forward(self, x):
        return self.lin(x) * random.random()  # effect


@program("random")
class RandomRandint(Base):
    def forward(self, x):
        k = random.randint(1, 3)  # effect
        return self.lin(x) * k


@program("random")
class NumpyRandom(Base):
    def forward(self, x):
        noise = np.random.rand(4)  # effect
        return self.lin(x) + torch.from_numpy(noise).float()


_TMP = os.path.join(tempfile.gettempdir(), "graphport_strict_corpus.txt")


@program("I/O")
class FileWrite(Base):
    def forward(self, x):
        with open(_TMP, "w") as f:  # effect
            f.write("forward")
        return self.lin(x)


@program("environment", lambda: os.environ.get("GRAPHPORT_CORPUS"))
class EnvironWrite(Base):
    def forward(self, x):
        os.environ["GRAPHPORT_CORPUS"] = "1"  # effect
        return self.lin(x)


@functools.lru_cache(maxsize=None)
def _width_factor(n: int) -> int:
    return n * 2


@program("cache", lambda: _width_factor.cache_info().currsize)
class FunctoolsCacheFill(Base):
    def forward(self, x):
        return self.lin(x) * _width_factor(x.shape[1] + 1000)  # effect


def _steps(x):
    for i in range(2):
        LOG.append(i)  # effect
        yield x * i


@program("container write", lambda: list(LOG))
class GeneratorEffect(Base):
    def forward(self, x):
        return sum(_steps(self.lin(x)))


@program("container write", lambda: list(LOG))
class CondBranchEffect(Base):
    def forward(self, x):
        def yes(x):
            LOG.append("yes")  # effect
            return x + 1

        def no(x):
            return x - 1
        return torch.cond(x.sum() > 0, yes, no, (self.lin(x),))


# -- no effects --------------------------------------------------------------------------------

SCALE = 2.0
FLAG = True


@program(None)
class LocalContainers(Base):
    def forward(self, x):
        parts = []
        for i in range(3):
            parts.append(x * i)
        table = {}
        table["sum"] = sum(parts)
        return self.lin(table["sum"])


class Scaled:
    """The context manager of torch.export's documentation: state of its own only."""

    def __init__(self, factor):
        self.factor = factor
        self.entered = False

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.entered = False
        return False


@program(None)
class UserContextManager(Base):
    def forward(self, x):
        with Scaled(3.0) as s:
            y = self.lin(x) * s.factor
        return y


@contextlib.contextmanager
def _scope(store):
    store["depth"] = store.get("depth", 0) + 1
    yield store
    store["depth"] -= 1


@program(None)
class GeneratorContextManager(Base):
    def forward(self, x):
        with _scope({}) as store:
            y = self.lin(x) + store["depth"]
        return y


def _pairs(x):
    for i in range(3):
        yield x + i


@program(None)
class LocalGenerator(Base):
    def forward(self, x):
        return self.lin(sum(_pairs(x)))


@program(None)
class DataclassConfigRead(WithSettings):
    def forward(self, x):
        return self.lin(x) * self.settings.scale


class HFStyleConfig:
    def __init__(self):
        self.output_hidden_states = False
        self.use_bias = True
        self.hidden_act = "gelu"


@program(None)
class HFConfigFlags(Base):
    def __init__(self):
        super().__init__()
        self.config = HFStyleConfig()

    def forward(self, x):
        h = self.lin(x)
        h = nn.functional.gelu(h) if self.config.hidden_act == "gelu" else torch.relu(h)
        return (h, h * 2) if self.config.output_hidden_states else h


@program(None)
class TransformersConfigFlags(Base):
    def __init__(self):
        super().__init__()
        import transformers
        self.config = transformers.PretrainedConfig(output_attentions=False)

    def forward(self, x):
        h = self.lin(x)
        return (h, h) if self.config.output_attentions else h


@program(None)
class GlobalFlagRead(Base):
    def forward(self, x):
        y = self.lin(x)
        return y * SCALE if FLAG else y


@program(None)
class WarmFunctoolsCache(Base):
    def forward(self, x):
        return self.lin(x) * _width_factor(x.shape[1])


_width_factor(4)   # filled before export: a hit adds nothing


def _make_reader():
    factor = 3

    def read(v):
        return v * factor
    return read


_reader = _make_reader()


@program(None)
class ClosureRead(Base):
    def forward(self, x):
        return _reader(self.lin(x))


@program(None)
class NestedNonlocal(Base):
    def forward(self, x):
        total = 0

        def add(v):
            nonlocal total
            total += v
        for i in range(3):
            add(i)
        return self.lin(x) * total


@program(None)
class LocalObjectAttributes(Base):
    def forward(self, x):
        ns = types.SimpleNamespace()
        ns.hidden = self.lin(x)
        ns.count = 1
        setattr(ns, "scale", 2)
        return ns.hidden * ns.scale


@program(None)
class TryExcept(Base):
    def forward(self, x):
        try:
            y = self.lin(x)[:, 10]
        except IndexError:
            y = self.lin(x)
        return y


@program(None)
class PythonLoops(Base):
    def forward(self, x):
        y = x
        n = 0
        while n < 3:
            y = self.lin(y)
            n += 1
        return sum(t for _, t in zip(range(2), (y, y * 2)))


@program(None)
class FStringsAndFormatting(Base):
    def forward(self, x):
        name = f"layer_{x.shape[1]}"
        return self.lin(x) * len(name)


@program(None)
class WarningsWarn(Base):
    def forward(self, x):
        warnings.warn("a diagnostic, not an effect")
        return self.lin(x)


@program(None)
class StarArgsHelpers(Base):
    @staticmethod
    def _combine(*parts, scale=1.0):
        return sum(parts) * scale

    def forward(self, x):
        a, *rest = (self.lin(x), x, x * 2)
        return self._combine(a, *rest, scale=0.5)


class WithProperty(Base):
    @property
    def factor(self):
        return 2.0


@program(None)
class PropertyRead(WithProperty):
    def forward(self, x):
        return self.lin(x) * self.factor


@program(None)
class CondNoEffects(Base):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x + 1, lambda x: x - 1, (self.lin(x),))


@program(None)
class GuardedPrint(Base):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            print("forward called")
        return self.lin(x)


@program(None)
class GuardedGlobalAppend(Base):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            LOG.append(1)
        return self.lin(x)


@program(None)
class BufferUpdate(Base):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x) + self.steps


@program(None)
class DataclassMadeInForward(Base):
    def forward(self, x):
        s = Settings(scale=0.5)
        s.calls += 1
        return self.lin(x) * s.scale * s.calls

"""Writes made through calls rather than store instructions: each form below changes state that
existed before forward and outlives it, so strict export refuses it at the user's line and the
default export lists it in `ep.python_effects`; the same call on an object forward makes itself
is no finding."""
import bisect
import contextvars
import heapq
import inspect
import operator
import types
import warnings

import numpy as np
import pytest
import torch

import graphport as gp

TABLE: dict = {}
ITEMS: list = []
HEAP: list = []
ARRAY = np.zeros(3)
FLAG = contextvars.ContextVar("FLAG", default=0)
STREAM = iter(range(1000))
NUMBERS = (i for i in range(1000))
SCRATCH = types.ModuleType("scratch")   # a module of the test's own, so the default run changes no real one
G = 0


class Holder:
    registry: dict = {}   # a flat dict: the collector does not track it, reachability finds it


HELD = Holder()


def _fresh():
    TABLE.clear()
    TABLE["k"] = 1
    ITEMS[:] = [1, 3]
    HEAP[:] = [1, 3]
    ARRAY[:] = 0


# each: forward's body as a function of (self, x), the line that writes, and the kind reported
def setitem(x):
    operator.setitem(TABLE, "k", 2)  # WRITE


def delitem(x):
    operator.delitem(TABLE, "k")  # WRITE


def iadd(x):
    operator.iadd(ITEMS, [4])  # WRITE


def unbound_setitem(x):
    dict.__setitem__(TABLE, "k", 2)  # WRITE


def bound_setitem(x):
    TABLE.__setitem__("k", 2)  # WRITE


def bound_delitem(x):
    TABLE.__delitem__("k")  # WRITE


def globals_item(x):
    globals()["G"] = 1  # WRITE


def vars_update(x):
    vars(HELD).update(a=1)  # WRITE


def dict_item(x):
    HELD.__dict__["a"] = 1  # WRITE


def dict_update(x):
    HELD.__dict__.update(a=1)  # WRITE


def set_attr(x):
    setattr(HELD, "a", 1)  # WRITE


def object_setattr(x):
    object.__setattr__(HELD, "a", 1)  # WRITE


def bound_setattr(x):
    HELD.__setattr__("a", 1)  # WRITE


def insort(x):
    bisect.insort(ITEMS, 2)  # WRITE


def heappush(x):
    heapq.heappush(HEAP, 2)  # WRITE


def heappop(x):
    heapq.heappop(HEAP)  # WRITE


def fill(x):
    ARRAY.fill(1.0)  # WRITE


def copyto(x):
    np.copyto(ARRAY, np.ones(3))  # WRITE


def context_set(x):
    FLAG.set(1)  # WRITE


def advance(x):
    next(STREAM)  # WRITE


def advance_method(x):
    STREAM.__next__()  # WRITE


def send(x):
    NUMBERS.send(None)  # WRITE


def heapify(x):
    heapq.heapify(ITEMS)  # WRITE


def module_dict(x):
    SCRATCH.__dict__.setdefault("marker", 1)  # WRITE


def class_attribute_method(x):
    Holder.registry.__setitem__("k", 1)  # WRITE


FORMS = [setitem, delitem, iadd, unbound_setitem, bound_setitem, bound_delitem, globals_item, vars_update, dict_item,
         dict_update, set_attr, object_setattr, bound_setattr, insort, heappush, heappop, fill, copyto, context_set,
         advance, advance_method, send, heapify, module_dict,
         class_attribute_method]


def _line(body) -> int:
    lines, first = inspect.getsourcelines(body)
    return first + next(i for i, text in enumerate(lines) if "# WRITE" in text)


class Runs(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        self.body(x)
        return x * 2


@pytest.mark.parametrize("body", FORMS, ids=lambda f: f.__name__)
def test_strict_refuses_a_write_through_a_call_at_its_line(body):
    _fresh()
    with pytest.raises(gp.PythonEffectError) as caught:
        gp.export(Runs(body), (torch.randn(2, 3),), strict=True)
    assert caught.value.location.lineno == _line(body), str(caught.value)
    assert "outlive" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("body", FORMS, ids=lambda f: f.__name__)
def test_default_lists_a_write_through_a_call(body):
    _fresh()
    with pytest.warns(gp.PythonEffectWarning):
        ep = gp.export(Runs(body), (torch.randn(2, 3),))
    lines = {e.location.lineno for e in ep.python_effects if e.refused_by_strict}
    assert _line(body) in lines, [str(e) for e in ep.python_effects]
    torch.testing.assert_close(ep.module()(torch.ones(2, 3)), torch.ones(2, 3) * 2)


def local_forms(x):
    """Every form above, on objects made inside the call: nothing outlives it."""
    table, items, heap, array = {"k": 1}, [1, 3], [1, 3], np.zeros(3)
    flag = contextvars.ContextVar("local_flag", default=0)
    stream = iter(range(3))
    held = Holder()
    operator.setitem(table, "k", 2)
    operator.delitem(table, "k")
    operator.iadd(items, [4])
    dict.__setitem__(table, "k", 2)
    table.__setitem__("j", 2)
    table.__delitem__("j")
    vars(held).update(a=1)
    held.__dict__["b"] = 1
    held.__dict__.update(c=1)
    setattr(held, "d", 1)
    object.__setattr__(held, "e", 1)
    held.__setattr__("f", 1)
    bisect.insort(items, 2)
    heapq.heappush(heap, 2)
    heapq.heappop(heap)
    heapq.heapify(items)
    array.fill(1.0)
    np.copyto(array, np.ones(3))
    next(stream)
    total = 0
    for value in iter([1, 2]):
        total += value
    gen = (v for v in range(3))
    next(gen)
    token = flag.set(1)
    flag.reset(token)
    count = operator.iadd(total, 1)   # an int: rebinding, not a write
    operator.setitem(x.clone(), 0, 1.0)   # a tensor: the graph's own write
    return count + len(items) + int(array.sum())


def test_the_same_calls_on_objects_made_inside_forward_are_no_finding():
    with warnings.catch_warnings():
        warnings.simplefilter("error", gp.PythonEffectWarning)
        ep = gp.export(Runs(local_forms), (torch.randn(2, 3),), strict=True)
    assert not [e for e in ep.python_effects if e.refused_by_strict]

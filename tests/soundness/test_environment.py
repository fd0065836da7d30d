"""Export leaves the process and the model as it found them: torch's globals, builtins,
compiler flags, global hooks, mode stacks, the model's tensors and Python attributes; on
success, on failure, and with exports running in several threads at once."""
from __future__ import annotations

import builtins
import threading

import pytest
import torch
import torch.nn as nn
from torch import cond as cond_imported_from_torch

import graphport as gp

from . import assert_same, compare_call


def _env():
    mod = torch.nn.modules.module
    return {
        "torch.cond": torch.cond,
        "builtins.max": builtins.max,
        "builtins.min": builtins.min,
        "builtins.isinstance": builtins.isinstance,
        "is_exporting": torch.compiler.is_exporting(),
        "is_compiling": torch.compiler.is_compiling(),
        "forward_hooks": len(mod._global_forward_hooks),
        "forward_pre_hooks": len(mod._global_forward_pre_hooks),
        "grad_enabled": torch.is_grad_enabled(),
        "torch_function_stack": torch._C._len_torch_function_stack(),
        "torch_dispatch_stack": torch._C._len_torch_dispatch_stack(),
        "Module.__call__": nn.Module.__call__,
        "Tensor.__torch_function__": torch.Tensor.__torch_function__.__func__,
    }


@pytest.fixture(autouse=True)
def _restore_globals():
    """A failing test here must not leave a patched torch behind for the rest of the run
    (the assertions are made inside the tests; this only cleans up afterwards)."""
    saved = (torch.cond, builtins.max, builtins.min, builtins.isinstance,
             torch.compiler._is_exporting_flag, torch.compiler._is_compiling_flag,
             nn.Module.__call__)
    yield
    (torch.cond, builtins.max, builtins.min, builtins.isinstance,
     torch.compiler._is_exporting_flag, torch.compiler._is_compiling_flag,
     nn.Module.__call__) = saved


BASELINE = {
    "is_exporting": False,
    "is_compiling": False,
}


def _assert_env(before, label=""):
    after = _env()
    for k, v in before.items():
        same = after[k] is v if callable(v) else after[k] == v
        assert same, f"{label}: {k} changed by export: {v!r} -> {after[k]!r}"
    for k, v in BASELINE.items():
        assert after[k] == v, f"{label}: {k} is {after[k]!r} after export"


# ------------------------------------------------------------------ programs

class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return max(self.lin(x).relu().sum(1).shape[0], 1) * self.lin(x) + min(2, 3)


class RaisesValueError(nn.Module):
    def forward(self, x):
        raise ValueError("boom from forward")


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:          # a branch on a tensor value: graphport refuses
            return x + 1
        return x - 1


def _export_expect(model, args, *, ds=None, raises=None):
    if raises is None:
        return gp.export(model, args, dynamic_shapes=ds)
    with pytest.raises(raises):
        gp.export(model, args, dynamic_shapes=ds)
    return None


@pytest.mark.parametrize(
    "model,raises",
    [(Good, None), (RaisesValueError, ValueError), (DataDependent, gp.GraphportError)],
    ids=["success", "value_error", "graphport_error"],
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_environment_restored(model, raises, dynamic):
    before = _env()
    ds = ({0: gp.Dim("b", max=32)},) if dynamic else None
    _export_expect(model(), (torch.randn(4, 3),), ds=ds, raises=raises)
    _assert_env(before, model.__name__)


def test_flags_are_set_during_capture():
    seen = []

    class M(nn.Module):
        def forward(self, x):
            seen.append((torch.compiler.is_exporting(), torch.compiler.is_compiling()))
            return x + 1

    before = _env()
    gp.export(M(), (torch.randn(2),))
    assert seen and all(s == (True, True) for s in seen), seen
    _assert_env(before)
    assert not torch.compiler.is_exporting() and not torch.compiler.is_compiling()


def test_export_under_preset_compiler_flags_restores_them():
    # Exporting from code that already runs with the compiler flags set (e.g. inside another
    # tool's capture): graphport must put back what it found, not False.
    old = (torch.compiler._is_exporting_flag, torch.compiler._is_compiling_flag)
    try:
        torch.compiler._is_exporting_flag = True
        torch.compiler._is_compiling_flag = True
        ep = gp.export(Good(), (torch.randn(4, 3),))
        assert torch.compiler.is_exporting() and torch.compiler.is_compiling()
        torch.compiler._is_exporting_flag = False
        torch.compiler._is_compiling_flag = True
        with pytest.raises(ValueError):
            gp.export(RaisesValueError(), (torch.randn(4, 3),))
        assert (torch.compiler._is_exporting_flag, torch.compiler._is_compiling_flag) == (False, True)
    finally:
        torch.compiler._is_exporting_flag, torch.compiler._is_compiling_flag = old
    ep.module()(torch.randn(4, 3))


def test_export_with_global_hooks_registered_keeps_them():
    calls = []
    h1 = nn.modules.module.register_module_forward_hook(lambda m, i, o: calls.append("post"))
    h2 = nn.modules.module.register_module_forward_pre_hook(lambda m, i: calls.append("pre"))
    try:
        before = _env()
        gp.export(Good(), (torch.randn(4, 3),))
        with pytest.raises(ValueError):
            gp.export(RaisesValueError(), (torch.randn(4, 3),))
        _assert_env(before)
    finally:
        h1.remove()
        h2.remove()


# ------------------------------------------------------------------ threads

class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        seen_flags.append(torch.compiler.is_exporting())
        return self.lin(x) * self.k + max(1, self.k)


seen_flags: list = []


def test_concurrent_exports_in_threads():
    # Races are timing-dependent: several rounds, each started together by a barrier.
    for round_ in range(3):
        _one_round_of_threads(round_)


def _one_round_of_threads(round_):
    before = _env()
    barrier = threading.Barrier(4)
    jobs = [
        ("static", Scale(2), None, None),
        ("dynamic", Scale(3), ({0: gp.Dim("b", max=64)},), None),
        ("value_error", RaisesValueError(), None, ValueError),
        ("data_dependent", DataDependent(), ({0: gp.Dim("b", max=64)},), gp.GraphportError),
    ]
    results = {}

    def work(name, model, ds, raises):
        barrier.wait()
        try:
            for _ in range(3):
                results[name] = ("ok", gp.export(model, (torch.randn(4, 3),), dynamic_shapes=ds))
        except BaseException as e:  # noqa: BLE001
            results[name] = ("raised", e)

    threads = [threading.Thread(target=work, args=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "an export thread hung"
    _assert_env(before, f"after threads (round {round_})")
    for name, model, ds, raises in jobs:
        kind, val = results[name]
        if raises is None:
            assert kind == "ok", f"{name}: {type(val).__name__}: {val}"
            sizes = (4, 1, 9) if ds else (4,)
            for n in sizes:
                compare_call(model, val, (torch.randn(n, 3),), exact=False, label=f"{name} {n}")
        else:
            assert kind == "raised" and isinstance(val, raises), f"{name}: {kind} {val!r}"


# ------------------------------------------------------------------ the model is left alone

class Stateful(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("stat", torch.ones(3))
        self.calls = 0
        self.cache = []
        self.info = {"seen": 0}
        self.tag = "fresh"

    def forward(self, x):
        self.calls += 1
        self.cache.append(x.shape[0])
        self.info["seen"] = self.info["seen"] + 1
        self.info["last"] = "forward"
        self.tag = "called"
        self.count.add_(1)
        self.stat.mul_(0.5)
        return self.lin(x) * self.stat


@pytest.mark.parametrize("fail", [False, True], ids=["success", "failure"])
def test_export_leaves_the_model_as_it_found_it(fail):
    m = Stateful()
    if fail:
        m.lin.forward = lambda x: (_ for _ in ()).throw(ValueError("late failure"))
    params = {k: (v, v.detach().clone()) for k, v in m.named_parameters()}
    buffers = {k: (v, v.detach().clone()) for k, v in m.named_buffers()}
    cache, info = m.cache, m.info
    if fail:
        with pytest.raises(ValueError):
            gp.export(m, (torch.randn(4, 3),))
    else:
        ep = gp.export(m, (torch.randn(4, 3),))
    for name, (t, val) in {**params, **buffers}.items():
        now = dict(m.named_parameters()).get(name)
        if now is None:
            now = dict(m.named_buffers())[name]
        assert now is t, f"{name}: export replaced the tensor object"
        assert torch.equal(now, val), f"{name}: export changed its value"
    assert m.calls == 0, f"self.calls is {m.calls}"
    assert m.cache is cache and m.cache == [], f"self.cache is {m.cache}"
    assert m.info is info and m.info == {"seen": 0}, f"self.info is {m.info}"
    assert m.tag == "fresh", f"self.tag is {m.tag}"
    if not fail:
        # and the program applies the buffer mutations as eager does
        eager = Stateful()
        eager.load_state_dict(m.state_dict())
        x = torch.randn(4, 3)
        out = ep.module()(x)
        want = eager(x)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(dict(ep.module().named_buffers())["count"], eager.count)


class HooksOnFirstCall(nn.Module):
    """Registers a forward hook on its child on the first call and sets a flag saying so (as
    transformers' output capturing does); the hook records the child's outputs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        if not getattr(self, "_hooked", False):
            self.lin.register_forward_hook(lambda mod, args, out: self.seen.append(out))
            self._hooked = True
        self.seen = []
        y = self.lin(x)
        return y + len(self.seen)


def test_hooks_a_forward_registers_are_removed_with_its_flag():
    """Export restores the flag, so it must remove the hook too: else the next eager call
    registers it again and every output is recorded twice."""
    m = HooksOnFirstCall()
    x = torch.randn(4, 3)
    gp.export(m, (x,))
    assert not m.lin._forward_hooks
    fresh = HooksOnFirstCall()
    fresh.load_state_dict(m.state_dict())
    torch.testing.assert_close(m(x), fresh(x))


# ------------------------------------------------------------------ torch.cond spellings

def _cond_torch(x):
    return torch.cond(x.sum() > 0, lambda a: a + 1, lambda a: a * 2, (x,))


def _cond_imported(x):
    return cond_imported_from_torch(x.sum() > 0, lambda a: a + 1, lambda a: a * 2, (x,))


def _cond_higher_order(x):
    return torch.ops.higher_order.cond(x.sum() > 0, lambda a: a + 1, lambda a: a * 2, (x,))


def _cond_functorch(x):
    from functorch.experimental.control_flow import cond
    return cond(x.sum() > 0, lambda a: a + 1, lambda a: a * 2, (x,))


@pytest.mark.parametrize("fn", [_cond_torch, _cond_imported, _cond_higher_order, _cond_functorch],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_cond_spellings(fn, dynamic):
    before = _env()
    ds = {"x": {0: gp.Dim("n", min=2, max=16)}} if dynamic else None
    try:
        ep = gp.export(fn, (torch.ones(4, 3),), dynamic_shapes=ds)
    except gp.GraphportError:
        ep = None
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"raw {type(e).__module__}.{type(e).__name__} instead of a GraphportError: {e}")
    finally:
        _assert_env(before, fn.__name__)
    if ep is None:
        return
    for x in (torch.ones(4, 3), -torch.ones(4, 3)):
        compare_call(fn, ep, (x,), exact=True, label=f"pred {bool(x.sum() > 0)}")
    if dynamic:
        for x in (torch.ones(7, 3), -torch.ones(2, 3)):
            compare_call(fn, ep, (x,), exact=True, label=f"size {x.shape[0]}")
    assert_same(ep.module()(-torch.ones(4, 3)), -torch.ones(4, 3) * 2)
    _assert_env(before, fn.__name__)

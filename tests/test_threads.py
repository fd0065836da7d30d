"""Exports, save/load round trips and run_decompositions from several threads at once give
what they give alone, and change nothing another thread can observe."""
import copy
import gc
import io
import sys
import threading

import torch
import torch._decomp
from torch import nn

import graphport as gp
from graphport.serde.symbolic import env_to_json

WORKERS, ROUNDS = 3, 2


class _Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.qkv = nn.LayerNorm(8), nn.Linear(8, 24)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, 8)


class _Counted(nn.Module):
    def forward(self, x, counts):
        n = counts.sum().item()
        torch._check(n >= 0)
        return torch.ones(n) * x.shape[0], x.cumsum(0)


class _Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean((2, 3))


def _cases():
    """name -> (model, example inputs, dynamic_shapes, fresh inputs to run), made in one thread
    (torch's random generator is process-wide)."""
    torch.manual_seed(0)
    batch, seq = gp.Dim("batch", min=1, max=64), gp.Dim("seq", min=2, max=32)
    return {
        "mlp": (_Mlp().eval(), (torch.randn(3, 8),), None, (torch.randn(3, 8),)),
        "attention": (_Attention().eval(), (torch.randn(2, 5, 8),), ({0: batch, 1: seq},), (torch.randn(4, 7, 8),)),
        "data-dependent": (_Counted(), (torch.randn(4), torch.tensor([1, 2])), ({0: gp.Dim("n")}, None),
                           (torch.randn(6), torch.tensor([3, 0]))),
        "conv": (_Conv().eval(), (torch.randn(2, 3, 8, 8),), ({0: batch},), (torch.randn(5, 3, 8, 8),)),
    }


def _work(case: tuple, shared) -> dict:
    """Export, print, save/load and lower one case (its own copy of the model), and print and
    lower a program every thread prints and lowers; what each step gives, as text and values."""
    model, example, dynamic, fresh = case
    ep = gp.export(copy.deepcopy(model), example, dynamic_shapes=dynamic)
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    buffer.seek(0)
    loaded = gp.load(buffer)
    lowered = ep.run_decompositions()
    with torch.no_grad():
        outputs = [torch.utils._pytree.tree_leaves(p.module()(*fresh)) for p in (ep, loaded, lowered)]
    return {"exported": str(ep), "loaded": str(loaded), "lowered": str(lowered), "outputs": outputs,
            "shared": str(shared) + shared.module().print_readable(print_output=False),
            "shared lowered": str(shared.run_decompositions())}


_TEXTS = ("exported", "loaded", "lowered", "shared", "shared lowered")


def _same(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in _TEXTS) and all(
        len(x) == len(y) and all(torch.equal(u, v) for u, v in zip(x, y)) for x, y in zip(a["outputs"], b["outputs"]))


def _backend_flags() -> dict:
    return {"mkldnn enabled": torch._C._get_mkldnn_enabled(), "nnpack enabled": torch._C._get_nnpack_enabled()}


def _global_state() -> dict:
    """What an export in another thread must leave as it is, seen from this thread (lowering an
    LSTM apart: see the last test)."""
    return {
        **_backend_flags(),
        "cycle collector enabled": gc.isenabled(),
        "profile function": sys.getprofile(), "trace function": sys.gettrace(),
        "grad mode": torch.is_grad_enabled(), "default dtype": torch.get_default_dtype(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "function modes": torch._C._len_torch_function_stack(),
        "decomposition table": dict(torch._decomp.decomposition_table),
    }


def test_threads_export_load_and_lower_as_alone_and_change_no_global_state():
    cases = _cases()
    names = list(cases)
    model, example, dynamic, _ = cases["attention"]
    shared = gp.export(model, example, dynamic_shapes=dynamic)
    values = [type(n.meta.get("val")) for n in shared.graph.nodes]
    shape_facts = env_to_json(shared.shape_env)
    alone = {name: _work(cases[name], shared) for name in names}
    expected = _global_state()
    changed: set[str] = set()
    results: list[tuple[str, dict]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            now = _global_state()
            changed.update(f"{k}: {expected[k]!r} -> {now[k]!r}" for k in expected
                           if now[k] != expected[k] and k != "decomposition table")
            if now["decomposition table"] != expected["decomposition table"]:
                changed.add("torch's decomposition table changed")

    def work(offset: int):
        try:
            for r in range(ROUNDS):
                for i in range(len(names)):
                    name = names[(i + offset + r) % len(names)]
                    results.append((name, _work(cases[name], shared)))
        except BaseException as e:   # reported by the main thread
            errors.append(e)

    watcher = threading.Thread(target=watch)
    workers = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    watcher.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    done.set()
    watcher.join()
    assert not errors, errors[0]
    assert len(results) == WORKERS * ROUNDS * len(names)
    assert not changed, sorted(changed)
    different = sorted({(name, _what_differs(got, alone[name])) for name, got in results
                        if not _same(got, alone[name])})
    assert not different, f"done in threads, these differ from the same work done alone: {different}"
    assert [type(n.meta.get("val")) for n in shared.graph.nodes] == values   # printing left its metadata as it was
    assert env_to_json(shared.shape_env) == shape_facts   # lowering reasoned in forks of its environment


def test_only_lowering_an_lstm_touches_the_cpu_backend_flags(monkeypatch):
    """The one exception to "changes nothing another thread can observe": lowering a graph
    holding an LSTM turns torch's process-wide mkldnn and nnpack flags off while it runs (its
    composite would lower to mkldnn_rnn_layer otherwise; torch has no per-thread switch), and
    restores them. Every other lowering leaves them alone."""
    from graphport import _torch as torch_internals

    entered = []
    real = torch_internals.cpu_backend_kernels

    def recording(enabled):
        entered.append(enabled)
        return real(enabled=enabled)

    monkeypatch.setattr(torch_internals, "cpu_backend_kernels", recording)
    before = _backend_flags()
    gp.export(_Conv().eval(), (torch.randn(2, 3, 8, 8),)).run_decompositions()
    gp.export(_Mlp().eval(), (torch.randn(3, 8),)).run_decompositions()
    assert entered == []
    gp.export(nn.LSTM(4, 8, batch_first=True).eval(), (torch.randn(2, 3, 4),)).run_decompositions()
    assert entered == [False] and _backend_flags() == before


def _what_differs(a: dict, b: dict) -> str:
    texts = [k for k in _TEXTS if a[k] != b[k]]
    return ", ".join(texts) or "outputs"

"""What the runtime assertions of data-dependent programs cost per call.

For each model: export with graphport, then run `ep.module()`'s graph with its
assertion nodes (`_assert_scalar`, `sym_constrain_range[_for_size]`), a copy without
them, and an identical second copy with them (the noise floor: its true cost is zero), in
interleaved blocks in one process; the cost is with / without - 1. Eager and
torch.export's module are timed alongside for scale. Rewrites its section of
bench/RESULTS.md.

    PYTHONPATH=src .venv/bin/python bench/runtime_checks.py
"""
from __future__ import annotations

import copy
import datetime
import operator
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers as tf

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.data_dependent.test_moe import ClassicMoE  # noqa: E402

aten = torch.ops.aten
CHECKS = {aten._assert_scalar.default, aten.sym_constrain_range_for_size.default, aten.sym_constrain_range.default}
SIZE_OPS = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge, operator.and_, operator.or_,
            operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, torch.sym_not}


class CheckedMoE(ClassicMoE):
    """Classic routing that also states a capacity per expert with torch._check."""

    def forward(self, x):
        b, s, d = x.shape
        h = x.reshape(-1, d)
        weights, chosen = torch.topk(torch.softmax(self.gate(h), dim=-1), 2, dim=-1)
        out = torch.zeros_like(h)
        mask = torch.nn.functional.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for i, expert in enumerate(self.experts):
            n = mask[i].sum().item()
            torch._check_is_size(n)
            torch._check(n <= h.shape[0] * 2)
            slot, token = torch.where(mask[i])
            out = out.index_add(0, token, expert(h[token]) * weights[token, slot, None])
        return out.reshape(b, s, d)


class Mixtral(torch.nn.Module):
    def __init__(self):
        super().__init__()
        config = tf.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                  num_experts_per_tok=2, max_position_embeddings=64)
        self.model = tf.MixtralForCausalLM(config).eval()

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


class ConstrainAsSize(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= x.shape[0])
        return x[:k].sum(0) + torch.zeros(k).sum()


def models():
    torch.manual_seed(0)
    yield "classic_moe", ClassicMoE().eval(), (torch.randn(4, 16, 16),)
    yield "checked_moe", CheckedMoE().eval(), (torch.randn(4, 16, 16),)
    yield "mixtral", Mixtral(), (torch.randint(0, 64, (2, 16)),)
    yield "constrain_as_size", ConstrainAsSize(), (torch.randn(64, 8), torch.tensor(40))


def without_checks(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy without the check nodes and the size comparisons that only feed them; every
    other node stays, so the two graphs differ by the checks alone."""
    gm = copy.deepcopy(gm)
    doomed = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in CHECKS]
    while doomed:
        node = doomed.pop()
        inputs = [a for a in node.all_input_nodes if a.op == "call_function" and a.target in SIZE_OPS]
        gm.graph.erase_node(node)
        doomed += [a for a in inputs if not a.users and a not in doomed]
    gm.recompile()
    return gm


def per_call(fn, calls: int) -> float:
    """Seconds per call over a block of `calls` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(callables: dict, repetitions: int, calls: int) -> dict[str, list[float]]:
    """Per-call time of each callable in each repetition: every repetition times one block
    of each, in an order rotated from one repetition to the next, so load that comes and goes
    on a shared machine hits all of them alike."""
    names = list(callables)
    out = {name: [] for name in names}
    for r in range(repetitions):
        for name in names[r % len(names):] + names[:r % len(names)]:
            out[name].append(per_call(callables[name], calls))
    return out


def relative(a: list[float], b: list[float]) -> tuple[float, float]:
    """(a / b - 1) two ways: the median of the per-repetition ratios (blocks timed side by
    side), and the ratio of the minima (each callable's least disturbed block)."""
    return statistics.median(x / y for x, y in zip(a, b)) - 1, min(a) / min(b) - 1


def measure(name, model, args, repetitions: int = 61, budget: float = 0.005) -> dict:
    ep = gp.export(model, args)
    module = ep.module()
    checked, twin, unchecked = copy.deepcopy(module), copy.deepcopy(module), without_checks(module)
    ref = torch.export.export(model, args).module()
    n_checks = sum(1 for n in module.graph.nodes if n.op == "call_function" and n.target in CHECKS)
    # the graphs alone (forward skips the input checks of a call, the same for all three)
    callables = {"with": lambda: checked.forward(*args), "twin": lambda: twin.forward(*args),
                 "without": lambda: unchecked.forward(*args), "module": lambda: module(*args),
                 "eager": lambda: model(*args), "torch.export": lambda: ref(*args)}
    with torch.no_grad():
        for fn in callables.values():   # warm-up, and the block size: about `budget` seconds per block
            for _ in range(3):
                fn()
        single = statistics.median(per_call(callables["with"], 1) for _ in range(7))
        calls = max(1, int(budget / single))
        times = interleaved(callables, repetitions, calls)
    cost, cost_min = relative(times["with"], times["without"])
    noise, noise_min = relative(times["twin"], times["with"])
    return {"model": name, "checks": n_checks, "calls": calls,
            **{k: statistics.median(v) for k, v in times.items()},
            "cost": cost, "cost_min": cost_min, "noise": noise, "noise_min": noise_min}


def main() -> None:
    rows = [measure(*m) for m in models()]
    lines = ["<!-- BEGIN runtime-checks (generated; do not edit) -->", "## Runtime assertions of data-dependent programs",
             "", f"Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by "
                 "`PYTHONPATH=src .venv/bin/python bench/runtime_checks.py`, torch "
                 f"{torch.__version__}, torch threads {torch.get_num_threads()}, "
                 f"load average at start {os.getloadavg()[0]:.1f}", "",
             "Each model's exported graph is timed with its assertion nodes (`with`), as a copy without them and "
             "without the comparisons feeding them (`without`), and as a second identical copy of `with` (`twin`: "
             "the noise floor, whose true cost is 0), with `ep.module()`, eager and torch.export's module for "
             "scale. 61 repetitions, each timing one block of calls (about 5 ms) of every callable in a rotated "
             "order. cost = with / without - 1, as the median of the per-repetition ratios and as the ratio of the "
             "fastest blocks; noise = twin / with - 1, the same two ways: a cost within the noise is no cost. "
             "Times are medians, seconds per call.", "",
             "| model | assertion nodes | calls per block | with s | without s | cost (median ratio) | cost (min) "
             "| noise (median ratio) | noise (min) | ep.module() s | eager s | torch.export module s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['checks']} | {r['calls']} | {r['with']:.3g} | {r['without']:.3g} | "
                     f"{r['cost']:+.1%} | {r['cost_min']:+.1%} | {r['noise']:+.1%} | {r['noise_min']:+.1%} | "
                     f"{r['module']:.3g} | {r['eager']:.3g} | {r['torch.export']:.3g} |")
    lines.append("<!-- END runtime-checks -->")
    section = "\n".join(lines) + "\n"
    print(section)
    path = Path(__file__).with_name("RESULTS.md")
    text = path.read_text()
    begin, end = "<!-- BEGIN runtime-checks", "<!-- END runtime-checks -->\n"
    if begin in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    main()

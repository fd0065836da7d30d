"""What the runtime assertions of data-dependent programs cost per call.

For each model: export with graphport, then run the exported module's graph with its
assertion nodes (`_assert_scalar`, `sym_constrain_range[_for_size]`) and a copy without
them, alternating, in one process; the cost is (with - without) / without. Eager and
torch.export's module are timed alongside for scale. Rewrites its section of
bench/RESULTS.md.

    PYTHONPATH=src .venv/bin/python bench/runtime_checks.py
"""
from __future__ import annotations

import copy
import datetime
import operator
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


def timed(fn, args, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        out.append(time.perf_counter() - start)
    return out


def alternating(first, second, rounds: int) -> tuple[list[float], list[float]]:
    """Per-call times of two callables, interleaved call by call so drift hits both alike."""
    a, b = [], []
    for i in range(rounds):
        for fn, out in ((first, a), (second, b)) if i % 2 == 0 else ((second, b), (first, a)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return a, b


def measure(name, model, args, rounds: int = 60) -> dict:
    ep = gp.export(model, args)
    module = ep.module()
    checked = module._graph_module
    unchecked = without_checks(checked)
    state = module._state_values()
    flat = [a for a in args]
    ref = torch.export.export(model, args).module()
    n_checks = sum(1 for n in checked.graph.nodes if n.op == "call_function" and n.target in CHECKS)
    times = {"with": [], "without": [], "eager": [], "torch.export": [], "module": []}
    with torch.no_grad():
        for _ in range(10):   # warm-up
            checked(*state, *flat), unchecked(*state, *flat), model(*args), ref(*args)
        for _ in range(5):
            w, wo = alternating(lambda: checked(*state, *flat), lambda: unchecked(*state, *flat), rounds)
            times["with"] += w
            times["without"] += wo
            times["module"] += timed(module, args, rounds // 4)
            times["eager"] += timed(model, args, rounds // 4)
            times["torch.export"] += timed(ref, args, rounds // 4)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"model": name, "checks": n_checks, **med, "cost": (med["with"] - med["without"]) / med["without"]}


def main() -> None:
    rows = [measure(*m) for m in models()]
    lines = ["<!-- BEGIN runtime-checks (generated; do not edit) -->", "## Runtime assertions of data-dependent programs",
             "", f"Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by "
                 "`PYTHONPATH=src .venv/bin/python bench/runtime_checks.py`, torch "
                 f"{torch.__version__}, torch threads {torch.get_num_threads()}", "",
             "Median seconds per call of the exported graph with its assertion nodes and of a copy without them "
             "(and without the comparisons feeding them), interleaved call by call in one process; "
             "cost = (with - without) / without; rows with 0 assertion nodes show the noise floor. `ep.module()` adds the input checks; "
             "eager and torch.export's module for scale.", "",
             "| model | assertion nodes | graph with s | graph without s | cost | ep.module() s | eager s | "
             "torch.export module s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['checks']} | {r['with']:.3g} | {r['without']:.3g} | {r['cost']:+.1%} | "
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

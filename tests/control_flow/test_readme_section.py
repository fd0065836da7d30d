"""The README's control-flow example runs as written and matches eager on both branches."""
from __future__ import annotations

import re
from pathlib import Path

import torch


def test_readme_example_runs_and_matches_eager() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Control flow", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code.replace("print(ep)", "str(ep)"), "README.md", "exec"), namespace)
    ep, model = namespace["ep"], namespace["EarlyExit"]
    assert "torch.ops.higher_order.cond" in str(ep) and "class true_graph_0" in str(ep)
    eager = model()
    eager.load_state_dict(ep.module().state_dict())
    taken = set()
    for scale in (0.0, 0.01, 1.0, 100.0):
        x = torch.randn(5, 8) * scale
        h = eager.block(x).relu()   # eager, with a Python if (torch.cond in eager compiles each call)
        logits = eager.head(h)
        confident = bool(logits.softmax(-1).max(-1).values.min() > 0.5)
        taken.add(confident)
        assert torch.allclose(ep.module()(x), logits if confident else eager.deep(h), atol=1e-5)
    assert taken == {True, False}, "the inputs must take both branches"

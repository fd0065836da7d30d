"""A static program's load check answers the common operators without torch's kernels
(serde/meta_rules.py), and checks no less for it: a fresh process loads a transformer block
without importing torch._dynamo, computes what the model computes, and still refuses a
tampered node or a flipped weight byte before any output."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

import graphport as gp
from graphport.serde.meta_rules import static_result
from .helpers import saved
from .test_hostile import refused, with_doc
from .test_integrity import flipped


class Block(torch.nn.Module):
    """The operators of a BERT/GPT-2 layer: linear, layer norm, attention, gelu, tanh,
    residual adds, scaling, comparisons and masks."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)
        self.out = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x, ids):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
        mask = (ids[:, None, None, :] >= 0) & (ids[:, None, :, None] != 7)
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h = self.norm(x + self.out(att.transpose(1, 2).reshape(2, 5, 8)))
        return torch.nn.functional.gelu(h) * 0.5 + torch.tanh(h).pow(2.0), ids.cumsum(-1) - 1


def example():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 5, 8), torch.randint(0, 10, (2, 5)))


def test_a_static_block_loads_and_runs_in_a_fresh_process_without_torch_dynamo_sympy_or_capture(tmp_path):
    model, args = example()
    ep = gp.export(model, args)
    path = tmp_path / "block.gport"
    gp.save(ep, path)
    torch.save({"args": args, "expected": model(*args)}, tmp_path / "io.pt")
    damaged = tmp_path / "damaged.gport"
    damaged.write_bytes(flipped(path.read_bytes(), "out.weight"))
    script = textwrap.dedent(f"""
        import sys, torch
        import graphport as gp
        try:
            gp.load({str(damaged)!r})
            raise SystemExit("a flipped weight byte loaded")
        except gp.ArtifactError as e:
            assert "checksum" in str(e), e
        ep = gp.load({str(path)!r})
        assert "torch._dynamo" not in sys.modules, "the load check ran a kernel that imports torch._dynamo"
        saved = torch.load({str(tmp_path / "io.pt")!r})
        got = ep.module()(*saved["args"])
        assert all(torch.equal(a, b) for a, b in zip(got, saved["expected"]))
        # a static program has no sizes to reason about: neither the shape algebra nor capture
        assert "sympy" not in sys.modules, "loading or calling a static program imported sympy"
        assert not [m for m in sys.modules if m.startswith("graphport.capture")], "load imported capture"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_the_rules_answer_every_node_of_the_block_a_python_kernel_would():
    """Which nodes the check leaves to torch: only operators whose meta kernel is C++ or
    does not import torch._dynamo (views, slicing, clone, embedding ...)."""
    model, args = example()
    ep = gp.export(model, args)
    left = set()
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target in _PYTHON_META:
            vals = torch.fx.node.map_aggregate((node.args, node.kwargs), lambda n: getattr(
                n.meta["val"], "gp_meta", n.meta["val"]) if isinstance(n, torch.fx.Node) else n)
            if static_result(node.target, *vals) is None:
                left.add(str(node.target))
    assert not left


_PYTHON_META = {torch.ops.aten.linear.default, torch.ops.aten.layer_norm.default, torch.ops.aten.add.Tensor,
                torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor, torch.ops.aten.gelu.default,
                torch.ops.aten.tanh.default, torch.ops.aten.pow.Tensor_Scalar, torch.ops.aten.ge.Scalar,
                torch.ops.aten.ne.Scalar, torch.ops.aten.__and__.Tensor, torch.ops.aten.cumsum.default,
                torch.ops.aten.scaled_dot_product_attention.default}


def test_a_tampered_node_answered_by_a_rule_is_refused_with_the_node_named():
    model, args = example()
    data = saved(gp.export(model, args))

    def node_of(doc, target):
        return next(n for n in doc["graph"]["nodes"] if n["op"] == "call_function"
                    and n["target"].get("op") == f"{target}.default")

    def shape(doc):
        node_of(doc, "aten::linear")["meta"]["val"]["tensor"]["shape"][-1] = 25
    err = refused(with_doc(data, shape), "shape")
    assert "linear" in str(err)

    def dtype(doc):
        node_of(doc, "aten::gelu")["meta"]["val"]["tensor"]["dtype"] = "double"
    err = refused(with_doc(data, dtype), "dtype")
    assert "gelu" in str(err)

    def mismatched(doc):   # sizes that no longer fit: the rule steps aside, the kernel refuses
        node_of(doc, "aten::layer_norm")["args"]["tuple"][1] = [7]
    refused(with_doc(data, mismatched), "layer_norm")

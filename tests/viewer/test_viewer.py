"""The graph viewer: the data it is given, and the page itself in a real headless Chromium."""
import re
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport.viewer import page, render_html, write_html
from graphport.viewer.data import STATS_SAMPLE, program_data
from tests.cli.entry import inputs, make_model
from tests.viewer.page import click_selector, details, open_page, settle, shown_names, text_of, type_search


def token_program():
    batch, seq = gp.Dim("batch", max=8), gp.Dim("seq", min=1, max=16)
    return gp.export(make_model(), inputs(), dynamic_shapes={"ids": {0: batch, 1: seq}, "x": {0: batch, 1: seq}})


def with_branches(ep):
    """`ep` with a control-flow node whose two branches are GraphModules reached by get_attr,
    as cond lays them out (the viewer only reads the graph, it never runs it)."""
    branch = gp.export(lambda x: torch.sin(x) + 1, (torch.randn(3),)).graph_module
    gm = ep.graph_module
    gm.true_graph_0, gm.false_graph_0 = branch, branch
    graph = gm.graph
    add = next(n for n in graph.nodes if n.name == "add")
    with graph.inserting_after(add):
        t = graph.get_attr("true_graph_0")
    with graph.inserting_after(t):
        f = graph.get_attr("false_graph_0")
    with graph.inserting_after(f):
        cond = graph.call_function(torch.ops.higher_order.cond, (True, t, f, (add,)))
    cond.meta["val"] = (add.meta["val"],)
    return ep


def test_data_has_ops_shapes_with_dim_names_sources_and_module_groups():
    data = program_data(token_program())
    nodes = {n["n"]: n for n in data["graphs"]["main"]}
    groups = [g["path"] for g in data["groups"]]
    assert nodes["linear"]["o"] == "aten.linear.default"
    assert nodes["linear"]["s"] == "float32[batch, seq, 3]"
    assert nodes["ids"]["s"] == "int64[batch, seq]" and nodes["ids"]["o"] == "input"
    assert re.search(r"entry\.py:\d+ in forward: return self\.lin\(self\.emb\(ids\)\)", data["sources"][nodes["linear"]["l"]])
    assert data["groups"][nodes["linear"]["g"]] == {"path": "lin", "type": "Linear", "parent": -1}
    # a weight sits in the module that owns it
    assert nodes["p_lin_weight"]["g"] == groups.index("lin") and nodes["p_lin_weight"]["o"] == "parameter"
    assert nodes["p_lin_weight"]["t"] == "parameter lin.weight"
    assert [data["graphs"]["main"][i]["n"] for i in nodes["add"]["i"]] == ["linear", "slice_1"]
    # arguments are named from the operator's schema; node arguments are node indices
    index = {n["n"]: i for i, n in enumerate(data["graphs"]["main"])}
    assert nodes["linear"]["a"] == [["input", index["embedding"], 0], ["weight", index["p_lin_weight"], 0],
                                    ["bias", index["p_lin_bias"], 0]]
    assert nodes["output"]["a"] == [["result", [index["add"]], 0]]


def test_weights_are_marked_hidden_with_their_statistics():
    ep = token_program()
    nodes = {n["n"]: n for n in program_data(ep)["graphs"]["main"]}
    weight = ep.state_dict["lin.weight"]
    assert nodes["p_lin_weight"]["w"] == 1 and "w" not in nodes["linear"] and "w" not in nodes["ids"]
    assert nodes["p_lin_weight"]["st"] == {"min": f"{weight.min().item():.3g}", "max": f"{weight.max().item():.3g}",
                                           "mean": f"{weight.mean().item():.3g}", "std": f"{weight.std().item():.3g}"}


def test_statistics_are_skipped_for_meta_and_empty_tensors_and_sampled_for_large_ones():
    from graphport.viewer.data import _statistics
    assert _statistics(torch.empty(3, 4, device="meta")) == {}
    assert _statistics(torch.empty(0, 4)) == {}
    # 3 * STATS_SAMPLE + 1 values: every 4th is read; here those are the even ones 0, 8, 16, ...
    big = torch.arange(3 * STATS_SAMPLE + 1, dtype=torch.float64).reshape(-1, 1) * 2
    stats = _statistics(big)["st"]
    assert stats["sampled"] == f"{(3 * STATS_SAMPLE) // 4 + 1} of {3 * STATS_SAMPLE + 1} values"
    assert stats["min"] == "0" and stats["max"] == f"{(3 * STATS_SAMPLE) * 2:.3g}"
    assert _statistics(torch.tensor([3])) == {"st": {"min": "3", "max": "3", "mean": "3"}}
    assert _statistics(torch.tensor([True, False])) == {"st": {"min": "0", "max": "1", "mean": "0.5", "std": "0.707"}}


def test_arguments_not_given_show_the_schema_default_and_keyword_only_ones_by_name():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            return torch.nn.functional.layer_norm(self.conv(x), [4, 4], eps=1e-3).sum(-1, dtype=torch.float64)

    data = program_data(gp.export(Model(), (torch.randn(1, 3, 8, 8),)))
    nodes = {n["n"]: n for n in data["graphs"]["main"]}
    conv = {name: (value, default) for name, value, default in nodes["conv2d"]["a"]}
    assert conv["stride"] == ("[2, 2]", 0) and conv["padding"] == ("[1, 1]", 0)
    assert conv["dilation"] == ("[1, 1]", 1) and conv["groups"] == ("1", 1)
    norm = {name: (value, default) for name, value, default in nodes["layer_norm"]["a"]}
    assert norm["eps"] == ("0.001", 0) and norm["normalized_shape"] == ("[4, 4]", 0)
    assert {name: value for name, value, _ in nodes["sum_1"]["a"]}["dtype"] == "torch.float64"


def test_control_flow_subgraphs_are_included_and_referenced():
    data = program_data(with_branches(token_program()))
    cond = next(n for n in data["graphs"]["main"] if n["o"] == "cond")
    assert cond["sg"] == ["true_graph_0", "false_graph_0"]
    assert {n["o"] for n in data["graphs"]["true_graph_0"]} >= {"aten.sin.default", "aten.add.Tensor"}


def test_the_page_is_self_contained_and_the_data_cannot_close_its_script_element():
    html = page({"graphs": {"main": [{"n": "x", "k": "placeholder", "o": "input", "s": "</script><b>", "l": -1,
                                      "g": -1, "i": []}]}, "sources": [], "groups": [], "dims": {}}, "t<1>")
    assert html.count("</script>") == 2 and "<\\/script><b>" in html
    assert "<title>t&lt;1&gt;</title>" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|@import""", html)


def synthetic_program(stages=20, blocks=100, ops=5):
    """Program data of 10,000 nodes nested model > stage > block, as a 7B LLaMA's program has."""
    groups, nodes = [{"path": "model", "type": "Model", "parent": -1}], []
    nodes.append({"n": "x", "k": "placeholder", "o": "input", "s": "float32[batch, 4096]", "l": -1, "g": -1, "i": []})
    for s in range(stages):
        groups.append({"path": f"model.stages.{s}", "type": "Stage", "parent": 0})
        stage = len(groups) - 1
        for b in range(blocks):
            groups.append({"path": f"model.stages.{s}.blocks.{b}", "type": "Block", "parent": stage})
            for o in range(ops):
                nodes.append({"n": f"op_{s}_{b}_{o}", "k": "call_function", "o": "aten.mul.Tensor",
                              "s": "float32[batch, 4096]", "l": 0, "g": len(groups) - 1, "i": [len(nodes) - 1]})
    nodes.append({"n": "output", "k": "output", "o": "output", "s": "", "l": -1, "g": -1, "i": [len(nodes) - 1]})
    return {"graphs": {"main": nodes}, "sources": ["model.py:12 in forward: x = x * 2"], "groups": groups, "dims": {}}


# -- in Chromium ---------------------------------------------------------------------------------

def test_the_page_loads_without_errors_or_network_and_a_click_shows_node_details(browser, tmp_path):
    path = tmp_path / "graph.html"
    write_html(with_branches(token_program()), path)
    open_page(browser, path)
    browser.screenshot(str(tmp_path / "graph.png"))
    assert (tmp_path / "graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert browser.errors() == []
    assert browser.requested_urls() == [path.as_uri()]
    # the three weights and the two branch modules' get_attr are hidden: 13 nodes, 8 drawn
    assert browser.evaluate("document.querySelectorAll('#nodes [data-node]').length") == 8
    assert "p_lin_weight" not in shown_names(browser)
    assert "13 nodes" in text_of(browser, "#stats")
    click_selector(browser, "[data-name='linear']")
    assert text_of(browser, "#details h3") == "linear"
    shown = details(browser)
    assert shown["operator"] == "aten.linear" and shown["overload"] == "default"
    assert shown["output"] == "float32[batch, seq, 3]" and shown["dtype"] == "float32"
    assert re.search(r"entry\.py:\d+ in forward", shown["source"])
    assert shown["module"] == "lin (Linear)"
    assert shown["input"] == "embedding float32[batch, seq, 4]"
    assert shown["weight"] == "p_lin_weight float32[3, 4]"
    assert shown["inputs"] == "embedding float32[batch, seq, 4], p_lin_weight float32[3, 4], p_lin_bias float32[3]"
    assert shown["users"] == "add float32[batch, seq, 3]"
    assert browser.evaluate("document.querySelector(\"[data-name='linear']\").classList.contains('selected')")
    # its weights, on demand, drawn just above it
    click_selector(browser, "#show-node-weights")
    assert {"p_lin_weight", "p_lin_bias"} <= set(shown_names(browser))
    assert browser.evaluate("""(() => { const l = graphportViewer.layout.items;
        const w = l.get('n' + graphportViewer.graph.nodes.findIndex(n => n.n === 'p_lin_weight'));
        const u = l.get('n' + graphportViewer.graph.nodes.findIndex(n => n.n === 'linear'));
        return w.ay < u.ay && u.ay - w.ay < 100; })()""")
    # a weight's details: what it is and its values
    click_selector(browser, "[data-name='p_lin_weight']")
    shown = details(browser)
    assert shown["target"] == "parameter lin.weight" and shown["output"] == "float32[3, 4]"
    assert {"min", "max", "mean", "std"} <= set(shown)
    assert browser.errors() == []


def test_search_collapse_and_control_flow_subgraphs(browser, tmp_path):
    path = tmp_path / "graph.html"
    write_html(with_branches(token_program()), path)
    open_page(browser, path)
    # the embedding module holds one node: it is the node's label, not a box
    assert browser.evaluate("document.querySelectorAll('#groups .group').length") == 0
    # search by op
    type_search(browser, "embedding")
    assert text_of(browser, "#results div") == "1 match"
    click_selector(browser, "#results a")
    assert text_of(browser, "#details h3") == "embedding"
    # a control-flow node opens its branches
    click_selector(browser, "#fit")
    click_selector(browser, "[data-name='cond']")
    assert "open true_graph_0" in text_of(browser, "#details dd.subgraphs")
    click_selector(browser, "#details dd.subgraphs a")
    assert text_of(browser, "#crumbs") == "main\u203a true_graph_0"
    names = shown_names(browser)
    assert "sin" in names and "linear" not in names
    click_selector(browser, "#crumbs a")
    assert "linear" in shown_names(browser)
    assert browser.errors() == []


def test_ten_thousand_nodes_start_collapsed_and_draw_only_what_is_in_view(browser, tmp_path):
    data = synthetic_program()
    assert len(data["graphs"]["main"]) == 10_002
    path = tmp_path / "big.html"
    path.write_text(page(data, "big"))
    open_page(browser, path)
    assert browser.errors() == []
    boxes = browser.evaluate("graphportViewer.layout.leaves.length")
    assert boxes <= 50     # modules collapsed to a readable number of boxes
    assert browser.evaluate("!document.getElementById('minimap').hidden")
    # expanding everything lays out all 10,002 nodes but puts only those in view in the DOM
    click_selector(browser, "#expand-all")
    assert browser.evaluate("graphportViewer.layout.leaves.length") == 10_002
    drawn = browser.evaluate("document.querySelectorAll('#nodes > g').length")
    assert 0 < drawn < 500
    # search finds a node deep inside and reveals it
    type_search(browser, "op_19_99_4")
    click_selector(browser, "#results a")
    assert text_of(browser, "#details h3") == "op_19_99_4"
    assert browser.evaluate("!!document.querySelector(\"[data-name='op_19_99_4']\")")
    assert browser.errors() == []


def fan_out_program(count):
    """Program data of `count` chained nodes, each also reading the input x, and no modules."""
    nodes = [{"n": "x", "k": "placeholder", "o": "input", "s": "float32[4]", "l": -1, "g": -1, "i": []}]
    for k in range(count):
        nodes.append({"n": f"mul_{k}", "k": "call_function", "o": "aten.mul.Tensor", "s": "float32[4]", "l": -1,
                      "g": -1, "i": [len(nodes) - 1, 0] if k else [0]})
    return {"graphs": {"main": nodes}, "sources": [], "groups": [], "dims": {}}


def test_a_node_used_by_a_thousand_others_draws_one_trunk_not_one_line_each(browser, tmp_path):
    """x feeds every one of 1,000 chained nodes: the edges share one run of dummies, drawn once,
    so what is drawn grows with the nodes, not with their square."""
    data = fan_out_program(1000)
    nodes = data["graphs"]["main"]
    path = tmp_path / "fan.html"
    path.write_text(page(data, "fan"))
    open_page(browser, path)
    click_selector(browser, "#fit")
    assert browser.evaluate("document.querySelectorAll('#nodes .node').length") == 1001
    drawn = browser.evaluate("[...document.querySelectorAll('#edges path')].reduce((n, p) => n + p.getAttribute('d').length, 0)")
    assert drawn < 500 * len(nodes)
    assert browser.errors() == []


@pytest.mark.slow
def test_a_real_eight_thousand_node_program(browser, tmp_path):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return x + torch.relu(self.lin(x)) * 0.5

    model = torch.nn.Sequential(*[torch.nn.Sequential(*[Block() for _ in range(70)]) for _ in range(20)])
    ep = gp.export(model, (torch.randn(2, 8),), dynamic_shapes={"input": {0: gp.Dim("batch", max=64)}})
    assert len(ep.graph.nodes) > 8000
    path = tmp_path / "real.html"
    write_html(ep, path)
    open_page(browser, path)
    assert browser.evaluate("graphportViewer.layout.leaves.length") <= 50
    assert browser.errors() == []


def test_render_html_names_the_program():
    html = render_html(token_program(), "my model")
    assert "<title>my model</title>" in html and '"title":"my model"' in html

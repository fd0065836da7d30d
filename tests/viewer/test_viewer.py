"""The graph viewer: the data it is given, and the page itself in a real headless Chromium."""
import re
from pathlib import Path

import pytest
import torch

import graphport as gp
from graphport.viewer import page, render_html, write_html
from graphport.viewer.data import program_data
from tests.cli.entry import inputs, make_model
from tests.viewer.browser import Browser, find_chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)")


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

@pytest.fixture(scope="module")
def browser():
    b = Browser(CHROMIUM)
    yield b
    b.close()


def open_page(browser, path: Path):
    browser.events.clear()
    browser.open(path.as_uri())
    # the page sets data-ready once it has drawn
    assert browser.evaluate("""new Promise(r => { const poll = () => document.body.dataset.ready ? r(true)
                                                   : requestAnimationFrame(poll); poll(); })""")


def click_selector(browser, selector: str):
    box = browser.evaluate(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
                           " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.click(*box)
    settle(browser)


def settle(browser):
    """Wait until the page has drawn what the last event changed (drawing happens on animation frames)."""
    browser.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))")


@needs_chromium
def test_the_page_loads_without_errors_or_network_and_a_click_shows_node_details(browser, tmp_path):
    path = tmp_path / "graph.html"
    write_html(with_branches(token_program()), path)
    open_page(browser, path)
    browser.screenshot(str(tmp_path / "graph.png"))
    assert (tmp_path / "graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert browser.errors() == []
    assert browser.requested_urls() == [path.as_uri()]
    assert browser.evaluate("document.querySelectorAll('#nodes [data-node]').length") == 13
    assert "13 nodes" in browser.evaluate("document.getElementById('stats').textContent")
    click_selector(browser, "[data-name='linear']")
    details = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#details dd')]
                                  .map(dd => [dd.className, dd.textContent]))""")
    assert browser.evaluate("document.querySelector('#details h3').textContent") == "linear"
    assert details["op"] == "aten.linear.default"
    assert details["shape"] == "float32[batch, seq, 3]"
    assert re.search(r"entry\.py:\d+ in forward", details["source"])
    assert details["module"] == "lin (Linear)"
    assert details["inputs"] == "embedding, p_lin_weight, p_lin_bias" and details["users"] == "add"
    assert browser.evaluate("document.querySelector(\"[data-name='linear']\").classList.contains('selected')")
    assert browser.errors() == []


@needs_chromium
def test_search_collapse_and_control_flow_subgraphs(browser, tmp_path):
    path = tmp_path / "graph.html"
    write_html(with_branches(token_program()), path)
    open_page(browser, path)
    # collapsing a module folds its nodes into one box; clicking the box opens it again
    click_selector(browser, "[data-group] text")
    assert browser.evaluate("document.querySelectorAll('[data-collapsed]').length") == 1
    click_selector(browser, "[data-collapsed]")
    assert browser.evaluate("document.querySelectorAll('[data-collapsed]').length") == 0
    # search by op
    browser.evaluate("(() => { const s = document.getElementById('search'); s.value = 'embedding';"
                     " s.dispatchEvent(new Event('input')); })()")
    settle(browser)
    assert browser.evaluate("document.querySelector('#results div').textContent") == "1 match"
    click_selector(browser, "#results a")
    assert browser.evaluate("document.querySelector('#details h3').textContent") == "embedding"
    # a control-flow node opens its branches
    click_selector(browser, "[data-name='cond']")
    assert "open true_graph_0" in browser.evaluate("document.querySelector('#details dd.subgraphs').textContent")
    click_selector(browser, "#details dd.subgraphs a")
    assert browser.evaluate("document.getElementById('crumbs').textContent") == "main\u203a true_graph_0"
    names = browser.evaluate("[...document.querySelectorAll('[data-name]')].map(e => e.dataset.name)")
    assert "sin" in names and "linear" not in names
    click_selector(browser, "#crumbs a")
    assert "linear" in browser.evaluate("[...document.querySelectorAll('[data-name]')].map(e => e.dataset.name)")
    assert browser.errors() == []


@needs_chromium
def test_ten_thousand_nodes_start_collapsed_and_draw_only_what_is_in_view(browser, tmp_path):
    data = synthetic_program()
    assert len(data["graphs"]["main"]) == 10_002
    path = tmp_path / "big.html"
    path.write_text(page(data, "big"))
    open_page(browser, path)
    assert browser.errors() == []
    boxes = browser.evaluate("graphportViewer.layout.order.length")
    assert 20 <= boxes <= 300     # modules collapsed down to the budget
    drawn = browser.evaluate("document.querySelectorAll('#nodes > g').length")
    assert drawn <= boxes
    # expanding everything lays out all 10,002 nodes but puts only those in view in the DOM
    click_selector(browser, "#expand-all")
    assert browser.evaluate("graphportViewer.layout.order.length") == 10_002
    drawn = browser.evaluate("document.querySelectorAll('#nodes > g').length")
    assert 0 < drawn < 500
    # search finds a node deep inside and reveals it
    browser.evaluate("(() => { const s = document.getElementById('search'); s.value = 'op_19_99_4';"
                     " s.dispatchEvent(new Event('input')); })()")
    settle(browser)
    click_selector(browser, "#results a")
    assert browser.evaluate("document.querySelector('#details h3').textContent") == "op_19_99_4"
    assert browser.evaluate("!!document.querySelector(\"[data-name='op_19_99_4']\")")
    browser.screenshot(str(tmp_path / "big.png"))
    assert browser.errors() == []


@pytest.mark.slow
@needs_chromium
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
    assert browser.evaluate("graphportViewer.layout.order.length") <= 300
    assert browser.errors() == []


def test_render_html_names_the_program():
    html = render_html(token_program(), "my model")
    assert "<title>my model</title>" in html and '"title":"my model"' in html

"""The viewer on real models, as a user sees it in Chromium: a BERT-base-sized program (12 layers)
and a ResNet-shaped CNN, and the same page for a program exported by torch.export (.pt2)."""
import base64

import pytest
import torch

import graphport as gp
from graphport.interop import from_torch
from graphport.viewer import write_html
from graphport.viewer.data import program_data
from tests.viewer.models import bert_program, cnn_program
from tests.viewer.page import (click_selector, details, downward_fraction, geometry, open_page, overlaps, png_ok,
                               settle, shown_names, text_of, type_search)


@pytest.fixture(scope="module")
def bert_page(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert") / "bert.html"
    write_html(bert_program(), path)
    return path


@pytest.fixture(scope="module")
def cnn_page(tmp_path_factory):
    path = tmp_path_factory.mktemp("cnn") / "cnn.html"
    write_html(cnn_program(), path)
    return path


def check_readable(browser):
    """Fit the whole graph, then: no boxes overlap, and nearly every edge runs downwards."""
    click_selector(browser, "#fit")
    geo = geometry(browser)
    assert len(geo["nodes"]) == browser.evaluate("graphportViewer.layout.leaves.length")   # all drawn
    assert overlaps(geo) == []
    assert downward_fraction(geo) >= 0.95
    return geo


def test_bert_opens_readable_collapsed_and_expands_in_place(browser, bert_page, tmp_path):
    open_page(browser, bert_page)
    assert browser.errors() == [] and browser.requested_urls() == [bert_page.as_uri()]
    browser.screenshot(str(tmp_path / "open.png"))
    assert png_ok((tmp_path / "open.png").read_bytes())
    # weights hidden, the 12 layers folded in a column under the embeddings
    assert not any(name.startswith("p_") for name in shown_names(browser))
    layers = browser.evaluate("""graphportViewer.layout.leaves.filter(it => it.group >= 0)
                                 .map(it => [graphportViewer.graph.nodes[it.first].g, it.ax, it.ay])""")
    assert len(layers) == 12
    assert all(abs(x - layers[0][1]) < 250 for _, x, _ in layers)            # one column
    assert [y for _, _, y in layers] == sorted(y for _, _, y in layers)       # in order, top to bottom
    check_readable(browser)
    # expanding a layer in place: its box opens where the folded box was, and nothing overlaps
    before = browser.evaluate("(() => { const r = document.querySelector('[data-collapsed]').getBoundingClientRect();"
                              " return [r.left, r.top]; })()")
    click_selector(browser, "[data-collapsed]")
    after = browser.evaluate("""(() => { const r = document.querySelector('#groups .group:last-child rect')
                                 .getBoundingClientRect(); return [r.left, r.top]; })()""")
    assert browser.evaluate("graphportViewer.layout.leaves.length") > 12 + 20
    assert abs(before[1] - after[1]) < 2
    geo = geometry(browser)
    assert overlaps(geo) == []
    # a box's title folds it again (zoomed in around the title, which a fitted view is too small to show)
    expanded = browser.evaluate("graphportViewer.layout.leaves.length")
    browser.evaluate("""(() => { const r = document.querySelector('#groups .group:last-child rect').getBoundingClientRect();
        const c = document.getElementById('canvas').getBoundingClientRect();
        graphportViewer.zoom(1 / graphportViewer.view.k, r.left - c.left + 20, r.top - c.top + 8); })()""")
    settle(browser)
    click_selector(browser, "#groups .group:last-child text")
    assert browser.evaluate("graphportViewer.layout.leaves.length") < expanded
    # everything expanded, with every weight drawn: still no overlaps, still top to bottom
    click_selector(browser, "#expand-all")
    click_selector(browser, "#weights")
    assert browser.evaluate("graphportViewer.layout.leaves.length") == len(program_nodes(browser))
    check_readable(browser)
    assert browser.errors() == []


def program_nodes(browser):
    return browser.evaluate("graphportViewer.graph.nodes.map(n => n.n)")


def test_bert_node_details_name_every_argument(browser, bert_page):
    open_page(browser, bert_page)
    type_search(browser, "layer_norm_1")
    click_selector(browser, "#results a")
    click_selector(browser, "[data-name='layer_norm_1']")    # the node itself, clicked where it is drawn
    shown = details(browser)
    assert shown["operator"] == "aten.layer_norm" and shown["overload"] == "default"
    assert shown["eps"] == "1e-12" and shown["normalized_shape"] == "[64]"
    assert shown["input"] == "add_4 float32[batch, seq, 64]"
    assert shown["weight"].startswith("p_encoder_layer_0_attention_output_LayerNorm_weight float32[64]")
    assert shown["output"] == "float32[batch, seq, 64]" and shown["dtype"] == "float32"
    assert "modeling_bert.py" in shown["source"]
    assert shown["module"].endswith("encoder.layer.0.attention.output.LayerNorm (LayerNorm)")
    # the user's Dim names everywhere: in node boxes too
    assert "batch" in text_of(browser, "[data-name='layer_norm_1'] text.shape")
    assert browser.errors() == []


def test_bert_path_search_minimap_and_export(browser, bert_page):
    open_page(browser, bert_page)
    assert browser.evaluate("!document.getElementById('minimap').hidden")
    # the word embedding reaches the pooler through every layer (each one's residual add)
    names = browser.evaluate("""(() => { const ns = graphportViewer.graph.nodes;
        return graphportViewer.showPath(ns.findIndex(n => n.n === 'embedding'), ns.findIndex(n => n.n === 'tanh')); })()""")
    assert names[0] == "embedding" and names[-1] == "tanh" and len(names) > 24
    settle(browser)
    assert "path embedding \u2192 tanh" in text_of(browser, "#pathbar")
    click_selector(browser, "#fit")
    assert browser.evaluate("document.querySelectorAll('#edges .on-path').length") >= 12
    # search marks folded modules that hold a match
    type_search(browser, "scaled_dot_product")
    assert text_of(browser, "#results div") == "12 matches"
    assert browser.evaluate("document.querySelectorAll('.kind-group.match').length") == 12
    svg = browser.evaluate("graphportViewer.exportSVG()")
    assert svg.startswith("<svg") and "data-collapsed" in svg and "<style>" in svg
    assert browser.evaluate(f"new DOMParser().parseFromString({svg!r}, 'image/svg+xml')"
                            ".getElementsByTagName('parsererror').length") == 0
    png = browser.evaluate("graphportViewer.exportPNG()")
    assert png.startswith("data:image/png;base64,") and png_ok(base64.b64decode(png.split(",", 1)[1]))
    assert browser.errors() == []


def test_cnn_is_readable_and_conv_shows_stride_and_padding(browser, cnn_page):
    open_page(browser, cnn_page)
    assert browser.errors() == []
    check_readable(browser)
    click_selector(browser, "#expand-all")
    check_readable(browser)
    type_search(browser, "conv2d")
    click_selector(browser, "#results a")
    click_selector(browser, "[data-name='conv2d']")
    shown = details(browser)
    assert shown["operator"] == "aten.conv2d"
    assert shown["stride"] == "[2, 2]" and shown["padding"] == "[3, 3]" and shown["dilation"] == "[1, 1]"
    assert shown["output"] == "float32[batch, 16, 32, 32]"
    assert shown["module"].endswith("embedder.embedder.convolution (Conv2d)")
    # dragging pans the view (and is not a click); zoom changes the scale; fit brings the whole
    # graph back into the window
    x, y, selected = browser.evaluate("[graphportViewer.view.x, graphportViewer.view.y, "
                                      "document.querySelector('#details h3').textContent]")
    browser.drag(300, 400, 420, 340)
    settle(browser)
    assert browser.evaluate("[graphportViewer.view.x, graphportViewer.view.y]") == [x + 120, y - 60]
    assert text_of(browser, "#details h3") == selected
    k = browser.evaluate("graphportViewer.view.k")
    click_selector(browser, "#zoom-in")
    assert browser.evaluate("graphportViewer.view.k") > k
    click_selector(browser, "#fit")
    inside = browser.evaluate("""(() => { const c = document.getElementById('canvas').getBoundingClientRect();
        return [...document.querySelectorAll('#nodes .node rect')].every(n => { const r = n.getBoundingClientRect();
            return r.left >= c.left && r.right <= c.right && r.top >= c.top && r.bottom <= c.bottom; }); })()""")
    assert inside
    assert browser.errors() == []


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_a_torch_export_pt2_gets_the_same_page(browser, tmp_path):
    model = SmallCNN().eval()
    tep = torch.export.export(model, (torch.randn(2, 3, 16, 16),),
                              dynamic_shapes={"x": {0: torch.export.Dim("batch", max=32)}})
    torch.export.save(tep, tmp_path / "model.pt2")
    ep = from_torch(torch.export.load(tmp_path / "model.pt2"))
    data = program_data(ep)
    # torch keeps no Dim names: the program names the size after the input it is read from, and
    # the page uses that one name everywhere
    (name,) = data["dims"].values()
    shapes = {n["n"]: n["s"] for n in data["graphs"]["main"]}
    assert shapes["x"] == f"float32[{name}, 3, 16, 16]" and shapes["relu"] == f"float32[{name}, 8, 8, 8]"
    path = tmp_path / "pt2.html"
    write_html(ep, path)
    open_page(browser, path)
    assert browser.errors() == []
    check_readable(browser)
    click_selector(browser, "[data-name='conv2d']")
    shown = details(browser)
    assert shown["stride"] == "[2, 2]" and shown["padding"] == "[1, 1]"
    assert shown["output"] == f"float32[{name}, 8, 8, 8]"
    assert shown["module"] == "conv (Conv2d)"
    click_selector(browser, "[data-name='batch_norm']")
    assert details(browser)["eps"] == "1e-05"
    # and a .gport of the same program opens the same page
    gp.save(ep, tmp_path / "model.gport")
    assert program_data(gp.load(tmp_path / "model.gport")) == data
    assert browser.errors() == []


@pytest.mark.slow
def test_bert_base_weights_have_statistics_sampled_when_large(browser, tmp_path):
    ep = bert_program(hidden=768, heads=12)
    nodes = {n["n"]: n for n in program_data(ep)["graphs"]["main"]}
    weight = ep.state_dict["encoder.layer.0.intermediate.dense.weight"]     # 3072 x 768
    stats = nodes["p_encoder_layer_0_intermediate_dense_weight"]["st"]
    assert stats["sampled"].endswith(f"of {weight.numel()} values")
    assert abs(float(stats["mean"]) - weight.mean().item()) < 3 * weight.std().item() / 100
    path = tmp_path / "bert-base.html"
    write_html(ep, path)
    open_page(browser, path)
    type_search(browser, "p_encoder_layer_0_intermediate_dense_weight")
    click_selector(browser, "#results a")
    shown = details(browser)
    assert shown["output"] == "float32[3072, 768]" and shown["sampled"] == stats["sampled"]
    assert browser.errors() == []


@pytest.mark.slow
def test_a_7b_llama_program_on_the_meta_device(browser, tmp_path):
    import transformers as tf
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(tf.LlamaConfig()).eval()
    ep = gp.export(model, (torch.randint(0, 1000, (1, 64), device="meta"),), {"use_cache": False})
    path = tmp_path / "llama.html"
    write_html(ep, path)
    open_page(browser, path)
    assert browser.errors() == []
    # the 32 decoder layers, folded, in one column; readable and top to bottom
    assert browser.evaluate("graphportViewer.layout.leaves.filter(it => it.group >= 0).length") >= 32
    check_readable(browser)
    type_search(browser, "p_model_layers_0_self_attn_q_proj_weight")
    click_selector(browser, "#results a")
    shown = details(browser)
    assert shown["output"] == "float32[4096, 4096]" and "min" not in shown    # no values on meta
    assert browser.errors() == []


@pytest.mark.slow
def test_a_stable_diffusion_unet_on_the_meta_device(browser, tmp_path):
    """SD 1.5's UNet (down, mid and up blocks with skip connections across the whole graph)."""
    diffusers = pytest.importorskip("diffusers")
    with torch.device("meta"):
        unet = diffusers.UNet2DConditionModel(sample_size=64, cross_attention_dim=768).eval()
    args = (torch.randn(1, 4, 64, 64, device="meta"), torch.tensor(10, device="meta"),
            torch.randn(1, 77, 768, device="meta"))
    ep = gp.export(unet, args)
    path = tmp_path / "unet.html"
    write_html(ep, path)
    open_page(browser, path)
    assert browser.errors() == []
    check_readable(browser)
    click_selector(browser, "#expand-all")
    check_readable(browser)   # every node drawn, the skip connections included
    type_search(browser, "conv2d")
    click_selector(browser, "#results a")
    assert "stride" in text_of(browser, "#details")
    assert browser.errors() == []

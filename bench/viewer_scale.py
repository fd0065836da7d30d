"""The viewer at scale: a 10,000-node program (nested modules; and flat, one input read by
every node), a 24-layer BERT, a 7B LLaMA's program and Stable Diffusion 1.5's UNet.

For each page: its size, the time Python takes to write it (page data, with the weights'
statistics, and HTML; not the export), and in headless Chromium the time
from navigation to the first drawing (modules collapsed: parsing the data, layout, drawing), then the time to lay out and draw
every node expanded (the worst case a user can ask for), and to fit it in the window. The
synthetic 10,000-node program is measured next to a 100-node one of the same shape, as a ratio.
Times in the page are medians of 3 openings.
Needs chromium.

    PYTHONPATH=src .venv/bin/python bench/viewer_scale.py
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import torch  # noqa: E402
import transformers as tf  # noqa: E402

import graphport as gp  # noqa: E402
from graphport.viewer import page  # noqa: E402
from graphport.viewer.data import program_data  # noqa: E402
from tests.viewer.browser import Browser, find_chromium  # noqa: E402
from tests.viewer.models import bert_program  # noqa: E402
from tests.viewer.test_viewer import fan_out_program, synthetic_program  # noqa: E402

REPEATS = 3   # each page opened this many times, the median kept (the machine may be shared)
READY = """new Promise(r => { const poll = () => document.body.dataset.ready ? r(true) : requestAnimationFrame(poll);
                          poll(); })"""
# lay out and draw, then wait for the frame after the drawing
TIMED_CLICK = """new Promise(r => {{ const t = performance.now(); document.getElementById({button!r}).click();
    requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now() - t))); }})"""


def llama_7b_program():
    """A 7B LLaMA's program (32 layers, hidden 4096) exported on the meta device: no weights."""
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(tf.LlamaConfig()).eval()
    ids = torch.randint(0, 1000, (1, 64), device="meta")
    return gp.export(model, (ids,), {"use_cache": False})


def sd_unet_program():
    """Stable Diffusion 1.5's UNet (diffusers' default blocks, cross-attention 768) on the meta device."""
    import diffusers
    with torch.device("meta"):
        unet = diffusers.UNet2DConditionModel(sample_size=64, cross_attention_dim=768).eval()
    args = (torch.randn(1, 4, 64, 64, device="meta"), torch.tensor(10, device="meta"),
            torch.randn(1, 77, 768, device="meta"))
    return gp.export(unet, args)


def measure(browser: Browser, name: str, program, directory: Path) -> dict:
    """`program`: an ExportedProgram (its page data is part of the write time) or page data."""
    start = time.perf_counter()
    data = program if isinstance(program, dict) else program_data(program)
    html = page(data, name)
    write_s = time.perf_counter() - start
    path = directory / f"{name}.html"
    path.write_text(html)
    runs = []
    for _ in range(REPEATS):
        browser.open(path.as_uri())
        browser.evaluate(READY)
        open_s = browser.evaluate("performance.now()") / 1000   # since navigation started
        boxes = browser.evaluate("graphportViewer.layout.leaves.length")
        expand_s = browser.evaluate(TIMED_CLICK.format(button="expand-all")) / 1000
        fit_s = browser.evaluate(TIMED_CLICK.format(button="fit")) / 1000
        errors = browser.errors()
        assert not errors, errors
        runs.append((open_s, expand_s, fit_s))
    open_s, expand_s, fit_s = (statistics.median(column) for column in zip(*runs))
    return {"name": name, "nodes": len(data["graphs"]["main"]), "bytes": len(html.encode()), "write_s": write_s,
            "open_s": open_s, "boxes": boxes, "expand_all_s": expand_s, "fit_s": fit_s}


def main() -> None:
    executable = find_chromium()
    if executable is None:
        raise SystemExit("chromium is not installed")
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        browser = Browser(executable)
        try:
            small = synthetic_program(stages=2, blocks=10, ops=5)
            measure(browser, "warm-up", small, Path(tmp))
            rows = [measure(browser, "synthetic-100", small, Path(tmp)),
                    measure(browser, "synthetic-10k", synthetic_program(), Path(tmp)),
                    measure(browser, "flat-fan-out-10k", fan_out_program(10_000), Path(tmp)),
                    measure(browser, "bert-24-layers", bert_program(layers=24, hidden=768, heads=12), Path(tmp)),
                    measure(browser, "llama-7b-meta", llama_7b_program(), Path(tmp)),
                    measure(browser, "sd15-unet-meta", sd_unet_program(), Path(tmp))]
        finally:
            browser.close()
    print(f"{'program':17s} {'nodes':>6s} {'page MB':>8s} {'write s':>8s} {'open s':>7s} {'boxes':>6s} "
          f"{'expand all s':>13s} {'fit s':>6s}")
    for r in rows:
        print(f"{r['name']:17s} {r['nodes']:6d} {r['bytes'] / 1e6:8.2f} {r['write_s']:8.2f} {r['open_s']:7.2f} "
              f"{r['boxes']:6d} {r['expand_all_s']:13.2f} {r['fit_s']:6.2f}")
    small, large = rows[0], rows[1]
    print(f"ratio 10k/100: open {large['open_s'] / small['open_s']:.1f}x, "
          f"expand all {large['expand_all_s'] / max(small['expand_all_s'], 1e-3):.1f}x")


if __name__ == "__main__":
    main()

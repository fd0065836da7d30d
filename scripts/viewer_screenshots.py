"""Redraw the viewer screenshots in docs/ from real models in headless Chromium.

docs/viewer.png: a BERT-base-sized program (12 layers, random weights) as it opens, with
layer 0 expanded and a layer_norm's details; docs/viewer-cnn.png: a ResNet-shaped CNN with a
convolution's arguments. Needs chromium, and Pillow to store them in a 128-colour palette
(a third of the size, text as sharp).

    PYTHONPATH=src .venv/bin/python scripts/viewer_screenshots.py
"""
from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from PIL import Image  # noqa: E402

from graphport.viewer import write_html  # noqa: E402
from tests.viewer.browser import Browser, find_chromium  # noqa: E402
from tests.viewer.models import bert_program, cnn_program  # noqa: E402
from tests.viewer.page import click_selector, open_page, settle, type_search  # noqa: E402

SIZE = (1280, 760)


def shoot(browser: Browser, program, name: str, node: str, directory: Path, target: Path) -> None:
    path = directory / f"{name}.html"
    write_html(program, path, title=f"{name}.gport")
    open_page(browser, path)
    type_search(browser, node)
    click_selector(browser, "#results a")       # reveals the node: its modules open in place
    type_search(browser, "")
    click_selector(browser, f"[data-name='{node}']")
    browser.evaluate("graphportViewer.zoom(0.8, 400, 300)")
    settle(browser)
    assert browser.errors() == [], browser.errors()
    browser.screenshot(str(directory / "shot.png"))
    Image.open(directory / "shot.png").convert("RGB").quantize(128).save(target, optimize=True)


def main() -> None:
    executable = find_chromium()
    if executable is None:
        raise SystemExit("chromium is not installed")
    warnings.filterwarnings("ignore")
    browser = Browser(executable, *SIZE)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            shoot(browser, bert_program(), "bert", "layer_norm_1", Path(tmp), ROOT / "docs" / "viewer.png")
            shoot(browser, cnn_program(), "cnn", "conv2d", Path(tmp), ROOT / "docs" / "viewer-cnn.png")
    finally:
        browser.close()


if __name__ == "__main__":
    main()

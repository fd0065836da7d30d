"""The viewer at a 7B LLaMA's size: 10,000 nodes nested model > stage > block.

Prints the page size, the time Python takes to write it, and in headless Chromium the time
to the first drawing (modules collapsed) and to lay out and draw every node expanded, next
to the same for a 100-node page, as a ratio. Needs chromium.

    .venv/bin/python bench/viewer_scale.py
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from graphport.viewer import page  # noqa: E402
from tests.viewer.browser import Browser, find_chromium  # noqa: E402
from tests.viewer.test_viewer import synthetic_program  # noqa: E402


def measure(browser: Browser, data: dict, directory: Path) -> dict:
    start = time.perf_counter()
    html = page(data, "bench")
    write_s = time.perf_counter() - start
    path = directory / f"{len(data['graphs']['main'])}.html"
    path.write_text(html)
    start = time.perf_counter()
    browser.open(path.as_uri())
    browser.evaluate("new Promise(r => requestAnimationFrame(() => r(0)))")
    open_s = time.perf_counter() - start
    expand_ms = browser.evaluate("""new Promise(r => { const t = performance.now();
        document.getElementById('expand-all').click();
        requestAnimationFrame(() => r(performance.now() - t)); })""")
    return {"nodes": len(data["graphs"]["main"]), "bytes": len(html.encode()), "write_s": write_s,
            "open_s": open_s, "expand_all_s": expand_ms / 1000}


def main() -> None:
    executable = find_chromium()
    if executable is None:
        raise SystemExit("chromium is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        browser = Browser(executable)
        try:
            measure(browser, synthetic_program(stages=2, blocks=10, ops=5), Path(tmp))   # warm-up
            small = measure(browser, synthetic_program(stages=2, blocks=10, ops=5), Path(tmp))
            large = measure(browser, synthetic_program(), Path(tmp))
        finally:
            browser.close()
    for row in (small, large):
        print(f"{row['nodes']:6d} nodes: page {row['bytes'] / 1e6:.2f} MB, written in {row['write_s']:.2f} s, "
              f"opened and drawn in {row['open_s']:.2f} s, expand all {row['expand_all_s']:.2f} s")
    print(f"ratio 10k/100: open {large['open_s'] / small['open_s']:.1f}x, "
          f"expand all {large['expand_all_s'] / max(small['expand_all_s'], 1e-3):.1f}x")


if __name__ == "__main__":
    main()

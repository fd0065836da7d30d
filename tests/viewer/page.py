"""Driving the viewer page in Chromium: open it, click, type, and read its geometry from the DOM."""
from __future__ import annotations

from pathlib import Path

from tests.viewer.browser import Browser


def open_page(browser: Browser, path: Path) -> None:
    browser.events.clear()
    browser.open(path.as_uri())
    # the page sets data-ready once it has drawn
    assert browser.evaluate("""new Promise(r => { const poll = () => document.body.dataset.ready ? r(true)
                                                   : requestAnimationFrame(poll); poll(); })""")


def settle(browser: Browser) -> None:
    """Wait until the page has drawn what the last event changed (drawing happens on animation frames)."""
    browser.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))")


def click_selector(browser: Browser, selector: str) -> None:
    box = browser.evaluate(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
                           " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.click(*box)
    settle(browser)


def type_search(browser: Browser, text: str) -> None:
    browser.evaluate(f"(() => {{ const s = document.getElementById('search'); s.value = {text!r};"
                     " s.dispatchEvent(new Event('input')); })()")
    settle(browser)


def details(browser: Browser) -> dict[str, str]:
    """The details panel: {row label: text}."""
    return browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#details dt')]
                               .map(dt => [dt.textContent, dt.nextElementSibling.textContent]))""")


def geometry(browser: Browser) -> dict:
    """Screen rectangles [x0, y0, x1, y1] of what is drawn: module boxes with their titles,
    node boxes, and each edge's first and last point."""
    return browser.evaluate("""(() => {
        const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return {
          groups: [...document.querySelectorAll('#groups .group')].map(g => ({
              group: +g.dataset.group, box: box(g.querySelector('rect')),
              title: g.querySelector('text') ? box(g.querySelector('text')) : null })),
          nodes: [...document.querySelectorAll('#nodes .node')].map(n => box(n.querySelector('rect'))),
          edges: [...document.querySelectorAll('#edges path')].map(p => {
              const xs = p.getAttribute('d').match(/-?[0-9.]+(e-?[0-9]+)?/g).map(Number);
              return [xs[0], xs[1], xs[xs.length - 2], xs[xs.length - 1]]; }),
        }; })()""")


def _overlap(a, b, tol=0.5) -> bool:
    return a[0] < b[2] - tol and b[0] < a[2] - tol and a[1] < b[3] - tol and b[1] < a[3] - tol


def _inside(a, b, tol=0.5) -> bool:
    return a[0] >= b[0] - tol and a[1] >= b[1] - tol and a[2] <= b[2] + tol and a[3] <= b[3] + tol


def overlaps(geo: dict) -> list[str]:
    """Every pair of drawn boxes that overlaps without one nesting in the other, and every module
    title that is not inside its own box or that covers a node."""
    found = []
    groups, nodes = geo["groups"], geo["nodes"]
    for i, a in enumerate(groups):
        for b in groups[i + 1:]:
            if _overlap(a["box"], b["box"]) and not (_inside(a["box"], b["box"]) or _inside(b["box"], a["box"])):
                found.append(f"module boxes {a['group']} and {b['group']} overlap")
        if a["title"] and not _inside(a["title"], a["box"]):
            found.append(f"the title of module {a['group']} leaves its box")
        for n in nodes:
            if a["title"] and _overlap(a["title"], n):
                found.append(f"the title of module {a['group']} covers a node at {n}")
            if _overlap(n, a["box"]) and not _inside(n, a["box"]):
                found.append(f"a node at {n} straddles module box {a['group']}")
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if _overlap(a, b):
                found.append(f"nodes at {a} and {b} overlap")
    return found


def downward_fraction(geo: dict) -> float:
    """The fraction of drawn edges whose end lies below their start (the graph reads top to bottom)."""
    edges = geo["edges"]
    return sum(1 for x0, y0, x1, y1 in edges if y1 > y0) / len(edges)


def shown_names(browser: Browser) -> list[str]:
    return browser.evaluate("[...document.querySelectorAll('[data-name]')].map(e => e.dataset.name)")


def text_of(browser: Browser, selector: str) -> str:
    return browser.evaluate(f"document.querySelector({selector!r}).textContent")


def png_ok(data: bytes) -> bool:
    return data[:8] == b"\x89PNG\r\n\x1a\n"


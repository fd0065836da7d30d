"""`graphport view`: a program as one self-contained HTML page.

The page embeds its data, script and style (package data in assets/), so it opens from
disk with no network access: a program can be looked at where it was made, or mailed.
"""
from __future__ import annotations

import json
import os
from importlib import resources

from ..program import ExportedProgram
from .data import program_data


# the page's scripts, in order: the layout, then the viewer that uses it
SCRIPTS = ("layout.js", "viewer.js")


def render_html(ep: ExportedProgram, title: str = "graphport program") -> str:
    """The page for `ep`, as a string."""
    return page(program_data(ep), title)


def page(data: dict, title: str) -> str:
    """The page for program data as `program_data` makes it."""
    assets = resources.files(__package__) / "assets"
    template = (assets / "viewer.html").read_text(encoding="utf-8")
    encoded = json.dumps({**data, "title": title}, separators=(",", ":"))
    # the data sits inside a <script> element: "</" must not close it
    encoded = encoded.replace("</", "<\\/")
    return (template.replace("/*STYLE*/", (assets / "viewer.css").read_text(encoding="utf-8"))
            .replace("/*SCRIPT*/", "\n".join((assets / name).read_text(encoding="utf-8") for name in SCRIPTS))
            .replace("{{TITLE}}", _escape(title))
            .replace("{{DATA}}", encoded))


def write_html(ep: ExportedProgram, path: str | os.PathLike, title: str | None = None) -> None:
    """Write the page for `ep` to `path`."""
    html = render_html(ep, title or os.path.basename(os.fspath(path)))
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

"""The module map of docs/architecture.md, generated from the modules' own docstrings.

Every module of the package says its one job in the first paragraph of its docstring; the
map is that paragraph per module, in the package's layout, so it cannot drift from the
code: `tests/test_architecture_doc.py` fails when the document and this rendering differ.

    python scripts/module_map.py           print the map
    python scripts/module_map.py --write   rewrite the map in docs/architecture.md
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "graphport"
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- module-map:begin (scripts/module_map.py --write) -->", "<!-- module-map:end -->"


def _job(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    if not docstring:
        raise SystemExit(f"{path.relative_to(ROOT)} has no docstring saying its job")
    return " ".join(docstring.strip().split("\n\n")[0].split()).replace("|", "\\|")


def render() -> str:
    modules = sorted(PACKAGE.rglob("*.py"), key=lambda p: (len(p.relative_to(PACKAGE).parts) > 1,
                                                          p.relative_to(PACKAGE).parts))
    rows = [f"| `{p.relative_to(PACKAGE).as_posix()}` | {_job(p)} |" for p in modules]
    return "\n".join([BEGIN, "", "| module | job |", "|---|---|", *rows, "", END])


def rewrite(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + render() + text[end:]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(rewrite(DOC.read_text()))
    else:
        print(render())

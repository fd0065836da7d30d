"""docs/architecture.md's module map is generated from the modules' docstrings and must match."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _module_map():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_map_lists_every_module_with_its_docstring():
    module_map = _module_map()
    text = module_map.DOC.read_text()
    assert module_map.rewrite(text) == text, \
        "docs/architecture.md's module map is stale: run `python scripts/module_map.py --write`"


def test_every_module_is_in_the_map():
    module_map = _module_map()
    rendered = module_map.render()
    missing = [p for p in module_map.PACKAGE.rglob("*.py")
               if f"`{p.relative_to(module_map.PACKAGE).as_posix()}`" not in rendered]
    assert not missing

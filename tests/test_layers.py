"""Data flows forward only: no stage imports a later one (docs/architecture.md).

Each module of the package belongs to a layer; a module may import its own layer and the
layers below it, never one above. Lazy imports inside functions count too: a cycle hidden
in a function body is still a cycle for the next engineer.
"""
import ast
import pathlib

import graphport

PACKAGE = pathlib.Path(graphport.__file__).parent

# lowest first; a module's layer is its first path part (package) or its own name
LAYERS = [
    {"_torch", "errors", "source", "pytree", "op_args", "values", "signature", "logs", "progress"},
    {"shapes", "ops", "audit"},
    {"capture"},
]
LATER_STAGES = {"passes", "program", "runtime", "call_checks", "export", "draft", "check", "describe",
                "serde", "interop", "unflatten", "cli", "viewer"}


def _layer_of(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    return len(LAYERS) if part in LATER_STAGES else -1


def _imports(path: pathlib.Path):
    """(line, first part of the imported graphport module) for every import in the file."""
    package = path.relative_to(PACKAGE).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
                names = [target + [a.name] for a in node.names] if not target else [target]
            elif node.module and node.module.startswith("graphport."):
                names = [node.module.split(".")[1:]]
            else:
                continue
            for name in names:
                if name:
                    yield node.lineno, name[0]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("graphport."):
                    yield node.lineno, alias.name.split(".")[1]


def test_no_layer_imports_a_later_one():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        own_layer = _layer_of(own)
        if own_layer < 0 or own_layer == len(LAYERS):
            continue
        for lineno, imported in _imports(path):
            layer = _layer_of(imported)
            if layer > own_layer:
                offenders.append(f"{path.relative_to(PACKAGE)}:{lineno} imports {imported} (a later layer)")
    assert not offenders, "\n".join(offenders)


def test_every_module_has_a_layer():
    """A new top-level module or package must be placed in a layer, so the rule above sees it."""
    unplaced = sorted({p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
                      - set().union(*LAYERS) - LATER_STAGES - {"__init__", "__main__", "control_flow"})
    assert not unplaced, f"place these in LAYERS or LATER_STAGES: {unplaced}"


def test_the_rule_sees_a_backward_import(tmp_path):
    """The checker itself: a capture module importing a pass is reported."""
    fake = PACKAGE / "capture" / "_layer_probe_tmp.py"
    fake.write_text("from ..passes.verifier import verify\n")
    try:
        found = [imported for _, imported in _imports(fake)]
    finally:
        fake.unlink()
    assert found == ["passes"] and _layer_of("passes") > _layer_of("capture")

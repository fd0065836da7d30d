"""Data flows forward only: no stage imports a later one (docs/architecture.md).

Each module of the package belongs to a layer; a module may import its own layer and the
layers below it, never one above. Lazy imports inside functions count too: a cycle hidden
in a function body is still a cycle for the next engineer. Imports under `if TYPE_CHECKING:`
do not: they name a type for annotations and never run.
"""
import ast
import pathlib

import graphport

PACKAGE = pathlib.Path(graphport.__file__).parent

# lowest first; a module's layer is its first path part (package) or its own name
LAYERS = [
    {"_torch", "errors", "source", "pytree", "op_args", "values", "signature", "logs", "progress", "graph_code"},
    {"shapes", "ops", "audit"},
    {"capture"},
    {"passes"},   # they take a program and return ep.replace(...): program.py sits above them
]
LATER_STAGES = {"program", "runtime", "call_checks", "export", "split_export", "draft", "check", "describe",
                "serde", "interop", "unflatten", "cli", "viewer", "experimental"}


def _layer_of(part: str) -> int:
    for i, names in enumerate(LAYERS):
        if part in names:
            return i
    return len(LAYERS) if part in LATER_STAGES else -1


def _type_checking_only(tree: ast.AST) -> set[int]:
    """id() of every node under an `if TYPE_CHECKING:` block."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= {id(inner) for inner in ast.walk(node)}
    return found


def _imported_modules(path: pathlib.Path):
    """(line, dotted graphport module path) for every import in the file that runs; a name
    imported from a package is the submodule of that name where there is one."""
    package = path.relative_to(PACKAGE).parts[:-1]
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("graphport."):
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                module = target + [alias.name]
                if not _exists(module):
                    module = target
                if module:
                    yield node.lineno, module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("graphport."):
                    yield node.lineno, alias.name.split(".")[1:]


def _exists(module: list[str]) -> bool:
    return bool(module) and ((PACKAGE.joinpath(*module[:-1], module[-1] + ".py")).is_file()
                             or PACKAGE.joinpath(*module, "__init__.py").is_file())


def _imports(path: pathlib.Path):
    """(line, first part of the imported graphport module) for every import in the file."""
    for lineno, module in _imported_modules(path):
        yield lineno, module[0]


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


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _module_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {".".join(m) for _, m in _imported_modules(path) if ".".join(m) in modules} - {name}
            for name, path in modules.items()}


def test_no_import_cycle_across_packages():
    """No two modules of different packages import each other, directly or through others
    (lazily included): such a pair is one unit that reads as two. Within one package, its
    `__init__` may hand work to a submodule that reads a helper back from it (the CLI loads
    torch only once the command line is known to be right)."""
    crossing = [c for c in _cycles(_module_graph()) if len({m.split(".")[0] for m in c}) > 1]
    assert not crossing, f"import cycles: {crossing}"


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"program": {"passes.decompose"}, "passes.decompose": {"program"}, "values": set()}) == \
        [["passes.decompose", "program"]]

"""The package must not lean on torch's own export machinery (DESIGN.md)."""
import ast
import re
import pathlib

import graphport

FORBIDDEN = ("torch.export", "torch._export", "torch._dynamo", "torch._functorch", "torch._inductor",
             "torch.fx.experimental.proxy_tensor", "torch.fx.experimental.symbolic_shapes",
             "torch.fx.experimental.sym_node", "torch._subclasses", "torch.func.functionalize", "torch.jit",
             "torch.fx.symbolic_trace", "torch.fx.Tracer", "torch.fx._symbolic_trace")
PACKAGE = pathlib.Path(graphport.__file__).parent


def _imported_names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"
            yield node.lineno, node.module


def _is_forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_no_forbidden_torch_internals():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if "interop" in path.relative_to(PACKAGE).parts:
            continue
        for lineno, name in _imported_names(ast.parse(path.read_text())):
            if _is_forbidden(name):
                offenders.append(f"{path.relative_to(PACKAGE)}:{lineno} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_the_check_catches_a_forbidden_import():
    tree = ast.parse("from torch.fx.experimental import symbolic_shapes\nimport torch._dynamo as d\n")
    assert [n for _, n in _imported_names(tree) if _is_forbidden(n)] == [
        "torch.fx.experimental.symbolic_shapes", "torch._dynamo"]




def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _private_uses(tree: ast.AST):
    for node in ast.walk(tree):
        names = [(node.lineno, n) for _, n in _imported_names(node)] if isinstance(node, (ast.Import, ast.ImportFrom)) \
            else [(node.lineno, _dotted(node))] if isinstance(node, ast.Attribute) else []
        for lineno, name in names:
            if name and re.match(r"torch\.(_[a-zA-Z]\w*|utils\._\w+)", name) and name.split(".")[:2] != ["torch", "_check"]:
                yield lineno, name


def test_private_torch_apis_are_reached_only_through_graphport_torch():
    """Every private torch API the package touches goes through graphport/_torch.py, which
    states the torch version it was written for."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.name == "_torch.py" or "interop" in rel.parts:
            continue
        seen = set()
        for lineno, name in _private_uses(ast.parse(path.read_text())):
            if (lineno, name.split(".")[1]) not in seen:
                seen.add((lineno, name.split(".")[1]))
                offenders.append(f"{rel}:{lineno}: {name}")
    assert not offenders, "\n".join(offenders)


def test_the_private_api_check_catches_a_use():
    tree = ast.parse("import torch\nx = torch._C._dispatch_has_kernel\nfrom torch.utils import _pytree\n")
    assert {name for _, name in _private_uses(tree)} >= {"torch._C._dispatch_has_kernel", "torch.utils._pytree"}

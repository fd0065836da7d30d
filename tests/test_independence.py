"""The package must not lean on torch's own export machinery (DESIGN.md)."""
import ast
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

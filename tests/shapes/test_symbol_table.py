"""Symbols carry their kind and creation order as data (shapes/symbols.py), never in their names."""
import ast
import io
import pathlib

import sympy
import torch

import graphport as gp
from graphport.shapes.symbols import SymbolKind, SymbolTable

PACKAGE = pathlib.Path(gp.__file__).parent
TABLE = PACKAGE / "shapes" / "symbols.py"
_PREFIXES = {"s", "u"}


def _reads_a_name(node: ast.AST) -> bool:
    """`x.name` or `str(x)`: where a symbol's name is read."""
    return (isinstance(node, ast.Attribute) and node.attr == "name") or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str")


def _name_prefix_parsing(node: ast.AST) -> bool:
    """A symbol name taken apart or spelled: `name.startswith("u")`, `str(s)[1:]`, `name[0] == "s"`,
    `name.lstrip(...)`, `f"s{n}"`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("startswith", "endswith") and node.args:
            arg = node.args[0]
            values = arg.elts if isinstance(arg, ast.Tuple) else [arg]
            return any(isinstance(v, ast.Constant) and v.value in _PREFIXES for v in values)
        return node.func.attr in ("lstrip", "rstrip", "strip") and _reads_a_name(node.func.value) and bool(node.args)
    if isinstance(node, ast.Subscript) and _reads_a_name(node.value):
        return isinstance(node.slice, ast.Slice) or (isinstance(node.slice, ast.Constant) and node.slice.value == 0)
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, tail = node.values
        return isinstance(head, ast.Constant) and head.value in _PREFIXES and isinstance(tail, ast.FormattedValue)
    return False


def name_parsing_sites(source: str, where: str) -> list[str]:
    return [f"{where}:{node.lineno}" for node in ast.walk(ast.parse(source)) if _name_prefix_parsing(node)]


def test_symbol_names_are_spelled_and_parsed_only_in_the_symbol_table():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path != TABLE:
            found += name_parsing_sites(path.read_text(), str(path.relative_to(PACKAGE)))
    assert not found, f"ask shapes/symbols.py's table for a symbol's kind and order instead: {found}"


def test_the_detector_finds_each_way_of_reading_a_name():
    for line in ('key = lambda s: int(str(s)[1:])', 'flag = s.name.startswith("u")', 'x = sym.name[0] == "s"',
                 'n = sym.name.lstrip("su")', 'name = f"u{len(infos)}"', 'ok = s.name.startswith(("s", "u"))'):
        assert name_parsing_sites(line, "probe"), line
    for line in ('name = f"{stem}{count}"', 'ok = path.startswith("src")', 'x = str(e).splitlines()[0]'):
        assert not name_parsing_sites(line, "probe"), line


def test_order_and_kind_come_from_the_table_not_the_names():
    table = SymbolTable()
    late, early = sympy.Symbol("s9"), sympy.Symbol("u0")
    table.add(late, SymbolKind.INPUT)
    table.add(early, SymbolKind.DATA_DEPENDENT)
    table.add(late, SymbolKind.DATA_DEPENDENT)   # entered again: nothing changes
    assert table.in_order([early, late]) == [late, early]
    assert table.in_order([early, late], reverse=True) == [early, late]
    assert table.is_input(late) and table.is_data_dependent(early)
    assert table.kind(sympy.Symbol("s1")) is None
    assert (table.next_name(SymbolKind.INPUT), table.next_name(SymbolKind.DATA_DEPENDENT)) == ("s1", "u1")


class _Gather(torch.nn.Module):
    def forward(self, x, y):
        n = x.sum().to(torch.int64).item()
        torch._check(n >= 0)
        return torch.zeros(n) + y.shape[0], x * 2


def _env_of(ep):
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        for size in getattr(val, "shape", ()):
            if isinstance(size, torch.SymInt):
                return size.node.env
    raise AssertionError("no symbolic size in the program")


def _facts(env):
    syms = [*env.symbols, *env.unbacked.infos]
    return [(s.name, env.table.kind(s)) for s in env.table.in_order(syms)]


def test_an_export_records_each_symbols_kind_and_a_load_rebuilds_them():
    x, y = torch.ones(3, dtype=torch.int64), torch.randn(4, 5)
    ep = gp.export(_Gather(), (x, y), dynamic_shapes=({0: gp.Dim("a")}, {0: gp.Dim("b"), 1: gp.Dim("c")}))
    facts = _facts(_env_of(ep))
    assert facts == [("s0", SymbolKind.INPUT), ("s1", SymbolKind.INPUT), ("s2", SymbolKind.INPUT),
                     ("u0", SymbolKind.DATA_DEPENDENT)]
    buffer = io.BytesIO()
    gp.save(ep, buffer)
    buffer.seek(0)
    loaded = gp.load(buffer)
    assert _facts(_env_of(loaded)) == facts
    assert str(loaded.graph) == str(ep.graph)

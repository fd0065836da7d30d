"""The IR's vocabulary lives in one table (ops/vocabulary.py): every stage reads it."""
import ast
import operator
import pathlib

import pytest
import torch

import graphport
from graphport.errors import ArtifactError
from graphport.ops.vocabulary import PYTHON_TARGETS, SYMBOLIC_SIZE_OPERATORS, SYMBOLIC_SIZE_OPS
from graphport.passes import verifier
from graphport.serde import targets

PACKAGE = pathlib.Path(graphport.__file__).parent
TABLE = PACKAGE / "ops" / "vocabulary.py"
_SIZE_FUNCTIONS = {name.split(".", 1)[1] for name in SYMBOLIC_SIZE_OPERATORS}


def _looks_like_the_vocabulary(literal: ast.AST) -> bool:
    """A literal naming several of the IR's `operator.*` and several of its `torch.sym_*`
    functions: a copy of the set (a mapping to Python's own semantics names no torch.sym_*)."""
    named = [(node.value.id, node.attr) for node in ast.walk(literal) if isinstance(node, ast.Attribute)
             and isinstance(node.value, ast.Name) and node.attr in _SIZE_FUNCTIONS]
    return sum(m == "operator" for m, _ in named) >= 3 and sum(m == "torch" for m, _ in named) >= 3


def test_the_symbolic_size_operators_are_spelled_out_only_in_the_table():
    copies = []
    for path in PACKAGE.rglob("*.py"):
        if path == TABLE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Set, ast.Dict, ast.List, ast.Tuple)) and _looks_like_the_vocabulary(node):
                copies.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not copies, f"read graphport.ops.vocabulary instead of listing the operators again: {copies}"


def test_the_verifier_and_the_artifact_admit_the_same_python_targets():
    names = {targets.target_to_json(fn, "n")["python"] for fn in PYTHON_TARGETS.values()}
    assert names == set(PYTHON_TARGETS)
    assert all(targets.target_from_json({"python": name}, "n") is fn for name, fn in PYTHON_TARGETS.items())
    assert verifier.SYMBOLIC_SIZE_OPS is SYMBOLIC_SIZE_OPS


def test_a_function_outside_the_table_is_refused_at_save_and_at_load():
    with pytest.raises(ArtifactError):
        targets.target_to_json(operator.xor, "n")
    with pytest.raises(ArtifactError):
        targets.target_from_json({"python": "operator.xor"}, "n")
    assert torch.sym_sum not in SYMBOLIC_SIZE_OPS

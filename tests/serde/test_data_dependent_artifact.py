"""Programs with data-dependent sizes in the artifact: their symbols (assumptions, ranges,
the node that computes each), the facts the program stated and its run-time assertions
come back from the file; an archive that lies about them is refused at load."""
from __future__ import annotations

import io

import pytest
import torch

import graphport as gp

from .helpers import round_trip, saved
from .test_hostile import refused, with_doc


def two_counts(n, m):
    a, b = n.item(), m.item()
    torch._check(a >= 0)
    torch._check(b >= 0)
    torch._check(b <= 10)
    return torch.zeros(a, 3), torch.zeros(b, 2) + 1


@pytest.fixture(scope="module")
def program():
    return gp.export(two_counts, (torch.tensor(2), torch.tensor(3)))


def _nodes(doc):
    return {n["name"]: n for n in doc["graph"]["nodes"]}


def test_symbols_facts_and_assertions_survive(program, tmp_path):
    loaded = round_trip(program, tmp_path, ((torch.tensor(0), torch.tensor(10)), {}))
    assert str(loaded.range_constraints) == str(program.range_constraints)
    with pytest.raises(gp.errors.RuntimeCheckError, match="u1 <= 10"):
        loaded.module()(torch.tensor(1), torch.tensor(11))


def test_symbolic_outputs_round_trip(tmp_path):
    def count_and_total(x):
        k = (x > 0).sum().item()
        torch._check(k >= 0)
        return k, x.sum().item() * 2.0, k > 2
    ep = gp.export(count_and_total, (torch.randn(5),))
    round_trip(ep, tmp_path, ((torch.ones(5),), {}), ((-torch.ones(5),), {}))


def test_a_value_claimed_by_two_nodes_is_refused(program):
    def claim(doc):   # item_1 now claims to compute u0, which item computes
        _nodes(doc)["item_1"]["meta"]["val"] = _nodes(doc)["item"]["meta"]["val"]
    refused(with_doc(saved(program), claim), "item_1", "u0")


def test_a_size_that_does_not_follow_from_the_data_dependent_value_is_refused(program):
    def widen(doc):
        _nodes(doc)["zeros"]["meta"]["val"]["tensor"]["shape"][1] = 4
    refused(with_doc(saved(program), widen), "zeros")


def test_a_data_dependent_call_that_cannot_run_is_refused(program):
    """A call that brings in a data-dependent value has no meta computation to compare with;
    its arguments must still bind to the operator, with values of the kinds it takes (fuzz
    mutants gave `item` an extra argument, `slice` a string start: they loaded, and the call
    failed inside the operator)."""
    def extra_argument(doc):
        _nodes(doc)["item"]["args"]["tuple"].append(1)
    refused(with_doc(saved(program), extra_argument), "item")

    def unknown_keyword(doc):
        _nodes(doc)["item"]["kwargs"] = {"scale": 2}
    refused(with_doc(saved(program), unknown_keyword), "item")

    def not_a_tensor(doc):
        _nodes(doc)["item"]["args"]["tuple"][0] = "*"
    refused(with_doc(saved(program), not_a_tensor), "item")


def test_contract_and_environment_must_agree(program):
    def rebind(doc):
        entry = next(s for s in doc["shape_contract"]["symbols"] if s["symbol"] == "u0")
        entry["source"] = {"node": "item_1"}
    refused(with_doc(saved(program), rebind), "u0", "item_1")


@pytest.mark.parametrize("edit,words", [
    (lambda dd: dd["symbols"][0].update(kind="complex"), ["kind"]),
    (lambda dd: dd["symbols"][0].update(type="str"), ["symbols[0].type"]),
    (lambda dd: dd["symbols"].append(dict(dd["symbols"][0])), ["twice"]),
    (lambda dd: dd["facts"].append([["sym", "u9"], ">="]), ["u9"]),
    (lambda dd: dd["facts"].append([["sym", "u0"], "<"]), ["fact"]),
    (lambda dd: dd["facts"].append([["pow", ["sym", "u0"], ["int", 10 ** 6]], ">="]), ["power"]),
], ids=["kind", "type", "twice", "undefined symbol", "operator", "huge power"])
def test_malformed_data_dependent_section_is_refused(program, edit, words):
    refused(with_doc(saved(program), lambda d: edit(d["shape_env"]["data_dependent"])), *words)


def test_loaded_program_saves_from_bytes_as_from_a_path(program, tmp_path):
    path = tmp_path / "p.gport"
    gp.save(program, path)
    assert saved(gp.load(path)) == saved(gp.load(io.BytesIO(path.read_bytes())))

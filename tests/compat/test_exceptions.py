"""The exceptions users catch: code written against torch.export catches graphport's errors.

Each situation of docs/errors.md is a case: one piece of user code that fails, and the
builtin class torch.export raises there. Where torch.export fails too, the same
`try: ... except <builtin>` catches both exporters' errors (parametrized over `exporter`);
graphport's own checks follow: its class, `.msg`, the user's file:line and a fix.
torch.export is used here only as the oracle, never by graphport.
"""
from __future__ import annotations

import types
import warnings

import pytest
import torch
import torch.export
from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes as torch_refine

import graphport as gp
from graphport import errors as E

# ----------------------------------------------------------------------------- exporters

EXPORTERS = {
    "graphport": types.SimpleNamespace(name="graphport", export=gp.export, Dim=gp.Dim,
                                       refine=gp.refine_dynamic_shapes_from_suggested_fixes),
    "torch": types.SimpleNamespace(name="torch", export=torch.export.export, Dim=torch.export.Dim,
                                   refine=torch_refine),
}


@pytest.fixture(params=list(EXPORTERS))
def exporter(request):
    return EXPORTERS[request.param]


GP = EXPORTERS["graphport"]
MARK = "# <- here"      # the line each graphport error must point at


# ----------------------------------------------------------------------------- programs

class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y  # <- here


class Scale(torch.nn.Module):
    def forward(self, x, k):
        return x * k


class FromDict(torch.nn.Module):
    def forward(self, d):
        return d["a"] + 1


class Shifted(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


class BranchOnValue(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # <- here
            return x + 1
        return x - 1


class BranchOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 10:  # <- here
            return x + 1
        return x - 1


class MatmulMismatch(torch.nn.Module):
    def forward(self, x):
        return x @ x  # <- here


class ItemToShape(torch.nn.Module):
    def forward(self, x):
        n = x.sum().long().item()
        return torch.zeros(n) if n > 2 else x  # <- here


class ToList(torch.nn.Module):
    def forward(self, x):
        return torch.tensor(x.tolist())  # <- here


class TakesObject(torch.nn.Module):
    def forward(self, x, o):
        return x


class ReturnsObject(torch.nn.Module):
    def forward(self, x):
        return object()  # <- here


torch.library.define("gp_compat::opaque", "(Tensor x) -> Tensor")


@torch.library.impl("gp_compat::opaque", "cpu")
def _opaque(x):
    return x.clone()


class NoFakeKernel(torch.nn.Module):
    def forward(self, x):
        return torch.ops.gp_compat.opaque(x)  # <- here


def x43():
    return torch.randn(4, 3)


def exported(ex, mod, args, dynamic_shapes=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ex.export(mod, args, dynamic_shapes=dynamic_shapes)


# ----------------------------------------------------------------------------- cases
# Each case: (id, builtin both exporters' errors are caught by, graphport class, run(ex)).

def args_not_tuple(ex):
    ex.export(AddOne(), x43())  # <- here


def mod_not_callable(ex):
    ex.export(42, (x43(),))  # <- here


def spec_unknown_key(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"y": {0: ex.Dim("b")}})  # <- here


def spec_too_many_entries(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes=({0: ex.Dim("b")}, None))  # <- here


def spec_wrong_nesting(ex):
    ex.export(FromDict(), ({"a": x43()},), dynamic_shapes={"d": ({0: ex.Dim("q")},)})  # <- here


def spec_not_a_dim(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"x": {0: "batch"}})  # <- here


def spec_tensor_rank(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"x": (ex.Dim("b"),)})  # <- here


def spec_static_size_mismatch(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"x": {0: 3}})  # <- here


def example_outside_dim_range(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"x": {0: ex.Dim("b", min=10, max=20)}})  # <- here


def guard_narrows_dim(ex):
    ex.export(BranchOnSize(), (x43(),), dynamic_shapes={"x": {0: ex.Dim("b")}})


def guard_relates_dims(ex):
    ex.export(Add(), (x43(), x43()), dynamic_shapes={"x": {0: ex.Dim("a")}, "y": {0: ex.Dim("b")}})


def branch_on_tensor_value(ex):
    ex.export(BranchOnValue(), (x43(),))


def operator_rejects_arguments(ex):
    ex.export(MatmulMismatch(), (x43(),))


def operator_without_fake_kernel(ex):
    ex.export(NoFakeKernel(), (x43(),))


def unsupported_input_type(ex):
    ex.export(TakesObject(), (x43(), object()))  # <- here


def unsupported_output_type(ex):
    ex.export(ReturnsObject(), (x43(),))  # <- here  (or better, at the `return` in forward)


def program_called_directly(ex):
    x = x43()
    exported(ex, AddOne(), (x,))(x)


# call time: ep.module() refuses an input

def call_static_size(ex):
    m = exported(ex, AddOne(), (x43(),)).module()
    m(torch.randn(5, 3))  # <- here


def call_above_dim_max(ex):
    m = exported(ex, AddOne(), (x43(),), {"x": {0: ex.Dim("b", min=2, max=8)}}).module()
    m(torch.randn(20, 3))  # <- here


def call_breaks_derived_dim(ex):
    d = ex.Dim("d", min=2, max=20)
    m = exported(ex, Shifted(), (x43(), torch.randn(5, 3)), {"x": {0: d}, "y": {0: d + 1}}).module()
    m(torch.randn(4, 3), torch.randn(7, 3))  # <- here


def call_breaks_equal_dims(ex):
    d = ex.Dim("d")
    m = exported(ex, Add(), (x43(), x43()), {"x": {0: d}, "y": {0: d}}).module()
    m(torch.randn(4, 3), torch.randn(6, 3))  # <- here


def call_other_scalar(ex):
    m = exported(ex, Scale(), (x43(), 2)).module()
    m(x43(), 3)  # <- here


def call_missing_argument(ex):
    m = exported(ex, AddOne(), (x43(),)).module()
    m()  # <- here


def call_extra_argument(ex):
    x = x43()
    m = exported(ex, AddOne(), (x,)).module()
    m(x, x)  # <- here


def call_other_container(ex):
    x = x43()
    m = exported(ex, AddOne(), (x,)).module()
    m([x])  # <- here


def call_keyword_instead_of_positional(ex):
    x = x43()
    m = exported(ex, AddOne(), (x,)).module()
    m(x=x)  # <- here


def call_dict_missing_key(ex):
    m = exported(ex, FromDict(), ({"a": x43()},)).module()
    m({"b": x43()})  # <- here


def call_dict_extra_key(ex):
    m = exported(ex, FromDict(), ({"a": x43()},)).module()
    m({"a": x43(), "b": x43()})  # <- here


def call_tuple_for_dict(ex):
    m = exported(ex, FromDict(), ({"a": x43()},)).module()
    m((x43(),))  # <- here


def item_into_shape(ex):
    ex.export(ItemToShape(), (x43(),))    # torch: GuardOnDataDependentSymNode


def named_dim_for_int(ex):
    ex.export(Scale(), (x43(), 2), dynamic_shapes={"x": None, "k": ex.Dim("k")})  # <- here


def call_dynamic_int_above_range(ex):
    m = exported(ex, Head(), (torch.randn(8, 3), 4), {"x": None, "k": ex.Dim.DYNAMIC}).module()
    m(torch.randn(8, 3), 9)  # <- here


class Head(torch.nn.Module):
    def forward(self, x, k):
        return x[:k] * k


SHARED = [  # both exporters raise, and the same `except builtin` catches both
    ("named_dim_for_int", ValueError, E.InvalidDimError, named_dim_for_int),
    ("call_dynamic_int_above_range", AssertionError, E.InputGuardError, call_dynamic_int_above_range),
    ("item_into_shape", RuntimeError, E.DataDependentError, item_into_shape),
    ("args_not_tuple", RuntimeError, E.UnsupportedInputError, args_not_tuple),
    ("mod_not_callable", ValueError, E.UnsupportedInputError, mod_not_callable),
    ("spec_unknown_key", RuntimeError, E.UnsupportedInputError, spec_unknown_key),
    ("spec_too_many_entries", RuntimeError, E.UnsupportedInputError, spec_too_many_entries),
    ("spec_wrong_nesting", RuntimeError, E.UnsupportedInputError, spec_wrong_nesting),
    ("spec_not_a_dim", RuntimeError, E.UnsupportedInputError, spec_not_a_dim),
    ("spec_tensor_rank", RuntimeError, E.UnsupportedInputError, spec_tensor_rank),
    ("spec_static_size_mismatch", RuntimeError, E.ConstraintViolationError, spec_static_size_mismatch),
    ("example_outside_dim_range", RuntimeError, E.ConstraintViolationError, example_outside_dim_range),
    ("guard_narrows_dim", RuntimeError, E.ConstraintViolationError, guard_narrows_dim),
    ("guard_relates_dims", RuntimeError, E.ConstraintViolationError, guard_relates_dims),
    ("branch_on_tensor_value", RuntimeError, E.DataDependentError, branch_on_tensor_value),
    ("operator_rejects_arguments", RuntimeError, E.OperatorError, operator_rejects_arguments),
    ("operator_without_fake_kernel", RuntimeError, E.UnsupportedOperatorError, operator_without_fake_kernel),
    ("unsupported_input_type", ValueError, E.UnsupportedInputError, unsupported_input_type),
    ("unsupported_output_type", RuntimeError, E.UnsupportedInputError, unsupported_output_type),
    ("program_called_directly", RuntimeError, None, program_called_directly),
    ("call_static_size", AssertionError, E.InputGuardError, call_static_size),
    ("call_above_dim_max", AssertionError, E.InputGuardError, call_above_dim_max),
    ("call_breaks_derived_dim", AssertionError, E.InputGuardError, call_breaks_derived_dim),
    ("call_breaks_equal_dims", AssertionError, E.InputGuardError, call_breaks_equal_dims),
    ("call_other_scalar", AssertionError, E.InputGuardError, call_other_scalar),
    ("call_missing_argument", ValueError, E.InputStructureError, call_missing_argument),
    ("call_extra_argument", ValueError, E.InputStructureError, call_extra_argument),
    ("call_other_container", ValueError, E.InputStructureError, call_other_container),
    ("call_keyword_instead_of_positional", ValueError, E.InputStructureError, call_keyword_instead_of_positional),
    ("call_dict_missing_key", ValueError, E.InputStructureError, call_dict_missing_key),
    ("call_dict_extra_key", ValueError, E.InputStructureError, call_dict_extra_key),
    ("call_tuple_for_dict", ValueError, E.InputStructureError, call_tuple_for_dict),
]


# graphport refuses where torch.export does not (or fails by accident: TypeError/IndexError/
# AttributeError from its own internals); graphport's error is the builtin a user would expect.

def spec_not_a_container(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes=5)  # <- here          torch: TypeError (len of int)


def spec_dim_index_out_of_range(ex):
    ex.export(AddOne(), (x43(),), dynamic_shapes={"x": {5: ex.Dim("b")}})  # <- here     torch: IndexError


def tolist(ex):
    ex.export(ToList(), (x43(),), dynamic_shapes={"x": {0: ex.Dim("b")}})   # torch: specializes b, then refuses


def call_below_dim_min(ex):
    m = exported(ex, AddOne(), (x43(),), {"x": {0: ex.Dim("b", min=2, max=8)}}).module()
    m(torch.randn(1, 3))  # <- here     torch: runs (it does not check sizes 0/1 against min)


def call_other_dtype(ex):
    m = exported(ex, AddOne(), (x43(),)).module()
    m(x43().double())  # <- here     torch: runs


def call_other_rank(ex):
    m = exported(ex, AddOne(), (x43(),)).module()
    m(torch.randn(4))  # <- here     torch: IndexError


def call_scalar_of_other_type(ex):
    m = exported(ex, Scale(), (x43(), 2)).module()
    m(x43(), 2.0)  # <- here     torch: runs


def call_aliasing_broken(ex):
    x = x43()
    m = exported(ex, Add(), (x, x)).module()
    m(x, x43())  # <- here     torch: runs


def int_example_outside_hint(ex):
    ex.export(Scale(), (x43(), 5), dynamic_shapes={"x": None, "k": ex.Dim.DYNAMIC(min=6)})  # <- here  torch: exports


def call_dynamic_int_of_other_type(ex):
    m = exported(ex, Scale(), (x43(), 2), {"x": None, "k": ex.Dim.DYNAMIC}).module()
    m(x43(), 2.0)  # <- here     torch: runs


def call_other_path_than_draft_answer(ex):
    ep = gp.draft_export(BranchOnValue(), (torch.ones(3),))
    ep.module()(-torch.ones(3))  # <- here     torch: RuntimeError "Runtime assertion failed"


def call_non_tensor(ex):
    m = exported(ex, AddOne(), (x43(),)).module()
    m(3.0)  # <- here     torch: AttributeError


GRAPHPORT_ONLY = [
    ("spec_not_a_container", (RuntimeError, ValueError), E.UnsupportedInputError, spec_not_a_container),
    ("spec_dim_index_out_of_range", (RuntimeError, ValueError), E.UnsupportedInputError,
     spec_dim_index_out_of_range),
    ("tolist", RuntimeError, E.DataDependentError, tolist),
    ("call_below_dim_min", AssertionError, E.InputGuardError, call_below_dim_min),
    ("call_other_dtype", AssertionError, E.InputGuardError, call_other_dtype),
    ("call_other_rank", AssertionError, E.InputGuardError, call_other_rank),
    ("call_scalar_of_other_type", AssertionError, E.InputGuardError, call_scalar_of_other_type),
    ("call_aliasing_broken", AssertionError, E.InputGuardError, call_aliasing_broken),
    ("call_non_tensor", ValueError, E.InputStructureError, call_non_tensor),
    ("int_example_outside_hint", RuntimeError, E.ConstraintViolationError, int_example_outside_hint),
    ("call_dynamic_int_of_other_type", AssertionError, E.InputGuardError, call_dynamic_int_of_other_type),
    ("call_other_path_than_draft_answer", RuntimeError, None, call_other_path_than_draft_answer),
]

ALL = SHARED + GRAPHPORT_ONLY


def _ids(cases):
    return [c[0] for c in cases]


# ----------------------------------------------------------------------------- the shared contract

@pytest.mark.parametrize("case", SHARED, ids=_ids(SHARED))
def test_user_code_catches_both_exporters(case, exporter):
    """The same `except builtin` catches torch.export's error and graphport's."""
    _, builtin, _, run = case
    caught = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(exporter)
    except builtin as e:          # what user code written against torch.export says
        caught = e
    assert caught is not None, f"{exporter.name} raised nothing"


@pytest.mark.parametrize("case", GRAPHPORT_ONLY, ids=_ids(GRAPHPORT_ONLY))
def test_graphport_refusals_are_the_expected_builtin(case):
    _, builtin, _, run = case
    with pytest.raises(builtin):
        run(GP)


# ----------------------------------------------------------------------------- graphport's own contract

@pytest.mark.parametrize("case", [c for c in ALL if c[2] is not None], ids=_ids([c for c in ALL if c[2] is not None]))
def test_graphport_class_msg_location_fix(case):
    _, builtin, cls, run = case
    with pytest.raises(cls) as info:
        run(GP)
    e = info.value
    assert isinstance(e, E.UserError) and isinstance(e, RuntimeError) and isinstance(e, builtin)
    assert not isinstance(e, E.InternalError)
    # .msg is the whole message, as on torch's exceptions; str(e) is unchanged: what / at / fix
    assert e.msg == str(e) == e.args[0]
    assert str(e).startswith(e.what)
    assert e.fix and "\n  fix: " in str(e)
    # it points at the user's line
    assert e.location is not None, str(e)
    assert e.location.filename == __file__, str(e)
    assert MARK in e.location.code, f"points at {e.location}: {e.location.code!r}\n{e}"
    assert f"  at {e.location.filename}:{e.location.lineno} in " in str(e)


def test_call_time_errors_split_by_builtin():
    """ep.module(): a refused value is an AssertionError (torch: "Guard failed: ..."), a wrong
    structure a ValueError; both stay InputMismatchErrors, and neither is the other."""
    assert issubclass(E.InputGuardError, E.InputMismatchError)
    assert issubclass(E.InputStructureError, E.InputMismatchError)
    assert issubclass(E.InputGuardError, AssertionError) and not issubclass(E.InputGuardError, ValueError)
    assert issubclass(E.InputStructureError, ValueError) and not issubclass(E.InputStructureError, AssertionError)
    for case in ALL:
        _, builtin, cls, run = case
        if cls is not None and issubclass(cls, E.InputMismatchError):
            with pytest.raises(E.InputMismatchError):   # existing `except gp.InputMismatchError` still works
                run(GP)


def test_internal_error_is_not_a_user_error():
    assert issubclass(E.InternalError, RuntimeError)
    assert not issubclass(E.InternalError, E.UserError)
    e = E.InternalError("the IR is broken")
    assert e.msg == str(e) and "please report" in e.msg


@pytest.mark.parametrize("cls", [E.UserError, E.DataDependentError, E.UnsupportedOperatorError, E.OperatorError,
                                 E.UnsupportedInputError, E.InvalidDimError, E.InputMismatchError,
                                 E.InputGuardError, E.InputStructureError, E.UnsupportedFeatureError,
                                 E.ConstraintViolationError])
def test_every_user_error_is_a_runtime_error(cls):
    assert issubclass(cls, E.GraphportError) and issubclass(cls, RuntimeError)


def test_data_dependent_errors_say_data_dependent():
    for run in (branch_on_tensor_value, item_into_shape):
        with pytest.raises(E.DataDependentError, match="data-dependent"):
            run(GP)


def test_errors_pickle_with_their_parts():
    import pickle
    with pytest.raises(E.InputGuardError) as info:
        call_static_size(GP)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is E.InputGuardError
    assert (back.msg, back.what, back.fix, back.location) == (info.value.msg, info.value.what, info.value.fix,
                                                             info.value.location)


# ----------------------------------------------------------------------------- the docs' recipe

@pytest.mark.parametrize("relation", [False, True], ids=["narrow", "relate"])
def test_refine_from_exc_msg(exporter, relation):
    """docs/errors.md: catch the ConstraintViolationError as a RuntimeError and apply
    `exc.msg`'s suggested fixes; the export then succeeds, with either exporter."""
    Dim = exporter.Dim
    if relation:
        mod, args, spec = Add(), (x43(), x43()), {"x": {0: Dim("a")}, "y": {0: Dim("b")}}
    else:
        mod, args, spec = BranchOnSize(), (x43(),), {"x": {0: Dim("b")}}
    try:
        exported(exporter, mod, args, spec)
    except RuntimeError as exc:
        spec = exporter.refine(exc.msg, spec)
    else:
        pytest.fail("the first export should violate the spec")
    ep = exported(exporter, mod, args, spec)
    assert ep.module()(*args).shape == (4, 3)
    if exporter is GP:
        with pytest.raises(E.ConstraintViolationError) as info:
            exported(GP, mod, args, {"x": {0: Dim("b")}} if not relation else
                     {"x": {0: Dim("a")}, "y": {0: Dim("b")}})
        assert "Suggested fixes:" in info.value.msg


# ----------------------------------------------------------------------------- invalid Dims

@pytest.mark.parametrize("make", [lambda ex: ex.Dim("1x"),
                                  lambda ex: ex.Dim("b", min=5, max=2),
                                  lambda ex: ex.export(Scale(), (x43(), 3), dynamic_shapes={"x": None,
                                                                                           "k": {0: ex.Dim("q")}})],
                         ids=["bad_name", "min_above_max", "dim_for_int_input"])
def test_invalid_dim_is_an_assertion_error(make, exporter):
    with pytest.raises(AssertionError):
        make(exporter)

"""torch.export's documentation and tutorial examples, run as a user would, against both
exporters (torch.export only as the oracle).

Each example is user code written once against an exporter namespace (`ex.export`,
`ex.Dim`, ...) and returns what a user observes: outputs of `ep.module()` compared with
eager, calls refused or accepted, ranges, errors by the builtin class users catch. The
examples follow the situations the torch.export docs and tutorial walk through (basic
export, dynamic shapes with named, derived and automatic dims, specializations and their
suggested fixes, control flow with cond, data-dependent values and torch._check, custom
ops, decompositions, unflatten, save/load, draft_export), written here in our own words.

`python tests/compat/test_docs_examples.py` prints how many behave the same.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.export

import graphport as gp

from .exporters import EXPORTERS


_BUILTINS = (AssertionError, ValueError, TypeError, RuntimeError)


class Raised:
    """An exception, as the builtin classes a user's `except` can catch it by."""

    def __init__(self, error: BaseException):
        self.caught_as = frozenset(b.__name__ for b in _BUILTINS if isinstance(error, b))
        self.text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"

    def __repr__(self) -> str:
        return f"raises {sorted(self.caught_as)} ({self.text[:120]})"


def observe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- the observation is the error itself
        return Raised(e)


def same(ours: Any, theirs: Any) -> bool:
    """Users see the same thing: equal values, or an error their `except` for torch's catches."""
    if isinstance(theirs, Raised):
        return isinstance(ours, Raised) and bool(theirs.caught_as) and theirs.caught_as <= ours.caught_as
    if isinstance(ours, Raised):
        return False
    if isinstance(theirs, torch.Tensor):
        return isinstance(ours, torch.Tensor) and ours.shape == theirs.shape and torch.allclose(ours, theirs)
    if isinstance(theirs, (list, tuple)):
        return isinstance(ours, (list, tuple)) and len(ours) == len(theirs) and all(map(same, ours, theirs))
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and ours.keys() == theirs.keys() and all(same(ours[k], theirs[k])
                                                                             for k in theirs)
    return ours == theirs


def close_to_eager(module, model, *args, **kwargs) -> Any:
    """Whether `module` computes what `model` does on these inputs, or the error it raises."""
    got = observe(lambda: module(*args, **kwargs))
    if isinstance(got, Raised):
        return got
    want = model(*args, **kwargs)
    leaves = torch.utils._pytree.tree_leaves
    return all(torch.allclose(g, w) for g, w in zip(leaves(got), leaves(want))) and len(leaves(got)) == len(leaves(want))


def bounds(ep) -> list[tuple[str, str]]:
    return sorted((str(v.lower), str(v.upper).replace("int_oo", "oo")) for v in ep.range_constraints.values())


def op_names(ep) -> list[str]:
    return sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"
                   and isinstance(n.target, torch._ops.OpOverload)})


EXAMPLES: dict[str, Callable] = {}


def example(fn: Callable) -> Callable:
    EXAMPLES[fn.__name__] = fn
    return fn


# -- Overview: a first export ----------------------------------------------------------------------

class SinCos(torch.nn.Module):
    def forward(self, x, y):
        return torch.sin(x) + torch.cos(y)


@example
def first_export(ex):
    args = (torch.randn(10, 10), torch.randn(10, 10))
    ep = ex.export(SinCos(), args=args)
    return [op_names(ep), [s.kind.name for s in ep.graph_signature.input_specs],
            close_to_eager(ep.module(), SinCos(), *args),
            observe(lambda: ep.module()(torch.randn(5, 10), torch.randn(5, 10)))]


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x, y):
        return torch.nn.functional.relu(self.lin(x + y), inplace=True)


@example
def parameters_and_inplace_relu(ex):
    model = LinearRelu()
    args = (torch.randn(8, 100), torch.randn(8, 100))
    ep = ex.export(model, args)
    return [op_names(ep), sorted(ep.state_dict), [s.target for s in ep.graph_signature.input_specs],
            close_to_eager(ep.module(), model, *args)]


# -- Dynamic shapes ---------------------------------------------------------------------------------

class TwoBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.branch1 = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU())
        self.branch2 = torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.ReLU())
        self.register_buffer("offset", torch.ones(32))

    def forward(self, x1, x2):
        return self.branch1(x1) + self.branch2(x2)[:, :32] + self.offset


@example
def shared_batch_dim(ex):
    model = TwoBranches()
    batch = ex.Dim("batch")
    ep = ex.export(model, (torch.randn(32, 64), torch.randn(32, 128)),
                   dynamic_shapes={"x1": {0: batch}, "x2": {0: batch}})
    module = ep.module()
    return [bounds(ep), close_to_eager(module, model, torch.randn(7, 64), torch.randn(7, 128)),
            observe(lambda: module(torch.randn(7, 64), torch.randn(8, 128))),
            observe(lambda: module(torch.randn(7, 64), torch.randn(7, 100)))]


class Tutorial(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(5, 3)

    def forward(self, w, x, y, z):
        assert w.shape[0] <= 512
        torch._check(x.shape[0] >= 4)
        if w.shape[0] == x.shape[0] + 2:
            x0 = x + y
            x1 = self.l(w)
            x2 = x0.flatten()
            x3 = x2 + z
            return x1, x3
        return w


def _tutorial_inputs(n: int = 4):
    return torch.randn(n + 2, 5), torch.randn(n), torch.randn(2 * n, n), torch.randn(2 * n * n)


@example
def automatic_dims_find_relations(ex):
    model = Tutorial()
    spec = {"w": (ex.Dim.AUTO, ex.Dim.AUTO), "x": (ex.Dim.AUTO,), "y": (ex.Dim.AUTO, ex.Dim.AUTO),
            "z": (ex.Dim.AUTO,)}
    ep = ex.export(model, _tutorial_inputs(), dynamic_shapes=spec)
    module = ep.module()
    return [close_to_eager(module, model, *_tutorial_inputs(6)),
            observe(lambda: module(torch.randn(5, 5), *_tutorial_inputs()[1:])),   # breaks w = x + 2
            observe(lambda: module(*_tutorial_inputs(2)))]                          # breaks x >= 4


@example
def named_dims_report_the_relations(ex):
    model = Tutorial()
    spec = {"w": (ex.Dim("w0"), ex.Dim("w1")), "x": (ex.Dim("x0"),), "y": (ex.Dim("y0"), ex.Dim("y1")),
            "z": (ex.Dim("z0"),)}
    err = observe(lambda: ex.export(model, _tutorial_inputs(), dynamic_shapes=spec))
    if not isinstance(err, Raised):
        return ["exported"]
    try:
        ex.export(model, _tutorial_inputs(), dynamic_shapes=spec)
    except Exception as e:  # noqa: BLE001
        refined = ex.refine(e.msg, spec)
    ep = ex.export(model, _tutorial_inputs(), dynamic_shapes=refined)
    return [err, close_to_eager(ep.module(), model, *_tutorial_inputs(5))]


class Plus(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@example
def specialization_is_an_error_for_named_dims(ex):
    spec = {"x": (ex.Dim("dx0"), ex.Dim("dx1")), "y": (ex.Dim("dy0"), None)}
    return [observe(lambda: ex.export(Plus(), (torch.randn(4, 8), torch.randn(4, 8)), dynamic_shapes=spec))]


@example
def static_dim_with_auto(ex):
    spec = {"x": (ex.Dim.AUTO, ex.Dim.AUTO), "y": (ex.Dim.AUTO, None)}
    ep = ex.export(Plus(), (torch.randn(4, 8), torch.randn(4, 8)), dynamic_shapes=spec)
    return [bounds(ep), close_to_eager(ep.module(), Plus(), torch.randn(6, 8), torch.randn(6, 8)),
            observe(lambda: ep.module()(torch.randn(6, 9), torch.randn(6, 9)))]


class Shift(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


@example
def derived_dim(ex):
    dx = ex.Dim("dx", min=3, max=10)
    ep = ex.export(Shift(), (torch.randn(4, 3), torch.randn(5, 3)), dynamic_shapes={"x": {0: dx}, "y": {0: dx + 1}})
    module = ep.module()
    return [bounds(ep), close_to_eager(module, Shift(), torch.randn(9, 3), torch.randn(10, 3)),
            observe(lambda: module(torch.randn(9, 3), torch.randn(9, 3))),
            observe(lambda: module(torch.randn(11, 3), torch.randn(12, 3)))]


@example
def dim_below_two_in_the_example(ex):
    return [observe(lambda: ex.export(Plus(), (torch.randn(1, 3), torch.randn(1, 3)),
                                      dynamic_shapes={"x": {0: ex.Dim("b")}, "y": {0: ex.Dim("b")}}))]


@example
def shapes_collection(ex):
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    sc = ex.ShapesCollection()
    batch = ex.Dim("batch")
    sc[x] = {0: batch}
    sc[y] = {0: batch}
    ep = ex.export(Plus(), (x, y), dynamic_shapes=sc)
    return [bounds(ep), close_to_eager(ep.module(), Plus(), torch.randn(9, 3), torch.randn(9, 3))]


@example
def additional_inputs(ex):
    extra = ex.AdditionalInputs()
    extra.add((torch.randn(6, 3), torch.randn(6, 3)))
    extra.add((torch.randn(9, 3), torch.randn(9, 3)))
    ep = ex.export(Plus(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=extra)
    return [close_to_eager(ep.module(), Plus(), torch.randn(7, 3), torch.randn(7, 3)),
            observe(lambda: ep.module()(torch.randn(7, 4), torch.randn(7, 4)))]


class Scaled(torch.nn.Module):
    def forward(self, x, n):
        return x[:n] * n


@example
def dynamic_int_input(ex):
    x = torch.randn(8, 3)
    ep = ex.export(Scaled(), (x, 4), dynamic_shapes={"x": None, "n": ex.Dim.DYNAMIC})
    return [bounds(ep), close_to_eager(ep.module(), Scaled(), x, 6), observe(lambda: ep.module()(x, 9))]


# -- Control flow -----------------------------------------------------------------------------------

class ShapeBranch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 5:
            return x.sin()
        return x.cos()


@example
def branch_on_a_static_shape_is_specialized(ex):
    ep = ex.export(ShapeBranch(), (torch.randn(8, 2),))
    return [op_names(ep), observe(lambda: ep.module()(torch.randn(3, 2)))]


@example
def branch_on_a_dynamic_shape_narrows_auto(ex):
    ep = ex.export(ShapeBranch(), (torch.randn(8, 2),), dynamic_shapes={"x": {0: ex.Dim.AUTO}})
    return [bounds(ep), close_to_eager(ep.module(), ShapeBranch(), torch.randn(12, 2)),
            observe(lambda: ep.module()(torch.randn(4, 2)))]


class DataBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x.sin()
        return x.cos()


@example
def branch_on_data_is_an_error(ex):
    return [observe(lambda: ex.export(DataBranch(), (torch.randn(3),)))]


@example
def cond_keeps_both_branches(ex):
    class Cond(torch.nn.Module):
        def forward(self, x):
            return ex.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))
    model = Cond()
    ep = ex.export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: ex.Dim("b")}})
    return [close_to_eager(ep.module(), model, torch.randn(5, 4).abs()),
            close_to_eager(ep.module(), model, -torch.randn(6, 4).abs())]


# -- Data-dependent values --------------------------------------------------------------------------

class Pick(torch.nn.Module):
    def forward(self, x, y):
        a = x.item()
        torch._check(a >= 0)
        torch._check(a < y.shape[0])
        return y[a]


@example
def item_with_checks(ex):
    args = (torch.tensor(1), torch.randn(3, 2))
    ep = ex.export(Pick(), args)
    return [close_to_eager(ep.module(), Pick(), torch.tensor(2), torch.randn(3, 2)),
            observe(lambda: ep.module()(torch.tensor(5), torch.randn(3, 2)))]


class Unchecked(torch.nn.Module):
    def forward(self, x, y):
        a = x.item()
        if a > 2:
            return y * 2
        return y


@example
def item_branch_needs_a_check(ex):
    return [observe(lambda: ex.export(Unchecked(), (torch.tensor(3), torch.randn(2))))]


@example
def nonzero_output(ex):
    class NonZero(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x).float().sum(0)
    x = torch.tensor([[1., 0], [2, 3]])
    ep = ex.export(NonZero(), (x,))
    return [close_to_eager(ep.module(), NonZero(), torch.tensor([[0., 0], [0, 3]]))]


@example
def draft_export_answers_from_the_example(ex):
    ep = ex.draft_export(Unchecked(), (torch.tensor(3), torch.randn(2)))
    return [len(ep._report.failures), close_to_eager(ep.module(), Unchecked(), torch.tensor(5), torch.randn(2)),
            observe(lambda: ep.module()(torch.tensor(1), torch.randn(2)))]


# -- Custom ops -------------------------------------------------------------------------------------

@torch.library.custom_op("graphport_docs::add_one", mutates_args=())
def add_one(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@add_one.register_fake
def _(x):
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return add_one(x).relu()


@example
def custom_op(ex):
    ep = ex.export(UsesCustomOp(), (torch.randn(3),))
    return [op_names(ep), close_to_eager(ep.module(), UsesCustomOp(), torch.randn(3))]


# -- The IR: decompositions, unflatten, save and load -----------------------------------------------

class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 1, 1)
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(x))


@example
def run_decompositions_keeping_conv(ex):
    model = ConvBN().eval()
    ep = ex.export(model, (torch.randn(1, 1, 3, 3),))
    table = ex.default_decompositions()
    del table[torch.ops.aten.conv2d.default]
    core = ep.run_decompositions(table)
    return ["aten.conv2d.default" in op_names(core), "aten.convolution.default" in op_names(ep.run_decompositions()),
            close_to_eager(core.module(), model, torch.randn(2, 1, 3, 3))]


@example
def training_mode_batch_norm_updates_buffers(ex):
    model = ConvBN().train()
    ep = ex.export(model, (torch.randn(2, 1, 3, 3),))
    return [sorted(s.kind.name for s in ep.graph_signature.output_specs),
            sorted(s.target for s in ep.graph_signature.output_specs if s.target)]


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


@example
def unflatten_restores_submodules(ex):
    model = Outer()
    ep = ex.export(model, (torch.randn(2, 4),))
    flat = ex.unflatten(ep)
    return [sorted(name for name, _ in flat.named_children()), close_to_eager(flat, model, torch.randn(2, 4))]


@example
def save_and_load(ex, tmp_path=None):
    import tempfile
    from pathlib import Path
    model = Outer()
    ep = ex.export(model, (torch.randn(3, 4),), dynamic_shapes={"x": {0: ex.Dim("b")}})
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / f"program{ex.suffix}")
        ex.save(ep, path)
        loaded = ex.load(path)
    return [bounds(loaded), close_to_eager(loaded.module(), model, torch.randn(5, 4))]


@example
def module_is_a_graph_module(ex):
    model = Outer()
    ep = ex.export(model, (torch.randn(3, 4),))
    module = ep.module()
    return [isinstance(module, torch.fx.GraphModule), sorted(dict(module.named_parameters())),
            "def forward(self, x)" in module.code]


@example
def kwargs_and_defaults(ex):
    class Kw(torch.nn.Module):
        def forward(self, x, *, scale=2.0, bias=None):
            return x * scale + (0 if bias is None else bias)
    x, b = torch.randn(3), torch.randn(3)
    ep = ex.export(Kw(), (x,), {"bias": b})
    return [close_to_eager(ep.module(), Kw(), x, bias=b), observe(lambda: ep.module()(x))]


@example
def export_needs_a_tuple(ex):
    return [observe(lambda: ex.export(Plus(), [torch.randn(2), torch.randn(2)]))]


# -- More of the API the docs show ------------------------------------------------------------------

@example
def dims_helper_and_tuple_spec(ex):
    dims = gp.dims if ex is EXPORTERS["graphport"] else torch.export.dims
    batch, feat = dims("batch", "feat", min=2, max=16)
    ep = ex.export(Plus(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=((batch, feat), (batch, feat)))
    module = ep.module()
    return [bounds(ep), close_to_eager(module, Plus(), torch.randn(16, 2), torch.randn(16, 2)),
            observe(lambda: module(torch.randn(17, 2), torch.randn(17, 2)))]


@example
def nested_inputs_with_nested_spec(ex):
    class Nested(torch.nn.Module):
        def forward(self, inputs):
            return inputs["a"] + inputs["b"][0] * inputs["b"][1]
    model = Nested()
    batch = ex.Dim("batch")
    args = ({"a": torch.randn(4, 2), "b": [torch.randn(4, 2), torch.randn(4, 2)]},)
    ep = ex.export(model, args, dynamic_shapes={"inputs": {"a": {0: batch}, "b": [{0: batch}, {0: batch}]}})
    other = {"a": torch.randn(6, 2), "b": [torch.randn(6, 2), torch.randn(6, 2)]}
    return [bounds(ep), close_to_eager(ep.module(), model, other)]


@example
def graph_signature_views(ex):
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("calls", torch.zeros(()))
            self.table = torch.arange(3.0)

        def forward(self, x):
            self.calls.add_(1)
            return self.lin(x) + self.table
    model = Counter()
    ep = ex.export(model, (torch.randn(2, 3),))
    sig = ep.graph_signature
    module = ep.module()
    module(torch.randn(2, 3))
    module(torch.randn(2, 3))
    return [list(sig.parameters), list(sig.buffers), list(sig.buffers_to_mutate.values()),
            len(sig.user_inputs), len(sig.user_outputs), len(sig.lifted_tensor_constants),
            float(module.calls)]


@example
def user_input_mutation(ex):
    class Bump(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2
    ep = ex.export(Bump(), (torch.zeros(3),))
    kinds = sorted(s.kind.name for s in ep.graph_signature.output_specs)
    x = torch.zeros(3)
    out = ep.module()(x)
    return [kinds, x, out]


@example
def dataclass_input(ex):
    import dataclasses

    @dataclasses.dataclass
    class Batch:
        tokens: torch.Tensor
        scale: torch.Tensor

    ex.register_dataclass(Batch)

    class UsesBatch(torch.nn.Module):
        def forward(self, batch: Batch):
            return batch.tokens * batch.scale
    ep = ex.export(UsesBatch(), (Batch(torch.randn(4, 2), torch.randn(4, 2)),),
                   dynamic_shapes={"batch": [{0: ex.Dim("n")}, {0: ex.Dim("n")}]})
    other = Batch(torch.randn(7, 2), torch.randn(7, 2))
    return [bounds(ep), close_to_eager(ep.module(), UsesBatch(), other)]


@example
def export_a_function_needs_a_module(ex):
    def f(x):
        return x.sin()
    return [observe(lambda: ex.export(f, (torch.randn(3),)).module()(torch.randn(3)).shape)]


@example
def strict_mode(ex):
    model = Outer()
    ep = ex.export(model, (torch.randn(2, 4),), strict=True)
    return [op_names(ep), close_to_eager(ep.module(), model, torch.randn(2, 4))]
# -- The corpus as tests ----------------------------------------------------------------------------

# Examples where graphport differs on purpose (README "What still differs"): example -> why.
INTENTIONAL: dict[str, str] = {
    "parameters_and_inplace_relu": "graphport's graph is functional: relu(inplace=True) is recorded as relu, where "
                                   "torch.export 2.13's default graph keeps relu_",
    "training_mode_batch_norm_updates_buffers": "graphport's graph is functional: running-stat updates are "
                                                "BUFFER_MUTATION outputs, where torch.export 2.13's default graph "
                                                "mutates the buffers inside batch_norm",
    "graph_signature_views": "graphport's graph is functional: an in-place buffer update is listed in "
                             "buffers_to_mutate (torch.export 2.13's default graph keeps add_ and lists none)",
    "user_input_mutation": "graphport's graph is functional: x.add_(1) is a USER_INPUT_MUTATION output, written "
                           "back by ep.module() (torch.export 2.13's default graph keeps add_)",
    "export_a_function_needs_a_module": "graphport also exports plain functions; torch.export requires an "
                                        "nn.Module (ValueError)",
    "static_dim_with_auto": "Dim.AUTO ranges from 0 in graphport where the program is proven valid at 0 and 1 "
                            "(range_constraints [0, oo]); torch.export 2.13 starts it at 2 and refuses 0 and 1",
}


def _run(name: str, exporter: str) -> Any:
    torch.manual_seed(0)
    return observe(lambda: EXAMPLES[name](EXPORTERS[exporter]))


def compare(name: str) -> tuple[bool, Any, Any]:
    ours, theirs = _run(name, "graphport"), _run(name, "torch")
    return same(ours, theirs), ours, theirs


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docs_example_behaves_as_with_torch_export(name):
    matches, ours, theirs = compare(name)
    if name in INTENTIONAL:
        assert not matches, f"{name} now behaves as torch.export: remove it from INTENTIONAL"
        return
    assert matches, f"\n  graphport: {ours!r}\n  torch:     {theirs!r}"


if __name__ == "__main__":
    results = {name: compare(name) for name in sorted(EXAMPLES)}
    for name, (matches, ours, theirs) in results.items():
        print(f"{'same' if matches else 'DIFF'}  {name}" + ("" if matches else f"\n    graphport: {ours!r}\n"
                                                                                f"    torch:     {theirs!r}"))
    print(f"{sum(m for m, _, _ in results.values())}/{len(results)} examples behave the same")

"""Custom operators end to end: captured as single nodes, kept whole by run_decompositions
unless the table names them, mutating ones made functional in torch's form
(`auto_functionalized`) with the mutation written back, all matching eager."""
from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch import nn

import graphport as gp

aten = torch.ops.aten


# -- the corpus -------------------------------------------------------------------------------

@torch.library.custom_op("gp_corpus::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, scale: float, shift: torch.Tensor) -> torch.Tensor:
    return x * scale + shift


@scale_shift.register_fake
def _(x, scale, shift):
    return torch.empty_like(x)


@torch.library.custom_op("gp_corpus::accumulate", mutates_args=("total",))
def accumulate(total: torch.Tensor, x: torch.Tensor) -> None:
    total.add_(x)


@accumulate.register_fake
def _(total, x):
    return None


@torch.library.custom_op("gp_corpus::split_update", mutates_args=("a", "b"))
def split_update(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    a.mul_(2).add_(x)
    b.sub_(x)
    return (a * b).sum(-1)


@split_update.register_fake
def _(a, b, x):
    return a.new_empty(a.shape[:-1])


@torch.library.custom_op("gp_corpus::pairwise", mutates_args=())
def pairwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x @ x.transpose(-1, -2), x.sum(-1)


@pairwise.register_fake
def _(x):
    return x.new_empty(*x.shape[:-1], x.shape[-2]), x.new_empty(x.shape[:-1])


@torch.library.custom_op("gp_corpus::nonzero_values", mutates_args=())
def nonzero_values(x: torch.Tensor) -> torch.Tensor:
    return x[x != 0]


@nonzero_values.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())


@torch.library.custom_op("gp_corpus::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x + 1


_lib = torch.library.Library("gp_corpus_lib", "DEF")
_lib.define("cube(Tensor x) -> Tensor")
_lib.impl("cube", lambda x: x * x * x, "CPU")
_lib.define("clamp_into(Tensor(a!) out, Tensor x, float limit) -> ()")


def _clamp_into(out, x, limit):
    out.copy_(x.clamp(-limit, limit))


_lib.impl("clamp_into", _clamp_into, "CPU")
_lib.define("softsign_cia(Tensor x) -> Tensor")
_lib.impl("softsign_cia", lambda x: x / (1 + x.abs()), "CompositeImplicitAutograd")


@torch.library.register_fake("gp_corpus_lib::cube", lib=_lib)
def _(x):
    return torch.empty_like(x)


with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # impl_abstract is register_fake's older name, still supported

    @torch.library.impl_abstract("gp_corpus_lib::clamp_into", lib=_lib)
    def _(out, x, limit):
        return None


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(4))

    def forward(self, x):
        y = scale_shift(x, 0.5, self.shift)
        gram, sums = pairwise(torch.ops.gp_corpus_lib.cube(y))
        return gram.softmax(-1), sums + torch.ops.gp_corpus_lib.softsign_cia(sums)


class Mutating(nn.Module):
    """One mutated buffer, two mutated user inputs (one through a view), a mutated
    intermediate, and an op both mutating and returning."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x, a, b):
        accumulate(self.total, x.sum(0))
        s = split_update(a[:, 1:], b, x[:, 1:])
        tmp = torch.zeros_like(x)
        torch.ops.gp_corpus_lib.clamp_into(tmp, x, 0.5)
        return s + tmp[:, 0], self.total * 2


def _mutating_inputs(batch):
    return torch.randn(batch, 4), torch.randn(batch, 4), torch.randn(batch, 3)


def operators(program) -> Counter:
    return Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")


def _check_mutating(program, model, batch):
    eager = Mutating()
    eager.load_state_dict(model.state_dict())
    runner = program.module()
    x, a, b = _mutating_inputs(batch)
    ours_a, ours_b, eager_a, eager_b = a.clone(), b.clone(), a.clone(), b.clone()
    got = runner(x, ours_a, ours_b)
    expected = eager(x, eager_a, eager_b)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close((ours_a, ours_b), (eager_a, eager_b))
    torch.testing.assert_close(runner.get_buffer("total"), eager.total)


# -- tests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_functional_custom_ops_are_single_nodes_kept_whole(dynamic):
    torch.manual_seed(0)
    model = Functional()
    x = torch.randn(3, 5, 4)
    spec = {"x": {0: gp.Dim("batch"), 1: gp.Dim("seq")}} if dynamic else None
    ep = gp.export(model, (x,), dynamic_shapes=spec)
    ops = operators(ep)
    assert ops["gp_corpus.scale_shift.default"] == ops["gp_corpus.pairwise.default"] == 1
    assert ops["gp_corpus_lib.cube.default"] == ops["gp_corpus_lib.softsign_cia.default"] == 1
    core = ep.run_decompositions()
    core_ops = operators(core)
    assert core_ops["gp_corpus.scale_shift.default"] == core_ops["gp_corpus.pairwise.default"] == 1
    assert core_ops["gp_corpus_lib.cube.default"] == 1
    assert "gp_corpus_lib.softsign_cia.default" not in core_ops   # a composite: the default table expands it
    gp.verify(core, dialect="core_aten")
    for shape in [(3, 5, 4), (2, 7, 4)] if dynamic else [(3, 5, 4)]:
        x = torch.randn(shape)
        for program in (ep, core):
            torch.testing.assert_close(program.module()(x), model(x))


def test_custom_ops_decompose_only_when_the_table_asks():
    model = Functional()
    x = torch.randn(3, 5, 4)
    ep = gp.export(model, (x,))
    table = gp.default_decompositions()
    table[torch.ops.gp_corpus.scale_shift.default] = lambda x, scale, shift: x * scale + shift
    del table[torch.ops.gp_corpus_lib.softsign_cia.default]
    lowered = ep.run_decompositions(table)
    ops = operators(lowered)
    assert "gp_corpus.scale_shift.default" not in ops and ops["gp_corpus_lib.softsign_cia.default"] == 1
    torch.testing.assert_close(lowered.module()(x), model(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.export.export(model, (x,))
    their_table = torch.export.default_decompositions()
    their_table[torch.ops.gp_corpus.scale_shift.default] = table[torch.ops.gp_corpus.scale_shift.default]
    del their_table[torch.ops.gp_corpus_lib.softsign_cia.default]
    assert operators(lowered) == operators(theirs.run_decompositions(their_table))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_mutating_custom_ops_become_auto_functionalized_with_write_back(dynamic):
    torch.manual_seed(0)
    model = Mutating()
    x, a, b = _mutating_inputs(3)
    batch = gp.Dim("batch", min=2)   # (the size-1 proof of writes through input views is not settled yet)
    spec = ({0: batch}, {0: batch}, {0: batch}) if dynamic else None
    ep = gp.export(model, (x, a.clone(), b.clone()), dynamic_shapes=spec)
    assert operators(ep)["auto_functionalized"] == 3
    assert not any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
                   for n in ep.graph.nodes if n.op == "call_function")
    kinds = Counter(s.kind for s in ep.graph_signature.output_specs)
    assert kinds[gp.OutputKind.BUFFER_MUTATION] == 1 and kinds[gp.OutputKind.USER_INPUT_MUTATION] == 2
    core = ep.run_decompositions()
    assert operators(core)["auto_functionalized"] == 3
    gp.verify(core, dialect="core_aten")
    for program in (ep, core):
        for batch_size in (3, 5) if dynamic else (3,):
            _check_mutating(program, model, batch_size)


def test_mutating_custom_op_signature_matches_torch():
    model = Mutating()
    args = _mutating_inputs(3)
    ep = gp.export(model, tuple(t.clone() for t in args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.export.export(Mutating(), tuple(t.clone() for t in args)).run_decompositions()
    assert [(s.kind.name, s.target) for s in ep.graph_signature.output_specs] == \
        [(s.kind.name, s.target) for s in theirs.graph_signature.output_specs]
    ours = {op for op in operators(ep) if op.startswith("gp_corpus") or op == "auto_functionalized"}
    their = {op.replace("auto_functionalized_v2", "auto_functionalized") for op in operators(theirs)
             if op.startswith("gp_corpus") or op.startswith("auto_functionalized")}
    assert ours == their == {"auto_functionalized"}


def test_auto_functionalized_programs_run_in_torch_ecosystem_form():
    model = Mutating()
    ep = gp.export(model, tuple(t.clone() for t in _mutating_inputs(3)))
    node = next(n for n in ep.graph.nodes if n.op == "call_function" and str(n.target) == "auto_functionalized")
    assert node.target is torch.ops.higher_order.auto_functionalized
    assert node.args == (torch.ops.gp_corpus.accumulate.default,) and set(node.kwargs) == {"total", "x"}
    assert node.meta["stack_trace"] and "test_custom_ops.py" in node.meta["stack_trace"]


class NonzeroValues(nn.Module):
    def forward(self, x):
        values = nonzero_values(x)
        return values * 2, values.shape[0] + 1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_data_dependent_output_size_from_the_fake_kernel(dynamic):
    """`ctx.new_dynamic_size()` in a fake kernel: a data-dependent size symbol, read at run
    time from the op's output (`sym_size`), as torch.export does."""
    x = torch.tensor([0.0, 1.0, 2.0, 0.0, 3.0])
    ep = gp.export(NonzeroValues(), (x,), dynamic_shapes=({0: gp.Dim("n")},) if dynamic else None)
    core = ep.run_decompositions()
    gp.verify(core, dialect="core_aten")
    node = next(n for n in core.graph.nodes if n.target is torch.ops.gp_corpus.nonzero_values.default)
    assert not isinstance(node.meta["val"].shape[0], int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.export.export(NonzeroValues(), (x,), dynamic_shapes=({0: torch.export.Dim("n")},)
                                     if dynamic else None).run_decompositions()
    # torch also asserts the size is >= 0, which a size read from a tensor always is
    assert operators(core) == operators(theirs) - Counter({"<built-in function ge>": 1,
                                                           "aten._assert_scalar.default": 1})
    fresh = [x, torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0]), torch.zeros(5), torch.ones(5)]
    if dynamic:
        fresh += [torch.tensor([4.0, 0.0, 2.0]), torch.tensor([7.0]), torch.zeros(0)]
    for t in fresh:
        for program in (ep, core):
            got, expected = program.module()(t), NonzeroValues()(t)
            torch.testing.assert_close(got[0], expected[0])
            assert got[1] == expected[1]


@torch.library.custom_op("gp_corpus::at_least_two_nonzero", mutates_args=())
def at_least_two_nonzero(x: torch.Tensor) -> torch.Tensor:
    return x[x != 0]


@at_least_two_nonzero.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size(min=2, max=x.shape[0]))


def test_the_fake_kernels_size_range_is_checked_at_run_time():
    ep = gp.export(lambda x: at_least_two_nonzero(x) + 1, (torch.tensor([1.0, 0.0, 2.0]),))
    for program in (ep, ep.run_decompositions()):
        torch.testing.assert_close(program.module()(torch.tensor([3.0, 4.0, 0.0])), torch.tensor([4.0, 5.0]))
        with pytest.raises(RuntimeError, match="u0 >= 2"):
            program.module()(torch.tensor([3.0, 0.0, 0.0]))


def test_a_size_computed_from_a_data_dependent_size_is_refused():
    lib = torch.library.Library("gp_corpus_dd", "DEF")
    lib.define("pairs(Tensor x) -> Tensor")
    lib.impl("pairs", lambda x: x[x != 0].repeat(2), "CPU")
    torch.library.register_fake("gp_corpus_dd::pairs",
                                lambda x: x.new_empty(2 * torch.library.get_ctx().new_dynamic_size()), lib=lib)
    with pytest.raises(gp.DataDependentError, match="cannot read back at run time") as info:
        gp.export(lambda x: torch.ops.gp_corpus_dd.pairs(x) + 1, (torch.randn(5),))
    assert "fix:" in str(info.value) and isinstance(info.value, RuntimeError)


def test_custom_op_without_fake_kernel_says_how_to_register_one():
    with pytest.raises(gp.UnsupportedOperatorError, match="register_fake") as info:
        gp.export(lambda x: no_fake(x) * 2, (torch.randn(5),))
    assert "gp_corpus::no_fake" in str(info.value)


def test_custom_op_returning_a_view_is_refused():
    lib = torch.library.Library("gp_corpus_view", "DEF")
    lib.define("first_row_(Tensor(a!) x) -> Tensor(a)")
    lib.impl("first_row_", lambda x: x.mul_(2)[0], "CPU")
    torch.library.register_fake("gp_corpus_view::first_row_", lambda x: x[0], lib=lib)
    with pytest.raises(gp.UnsupportedFeatureError, match="returns a view") as info:
        gp.export(lambda x: torch.ops.gp_corpus_view.first_row_(x) + 1, (torch.randn(3, 2),))
    assert "fix:" in str(info.value)


_lib_cia = torch.library.Library("gp_corpus_cia", "DEF")
_lib_cia.define("accumulate_twice(Tensor(a!) total, Tensor x) -> Tensor")


def _accumulate_twice(total, x):
    total.add_(x)
    return x * 2


_lib_cia.impl("accumulate_twice", _accumulate_twice, "CPU")
torch.library.register_fake("gp_corpus_cia::accumulate_twice", lambda total, x: torch.empty_like(x), lib=_lib_cia)
_lib_cia.define("accumulate_composite(Tensor(a!) total, Tensor x) -> Tensor")
_lib_cia.impl("accumulate_composite", _accumulate_twice, "CompositeImplicitAutograd")


class MutatingWithDecompositions(nn.Module):
    """A mutating op with only a backend kernel (the user's table may name it), and one
    whose kernel is a composite (capture expands it, as any composite that writes)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(4))

    def forward(self, x, acc):
        r = torch.ops.gp_corpus_cia.accumulate_twice(self.total, x)
        torch.ops.gp_corpus_cia.accumulate_composite(acc, x)
        accumulate(acc, r)
        return r + 1


def _live_operators(program) -> Counter:
    """Operators whose results are used, auto_functionalized under one name (torch's lowering
    writes the v2 form and drops calls whose results are unused)."""
    live = set()
    for node in reversed(program.graph.nodes):
        if node.op == "output" or node in live:
            live.update(node.all_input_nodes)
            live.add(node)
    return Counter(str(n.target).replace("auto_functionalized_v2", "auto_functionalized") for n in live
                   if n.op == "call_function" and str(n.target) != "<built-in function getitem>")


@pytest.mark.parametrize("table", ["names the mutating ops", "core", "empty"])
def test_a_table_entry_for_a_mutating_custom_op_keeps_it_functionalized_as_in_torch(table):
    def tables():
        def decompose_accumulate_twice(total, x):
            total.add_(x)
            return x * 2
        entries = {torch.ops.gp_corpus_cia.accumulate_twice.default: decompose_accumulate_twice,
                   torch.ops.gp_corpus.accumulate.default: lambda total, x: total.add_(x)}
        return {"names the mutating ops": entries, "core": None, "empty": {}}[table]

    model = MutatingWithDecompositions()
    args = (torch.randn(4), torch.randn(4))
    ep = gp.export(model, tuple(a.clone() for a in args))
    ours = ep.run_decompositions(tables())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.export.export(MutatingWithDecompositions(), tuple(a.clone() for a in args))
        theirs = theirs.run_decompositions(tables())
    assert _live_operators(ours) == _live_operators(theirs)
    assert _live_operators(ours)["auto_functionalized"] == 2
    assert "gp_corpus_cia.accumulate_composite.default" not in operators(ep)
    assert [(s.kind.name, s.target) for s in ours.graph_signature.output_specs] == \
        [(s.kind.name, s.target) for s in theirs.graph_signature.output_specs]
    runner, eager = ours.module(), MutatingWithDecompositions()
    for _ in range(2):   # the buffer carries over between calls
        x, acc = torch.randn(4), torch.randn(4)
        ours_acc, eager_acc = acc.clone(), acc.clone()
        torch.testing.assert_close(runner(x, ours_acc), eager(x, eager_acc))
        torch.testing.assert_close(ours_acc, eager_acc)
        torch.testing.assert_close(runner.get_buffer("total"), eager.total)

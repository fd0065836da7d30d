"""Control-flow programs: each with example inputs, dynamic dims, and inputs that take every
branch (or several map lengths), for differential tests against eager and torch.export."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from functorch.experimental.control_flow import map as fmap
from torch import cond as cond_from_torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

Dim = torch.export.Dim


@dataclass
class Case:
    name: str
    make: Callable[[], torch.nn.Module]
    args: tuple
    dynamic: Any = None
    fresh: list[tuple] = field(default_factory=list)   # inputs that exercise every branch / several lengths
    torch_exports: bool = True   # False: torch.export refuses the program (compared with eager only)


def r(*shape):
    return torch.randn(*shape)


def pos(*shape):
    return torch.rand(*shape) + 0.1


def neg(*shape):
    return -torch.rand(*shape) - 0.1


class TensorPred(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class SizePred(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x + 1, [x])


class NamedFunctions(torch.nn.Module):
    def forward(self, x, y):
        def true_fn(a, b):
            return a @ b, (a - 1).relu()

        def false_fn(a, b):
            return a @ b.t().t() * 2, a.abs()
        return torch.cond(x.mean() > 0, true_fn, false_fn, (x, y))


class ClosureOverParams(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 4.0, 5.0]))

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.lin(x) * self.scale, lambda x: x - self.scale, (x,))


class Branch(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        return self.act(self.lin(x))


class ModuleBranches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Branch(torch.nn.ReLU())
        self.b = Branch(torch.nn.Tanh())

    def forward(self, x):
        return torch.cond(x[0, 0] > 0, self.a, self.b, (x,))


class ClosureOverPython(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 3

    def forward(self, x):
        k = self.k + 1
        return cond_from_torch(x.max() > 0.5, lambda x: x * k, lambda x: x / self.k, (x,))


class NestedCond(torch.nn.Module):
    def forward(self, x):
        def outer_true(x):
            return torch.cond(x.min() > -1, lambda x: x + 10, lambda x: x - 10, (x,))
        return torch.cond(x.sum() > 0, outer_true, lambda x: x * 0.5, (x,))


class ClosureOverOuterTensor(torch.nn.Module):
    def forward(self, x, y):
        z = y * 2
        return torch.cond(x.sum() > 0, lambda x: x + z, lambda x: x - z, (x,))


class DynamicInsideBranch(torch.nn.Module):
    def forward(self, x):
        def true_fn(x):
            return x.reshape(x.shape[0] * 2, 2).flip(1).reshape(x.shape[0], 4) + x.shape[0]

        def false_fn(x):
            return x.flip(0)
        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


class SizePredTwoDims(torch.nn.Module):
    def forward(self, x, y):
        return torch.cond(x.shape[0] + y.shape[0] > 6, lambda x, y: x.sum() + y.sum(), lambda x, y: x.mean() - y.mean(),
                          (x, y))


class ListOperands(torch.nn.Module):
    def forward(self, x, y):
        return torch.cond(y.sum() > 0, lambda a, b: (a + b.sum(), b * 2), lambda a, b: (a - 1, b.exp()), [x, y])


class CondAfterMutation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        out = torch.cond(x.sum() > 0, lambda x: x + self.count, lambda x: x - self.count, (x,))
        return out


class CondUsesOutsideView(torch.nn.Module):
    def forward(self, x):
        v = x[:, :2]
        return torch.cond(v.sum() > 0, lambda v: v * 3, lambda v: v.neg(), (v,))


class MapSimple(torch.nn.Module):
    def forward(self, xs):
        return fmap(lambda x: x.sin() + 1, xs)


class MapWithArgs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, xs, y):
        return fmap(lambda x, y: x * self.w + y, xs, y)


class CondInsideMap(torch.nn.Module):
    def forward(self, xs):
        return fmap(lambda x: torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x.abs(), (x,)), xs)


class MapInsideCond(torch.nn.Module):
    def forward(self, xs):
        return torch.cond(xs.sum() > 0, lambda xs: fmap(lambda x: x + 1, xs), lambda xs: xs * 2, (xs,))


class MapMultipleXs(torch.nn.Module):
    def forward(self, xs, ys):
        return fmap(lambda xy: (xy[0] + xy[1], xy[0] * xy[1]), [xs, ys])


class WhileCounter(torch.nn.Module):
    """Runs the body as many times as the counter input says: the trip count is data."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, it, x):
        return while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * self.w + 1), (it, x))


class WhileUntilSmall(torch.nn.Module):
    def forward(self, x):
        return while_loop(lambda x: x.abs().max() > 1, lambda x: (x / 2,), (x,))


class ScanCumulative(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, init, xs):
        def combine(carry, x):
            new = carry * 0.5 + x * self.w
            return new, new.sin()
        return scan(combine, init, xs)


class ScanTreesInCond(torch.nn.Module):
    def forward(self, xs):
        def combine(carry, x):
            total = carry["sum"] + x
            return {"sum": total}, (total * 2, x.max())
        return torch.cond(xs.sum() > 0, lambda xs: scan(combine, {"sum": xs[0] * 0}, xs)[1][0],
                          lambda xs: xs.cos(), (xs,))


class Expert(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class MixtureOfExperts(torch.nn.Module):
    """Routes the batch to each expert that some token picked, skipping the others with cond."""

    def __init__(self, d=8, n=3):
        super().__init__()
        self.gate = torch.nn.Linear(d, n)
        self.experts = torch.nn.ModuleList(Expert(d) for _ in range(n))

    def forward(self, x):
        weights = self.gate(x).softmax(-1)
        choice = weights.argmax(-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            mask = (choice == i).unsqueeze(-1).to(x.dtype)
            w = weights[:, i:i + 1]
            out = out + torch.cond((choice == i).any(), lambda x, m, w: expert(x) * m * w,
                                   lambda x, m, w: torch.zeros_like(x), (x, mask, w))
        return out


class EarlyExit(torch.nn.Module):
    """Stops after the first block when the classifier is confident; else runs the rest."""

    def __init__(self, d=8, classes=4):
        super().__init__()
        self.block1 = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU())
        self.head1 = torch.nn.Linear(d, classes)
        self.block2 = torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU(), torch.nn.Linear(d, d))
        self.head2 = torch.nn.Linear(d, classes)

    def forward(self, x):
        h = self.block1(x)
        logits = self.head1(h)
        confident = logits.softmax(-1).max(-1).values.min() > 0.5
        return torch.cond(confident, lambda h, logits: logits.clone(), lambda h, logits: self.head2(self.block2(h)),
                          (h, logits))


class BranchDependentSize(torch.nn.Module):
    """The branches return different numbers of rows: the output's size is decided at run
    time, and code after the cond uses it."""

    def forward(self, x):
        y = torch.cond(x.sum() > 0, lambda x: x[:2] * 2, lambda x: x[1:] + 1, (x,))
        return y, y.shape[0] * torch.ones(2)


class BranchDependentSizes(torch.nn.Module):
    """Two outputs, each with a size the branch decides, one of them on its second dimension."""

    def forward(self, x, y):
        def true_fn(x, y):
            return x.sum(0, keepdim=True), torch.cat([y, y], 1)

        def false_fn(x, y):
            return x[:-1].exp(), y.clone()
        return torch.cond(y.mean() > 0, true_fn, false_fn, (x, y))


class SymIntOperand(torch.nn.Module):
    """A dynamic size passed to the cond operator as an operand."""

    def forward(self, x):
        return torch.ops.higher_order.cond(x.sum() > 0, lambda x, n: (x * n,), lambda x, n: (x - n,), (x, x.shape[0]))


class IntAndSymIntOperands(torch.nn.Module):
    """A Python int and a dynamic size passed to the cond operator as operands."""

    def forward(self, x):
        return torch.ops.higher_order.cond(x.sum() > 0, lambda x, n, k: (x * n + k,), lambda x, n, k: (x - n + k,),
                                           (x, x.shape[0], 3))


class MapSymIntOperand(torch.nn.Module):
    def forward(self, xs, y):
        return fmap(lambda x, y, n: x * n + y, xs, y, xs.shape[0])


class ScanClosesOverSize(torch.nn.Module):
    def forward(self, init, xs):
        n = xs.shape[0]
        return scan(lambda carry, x: (carry + x / n, carry * n), init, xs)


def _confident_input():
    return torch.full((2, 8), 0.0)


CASES = [
    Case("tensor_pred", TensorPred, (r(3, 4),), None, [(pos(3, 4),), (neg(3, 4),)]),
    Case("tensor_pred_dynamic", TensorPred, (r(3, 4),), {"x": {0: Dim("b")}},
         [(pos(5, 4),), (neg(1, 4),), (pos(0, 4),), (neg(2, 4),)]),
    Case("size_pred", SizePred, (r(3, 4),), {"x": {0: Dim("b")}},
         [(r(5, 4),), (r(4, 4),), (r(0, 4),), (r(1, 4),), (r(9, 4),)]),
    Case("named_functions_tuple_out", NamedFunctions, (r(3, 4), r(4, 5)), None,
         [(pos(3, 4), r(4, 5)), (neg(3, 4), r(4, 5))]),
    Case("closure_over_params_buffers", ClosureOverParams, (r(2, 4),), {"x": {0: Dim("b")}},
         [(pos(3, 4),), (neg(6, 4),)]),
    Case("module_branches", ModuleBranches, (r(3, 4),), None, [(pos(3, 4),), (neg(3, 4),)]),
    Case("closure_over_python_value", ClosureOverPython, (r(3, 4),), None, [(pos(3, 4) + 1,), (neg(3, 4),)]),
    Case("nested_cond", NestedCond, (r(3, 4),), {"x": {0: Dim("b")}},
         [(pos(3, 4),), (neg(2, 4),), (torch.tensor([[5.0, -2.0]]).expand(2, 2).reshape(1, 4).clone(),)]),
    Case("closure_over_outer_tensor", ClosureOverOuterTensor, (r(3, 4), r(4)), None,
         [(pos(3, 4), r(4)), (neg(3, 4), r(4))]),
    Case("dynamic_dims_inside_branch", DynamicInsideBranch, (r(3, 4),), {"x": {0: Dim("b", min=2)}},
         [(pos(5, 4),), (neg(2, 4),)]),
    Case("size_pred_two_dims", SizePredTwoDims, (r(3, 4), r(2)), {"x": {0: Dim("a")}, "y": {0: Dim("c")}},
         [(r(5, 4), r(3)), (r(1, 4), r(1)), (r(4, 4), r(2)), (r(4, 4), r(3))]),
    Case("list_operands", ListOperands, (r(3), r(2)), None, [(r(3), pos(2)), (r(3), neg(2))]),
    Case("cond_after_buffer_mutation", CondAfterMutation, (r(3),), None, [(pos(3),), (neg(3),)]),
    Case("cond_on_outside_view", CondUsesOutsideView, (r(3, 4),), {"x": {0: Dim("b")}},
         [(pos(4, 4),), (neg(1, 4),)]),
    Case("map_simple", MapSimple, (r(3, 4),), {"xs": {0: Dim("n", min=1)}}, [(r(1, 4),), (r(2, 4),), (r(7, 4),)]),
    Case("map_with_args_and_params", MapWithArgs, (r(3, 4), r(4)), {"xs": {0: Dim("n", min=1)}, "y": None},
         [(r(1, 4), r(4)), (r(5, 4), r(4))]),
    Case("cond_inside_map", CondInsideMap, (r(4, 3),), {"xs": {0: Dim("n", min=1)}},
         [(r(1, 3),), (r(6, 3),), (pos(2, 3),), (neg(2, 3),)]),
    Case("map_inside_cond", MapInsideCond, (r(3, 4),), None, [(pos(3, 4),), (neg(3, 4),)]),
    Case("map_multiple_xs", MapMultipleXs, (r(3, 2), r(3, 2)), None, [(r(3, 2), r(3, 2))]),
    Case("while_loop_trip_counts", WhileCounter, (torch.tensor(0), r(3, 4)), {"it": None, "x": {0: Dim("b")}},
         [(torch.tensor(5), r(2, 4)), (torch.tensor(4), r(1, 4)), (torch.tensor(-3), r(6, 4)), (torch.tensor(9), r(0, 4))]),
    Case("while_until_small", WhileUntilSmall, (r(3) * 10,), {"x": {0: Dim("n", min=1)}},
         [(r(5) * 1000,), (r(2) * 0.1,), (r(1) * 3,)]),
    Case("scan_cumulative", ScanCumulative, (r(4), r(5, 4)), {"init": None, "xs": {0: Dim("n", min=1)}},
         [(r(4), r(1, 4)), (r(4), r(9, 4))]),
    Case("scan_trees_inside_cond", ScanTreesInCond, (r(4, 3),), None, [(pos(4, 3),), (neg(4, 3),)]),
    Case("mixture_of_experts", MixtureOfExperts, (r(5, 8),), {"x": {0: Dim("tokens", min=2)}},
         [(r(9, 8),), (r(2, 8),), (r(16, 8),)]),
    Case("branch_dependent_size", BranchDependentSize, (r(5, 3),), None, [(pos(5, 3),), (neg(5, 3),)]),
    Case("branch_dependent_size_dynamic", BranchDependentSize, (r(5, 3),), {"x": {0: Dim("b")}},
         [(pos(7, 3),), (neg(7, 3),), (pos(1, 3),), (neg(1, 3),), (neg(0, 3),), (pos(2, 3),)], torch_exports=False),
    Case("branch_dependent_sizes_two_outputs", BranchDependentSizes, (r(4, 3), r(2, 3)), None,
         [(r(4, 3), pos(2, 3)), (r(4, 3), neg(2, 3))]),
    Case("symint_operand", SymIntOperand, (r(5, 3),), {"x": {0: Dim("b")}},
         [(pos(2, 3),), (neg(7, 3),), (pos(1, 3),), (neg(0, 3),)]),
    Case("int_and_symint_operands", IntAndSymIntOperands, (r(5, 3),), {"x": {0: Dim("b")}},
         [(pos(2, 3),), (neg(7, 3),), (pos(1, 3),), (neg(0, 3),)], torch_exports=False),
    Case("map_symint_operand", MapSymIntOperand, (r(5, 3), r(3)), {"xs": {0: Dim("n", min=1)}, "y": None},
         [(r(1, 3), r(3)), (r(8, 3), r(3))]),
    Case("scan_closes_over_size", ScanClosesOverSize, (r(3), r(5, 3)), {"init": None, "xs": {0: Dim("n", min=1)}},
         [(r(3), r(1, 3)), (r(3), r(6, 3))]),
    Case("early_exit_classifier", EarlyExit, (r(2, 8),), {"x": {0: Dim("b", min=2)}},
         [(r(4, 8),), (_confident_input(),), (r(3, 8) * 10,)]),
]

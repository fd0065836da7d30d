"""A second grammar for the random-program fuzzer (programs.py): size arithmetic and the
statements around it.

Statement families: float size arithmetic (products and quotients by inexact constants,
roots, comparisons of two ways to write one number, ints made through floats), integer size
arithmetic (floor division, modulo, divmod, max), dtypes and promotion, data-dependent
values (`.item()`, `nonzero`, boolean masks), control flow with size predicates (`cond`,
`map`, `scan`), writes to the inputs, and random operators (the oracle seeds torch's
generator before each call). Each step is a line of Python over the tensors defined so far;
the generator keeps only the lines eager runs.
"""
from __future__ import annotations

import random

import torch

# inexact binary constants next to exact ones: the rounding of size arithmetic shows on the former
FLOATS = ["0.1", "0.2", "0.3", "0.7", "1.5", "0.5", "2.0", "(1 / 3)", "3.0", "10.0"]
NEAR = [   # two ways to write one real number, which doubles may round apart
    ("(({n} * {a}) * {b})", "({n} * ({a} * {b}))"),
    ("({n} / {a} * {a})", "{n}"),
    ("({n} * {a} + {n} * {b})", "({n} * ({a} + {b}))"),
    ("(({n} * {a}) * 10)", "{n}"),
    ("({n} ** 0.5 * {n} ** 0.5)", "{n}"),
]
COMPARE = ["<", "<=", "==", "!=", ">", ">="]
FAMILIES = ["float_scale", "float_branch", "int_of_float", "int_arith", "dtype", "mask", "item", "cond",
            "cond_float", "cond_sizes", "map", "scan", "write_input", "scatter", "sym_ops", "random",
            "decided_cond", "cond_item", "scatter_sizes", "window_copy"]


class SizeSteps:
    """One random statement at a time, as programs._Gen.step does for views."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def step(self, v, t, env):
        r = self.rng
        kind = r.choice(FAMILIES)
        if t.dim() == 0:
            return kind, f"{v}.reshape(1) * 2"
        d = r.randrange(t.dim())
        n = f"{v}.shape[{d}]"
        make = getattr(self, "_" + kind)
        return make(v, t, d, n)

    # -- floats ---------------------------------------------------------------------------------

    def _float_scale(self, v, t, d, n):
        r = self.rng
        a, b = r.choice(FLOATS), r.choice(FLOATS)
        scale = r.choice([f"({n} * {a})", f"({n} / {a} + {b})", f"(({n} + 1) ** -0.5)", f"torch.sym_float({n})",
                          f"({n} * {a} - {n} * {b})", f"(({n} + 1) ** {a})", f"(abs({n} - 3) / ({n} + 1))"])
        return "float_scale", f"{v} * {scale}"

    def _float_branch(self, v, t, d, n):
        r = self.rng
        a, b = r.choice(FLOATS), r.choice(FLOATS)
        lhs, rhs = (side.format(n=n, a=a, b=b) for side in r.choice(NEAR))
        if r.random() < 0.3:
            lhs, rhs = f"({n} * {a})", f"({n} - {b})"
        return "float_branch", f"({v} + 1 if {lhs} {r.choice(COMPARE)} {rhs} else {v} - 1)"

    def _int_of_float(self, v, t, d, n):
        r = self.rng
        a = r.choice(["0.1", "0.3", "0.5", "0.7", "(1 / 3)", "0.9"])
        length = r.choice([f"int({n} * {a})", f"math.ceil({n} * {a})", f"math.floor({n} / 3)",
                           f"round({n} * {a})", f"int({n} * {a} * 10) // 10", f"math.ceil({n} / 3)"])
        return "int_of_float", f"{v}.narrow({d}, 0, min({length}, {n}))"

    # -- integers -------------------------------------------------------------------------------

    def _int_arith(self, v, t, d, n):
        r = self.rng
        k = r.choice([2, 3, 4])
        size = r.choice([f"{n} // {k} + {n} % {k}", f"divmod({n}, {k})[0]", f"divmod({n}, {k})[1] + 1",
                         f"max({n} - {k}, 0)", f"min({n}, {k})", f"({n} + {k} - 1) // {k} * {k} - {n}"])
        return "int_arith", r.choice([f"{v}.new_ones({size}) * {v}.sum()",
                                      f"torch.arange({size}, dtype={v}.dtype) + {v}.mean()"])

    # -- dtypes ---------------------------------------------------------------------------------

    def _dtype(self, v, t, d, n):
        r = self.rng
        return "dtype", r.choice([
            f"{v}.to(torch.float16) * 2", f"{v}.to(torch.int32) + {v}", f"({v} > 0) + {v}.double()",
            f"{v}.to(torch.bfloat16).sum({d})", f"{v}.long() // 2", f"torch.where({v} > 0, {v}, 0.5)",
            f"{v}.to(torch.int64) * 2.5", f"({v} * 100).to(torch.int8).float()", f"{v}.double() / {n}"])

    # -- data-dependent values ------------------------------------------------------------------

    def _mask(self, v, t, d, n):
        r = self.rng
        return "mask", r.choice([f"{v}[{v} > 0]", f"torch.nonzero({v} > 0)", f"{v}.masked_fill({v} < 0, 0)",
                                 f"torch.masked_select({v}, {v} > 0.5) * 2", f"{v}[{v}.abs() > {v}.mean()]"])

    def _item(self, v, t, d, n):
        r = self.rng
        return "item", r.choice([f"{v} * {v}.sum().item()", f"{v} + {v}.max().item() if {v}.numel() else {v}",
                                 f"{v}.new_zeros(int(({v} > 0).sum().item())) + 1",
                                 f"{v} * (({v} > 0).sum().item() / ({n} + 1))"])

    # -- control flow ---------------------------------------------------------------------------

    def _cond(self, v, t, d, n):
        r = self.rng
        pred = r.choice([f"{n} > {r.randint(1, 5)}", f"{n} % 2 == 0", f"{v}.sum() > 0"])
        return "cond", (f"torch.cond({pred}, lambda a: a * 2 + a.shape[{d}], lambda a: a - 1, ({v},))")

    def _cond_float(self, v, t, d, n):
        r = self.rng
        return "cond_float", (f"torch.cond({n} > {r.randint(1, 4)}, lambda a: a * ((a.shape[{d}] + 1) ** -0.5), "
                              f"lambda a: a + 1, ({v},))")

    def _cond_sizes(self, v, t, d, n):
        """A cond whose predicate, operands or branches reach sizes other statements use too:
        a data-dependent size, a nested cond, floats and minima of sizes inside a branch."""
        r = self.rng
        m = r.choice([f"{v}[{v} > 0]", f"{v}.flatten()[{v}.flatten() > 0]", f"{v}.flatten()"])
        pred = r.choice([f"{n} > {r.randint(1, 4)}", f"m.shape[0] > {r.randint(0, 3)}", f"m.shape[0] < {n}",
                         f"{n} * 0.5 > 1"])
        inner = r.choice(["a * 2", "a * torch.sym_float(a.shape[0])", "a * min(a.shape[0], m.shape[0])",
                          f"a + (m.shape[0] > {n})",
                          f"torch.cond(a.shape[0] > 3, lambda b: b * b.shape[0], lambda b: b - 1, (a,))"])
        use = r.choice(["", " + m.shape[0]", " * torch.sym_float(m.shape[0])", f" + min(m.shape[0], {n})",
                        f" + (m.shape[0] > {n})"])
        return "cond_sizes", (f"(lambda m: torch.cond({pred}, lambda a: {inner}, lambda a: a - m.shape[0], ({v},))"
                              f"{use})({m})")

    def _map(self, v, t, d, n):
        r = self.rng
        body = r.choice(["row * 2 + row.shape[0]", "row * torch.sym_float(row.shape[-1])", "row.flip(0) + 1",
                         "row.cumsum(-1)"])
        return "map", f"control_flow.map(lambda row: {body}, {v})"

    def _scan(self, v, t, d, n):
        """scan over a dimension (the last one too, where a size-1 dimension meets broadcasting),
        with a carry that broadcasts against the rows."""
        r = self.rng
        dim = r.choice([0, 0, d])
        row = f"{v}.select({dim}, 0)"
        init = r.choice([f"torch.zeros_like({row})", f"{row}.clone()", f"{row}.sum(0, keepdim=True) * 0",
                         f"{row}.new_zeros(1)", f"{row}.new_zeros(())"])
        body = r.choice(["(c + row, c * 2)", "(c * 0.5 + row, row - c)", "(c + row.sum(0, keepdim=True), row)",
                         "((c + row).amax(0, keepdim=True), c + row)", "(c + row, c + row.shape[0])"])
        reverse = r.choice(["", ", reverse=True"])
        return "scan", f"scan(lambda c, row: {body}, {init}, {v}, dim={dim}{reverse})[{r.choice([0, 1])}]"

    # -- writes and random operators ------------------------------------------------------------

    def _write_input(self, v, t, d, n):
        r = self.rng
        src = r.choice(["x0.add_(1)", "x0.mul_(x0.shape[0] * 0.5)", "x0[x0 > 0] = 0", "x0.clamp_(min=-0.5)",
                        "x0.copy_(x0 * 2)",
                        "x0.view(-1).as_strided((2,), (1,), 0).mul_(2)", "x0.as_strided((1,), (1,), 0).add_(1)",
                        "x0.view(-1)[:x0.shape[0]].add_(1)"])
        return "write_input", src, None

    def _scatter(self, v, t, d, n):
        r = self.rng
        target = r.choice([v, f"{v}.clone()", f"{v}.contiguous()"])
        index = r.choice([f"torch.zeros_like({v}, dtype=torch.long)", f"{v}.argsort(dim={d})",
                          f"{v}.argsort(dim={d}).narrow({d}, 0, min(1, {n}))"])
        op = r.choice([f"scatter_({d}, {index}, 1.0)", f"scatter_add_({d}, {index}, {v})",
                       f"scatter_reduce_({d}, {index}, {v}, 'amax')"])
        if target in ("x0", "x1"):   # an input written in place
            return "scatter", f"{target}.{op}", None
        return "scatter", f"{target}.{op} * {n}"

    def _sym_ops(self, v, t, d, n):
        """Sizes combined with torch's symbolic helpers, data-dependent sizes included."""
        r = self.rng
        other = r.choice([f"{v}[{v} > 0].shape[0]", f"{v}.nonzero().shape[0]", "x0.shape[0]", f"{n} + 1"])
        size = r.choice([f"torch.sym_min({n}, {other})", f"torch.sym_max({n}, {other})",
                         f"min({n}, {other})", f"{other} // 2 + {n} % 3"])
        return "sym_ops", r.choice([f"{v}.new_ones({size}) * torch.sym_float({other})",
                                    f"{v}.flatten()[:{size}] + ({other} > {n})",
                                    f"{v} * (torch.sym_float({size}) + 0.5)",
                                    f"torch.arange({size}, dtype={v}.dtype) * {v}.sum()"])

    def _random(self, v, t, d, n):
        r = self.rng
        return "random", r.choice([f"F.dropout({v}, 0.5, training=True)", f"{v}.clone().bernoulli_(0.5)",
                                   f"torch.rand_like({v}) + {v}", f"{v} + torch.randn({v}.shape)",
                                   f"F.dropout({v}, 0.3, training={n} > 2)", f"{v}.clone().random_(-5, 5)"])


    def _decided_cond(self, v, t, d, n):
        """A cond whose predicate the ranges settle (so the capture inlines one branch), with
        size nodes, data-dependent ones included, used inside the branch and after it."""
        r = self.rng
        m = r.choice([f"{v}[{v} > 0]", f"{v}.nonzero()", f"{v}.flatten()"])
        pred = r.choice([f"{n} >= 0", "m.shape[0] >= 0", f"{n} + m.shape[0] > -1", f"torch.sym_max({n}, 1) > 0",
                         f"{n} * 0.5 >= 0"])
        inner = r.choice(["a * m.shape[0]", "a + torch.sym_float(m.shape[0])", f"a * torch.sym_min({n}, m.shape[0])",
                          f"a + (m.shape[0] > {n})",
                          f"torch.cond(m.shape[0] > {n}, lambda b: b * m.shape[0], lambda b: b - 1, (a,))"])
        use = r.choice(["", " + m.shape[0]", f" * torch.sym_float(torch.sym_min(m.shape[0], {n}))",
                        f" + max(m.shape[0], {n})"])
        return "decided_cond", (f"(lambda m: torch.cond({pred}, lambda a: {inner}, lambda a: a - 1, ({v},)){use})({m})")

    def _cond_item(self, v, t, d, n):
        """A size from `.item()` checked with torch._check, then used in a cond's predicate,
        its operands' sizes and its branches."""
        r = self.rng
        k = r.choice([f"int(({v} > 0).sum().item())", f"int({v}.numel() - ({v} <= 0).sum().item())"])
        pred = r.choice([f"u > {r.randint(0, 3)}", f"u < {n}", f"u * 2 >= {n}", "u % 2 == 0"])
        return "cond_item", (f"(lambda u: (torch._check(u >= 0), torch._check(u <= {v}.numel()), "
                             f"torch.cond({pred}, lambda a: a * u + a.shape[0], lambda a: a - torch.sym_float(u), "
                             f"({v}.flatten()[:u],))[2].sum() + u)[-1])({k})")

    def _scatter_sizes(self, v, t, d, n):
        """scatter_ into an input or a fresh buffer, then size arithmetic and a cond over the
        written tensor's sizes."""
        r = self.rng
        target = r.choice(["x0", f"{v}.clone()"])
        tail = r.choice([f" * torch.sym_float({n})", f" + min({n}, x0.shape[0])", f" * ({n} // 2 + 1)",
                         f".sum() * torch.sym_max({n}, x0.shape[0])"])
        if target == "x0":
            return "scatter_sizes", ("torch.cond(x0.shape[0] > 2, lambda a: a * a.shape[0], lambda a: a + 1, "
                                     "(x0.scatter_(0, torch.zeros_like(x0, dtype=torch.long), 1.0),))"), None
        return "scatter_sizes", (f"torch.cond({n} > 2, lambda a: a * a.shape[{d}], lambda a: a + 1, "
                                 f"({target}.scatter_({d}, torch.zeros_like({v}, dtype=torch.long), 1.0),)){tail}")

    def _window_copy(self, v, t, d, n):
        """Copies between disjoint windows of one tensor, and draws into gapped windows."""
        r = self.rng
        c = f"{v}.clone()"
        return "window_copy", r.choice([
            f"(lambda c: (c.narrow({d}, 0, {n} // 2).copy_(c.narrow({d}, {n} // 2, {n} // 2)), c)[1])({c})",
            f"(lambda c: (c.narrow({d}, 0, {n} // 2).add_(c.narrow({d}, {n} - {n} // 2, {n} // 2)), c)[1])({c})",
            f"(lambda c: (c.movedim({d}, 0)[::2].bernoulli_(0.5), c)[1])({c})",
            f"{c}.random_(0, 10) + {v}", f"{c}.random_(3) * {v}"])


def namespace() -> dict:
    """What the programs' source may name."""
    import math

    import torch.nn.functional as F
    from functorch.experimental import control_flow
    from torch._higher_order_ops.scan import scan
    return {"torch": torch, "math": math, "F": F, "control_flow": control_flow, "scan": scan}


IMPORTS = ("import math\nimport torch.nn.functional as F\nfrom functorch.experimental import control_flow\n"
           "from torch._higher_order_ops.scan import scan\n")

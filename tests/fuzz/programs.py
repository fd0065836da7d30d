"""Random straight-line view / reshape / scatter / in-place programs, and a differential oracle.

A ``Program`` is a list of Python source lines over inputs ``x0`` (and maybe ``x1``), built by
generating random steps on concrete example tensors and keeping only the steps that run in
eager.  The same lines are compiled into a callable (``Program.fn()``) and printed as a
reproducer (``Program.source()``).  Each program carries a ``dynamic_shapes`` spec with 1-2
``gp.Dim``s.

``check_program`` exports it with graphport (static, then dynamic) and runs ``ep.module()``
on a sweep of sizes against eager.  Only the public ``graphport`` API is used.
"""
from __future__ import annotations

import contextlib
import io
import random
import re
import signal
import traceback
import warnings
from dataclasses import dataclass, field, replace

import torch

import graphport as gp

from . import size_steps

# ----------------------------------------------------------------------------------------------
# Programs
# ----------------------------------------------------------------------------------------------

DTYPES = {"float32": torch.float32, "complex64": torch.complex64}


@dataclass
class DynDim:
    name: str
    min: int
    max: int
    uses: list  # [(input_index, dim)], all of the same example size


@dataclass
class Program:
    shapes: list            # example shape per input
    dtypes: list            # dtype name per input
    steps: list             # [(kind, source line)]
    returns: list           # variable names returned
    dims: list = field(default_factory=list)  # [DynDim]
    seed: int = 0
    grammar: str = "views"  # "views" (_Gen) or "sizes" (size_steps.SizeSteps)

    # -- rendering --------------------------------------------------------------------------
    def arg_names(self):
        return [f"x{i}" for i in range(len(self.shapes))]

    def body(self):
        lines = [src for _, src in self.steps]
        lines.append("return (" + ", ".join(self.returns) + ("," if len(self.returns) == 1 else "") + ")")
        return lines

    def source(self) -> str:
        return "def f(" + ", ".join(self.arg_names()) + "):\n" + "".join(f"    {l}\n" for l in self.body())

    def fn(self):
        ns = size_steps.namespace() if self.grammar == "sizes" else {"torch": torch}
        exec(compile(self.source(), f"<fuzz-program-{self.seed}>", "exec"), ns)
        return ns["f"]

    def kinds(self):
        return [k for k, _ in self.steps]

    def dynamic_shapes(self):
        objs = {d.name: gp.Dim(d.name, min=d.min, max=d.max) for d in self.dims}
        spec = [None] * len(self.shapes)
        for d in self.dims:
            for i, k in d.uses:
                if spec[i] is None:
                    spec[i] = {}
                spec[i][k] = objs[d.name]
        return tuple(spec)

    def spec_source(self) -> str:
        defs = "".join(f"{d.name} = gp.Dim({d.name!r}, min={d.min}, max={d.max})\n" for d in self.dims)
        parts = []
        for i in range(len(self.shapes)):
            entries = [f"{k}: {d.name}" for d in self.dims for (j, k) in d.uses if j == i]
            parts.append("{" + ", ".join(entries) + "}" if entries else "None")
        return defs + "dynamic_shapes = (" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def shapes_for(self, sizes: dict | None):
        shapes = [list(s) for s in self.shapes]
        for d in self.dims:
            if sizes and d.name in sizes:
                for i, k in d.uses:
                    shapes[i][k] = sizes[d.name]
        return [tuple(s) for s in shapes]

    def make_inputs(self, sizes: dict | None = None, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=g, dtype=DTYPES[dt])
                for s, dt in zip(self.shapes_for(sizes), self.dtypes)]

    def reproducer(self, mode: str = "dynamic", sizes: dict | None = None) -> str:
        def mk(shapes):
            return "(" + "".join(f"torch.randn({tuple(sh)}, dtype=torch.{dt}), "
                                 for sh, dt in zip(shapes, self.dtypes)) + ")"
        spec = self.spec_source() if mode == "dynamic" else "dynamic_shapes = None"
        imports = size_steps.IMPORTS if self.grammar == "sizes" else ""
        out = (f"import torch, graphport as gp\n{imports}\n{self.source()}\n{spec}\n"
               f"ep = gp.export(f, {mk(self.shapes)}, dynamic_shapes=dynamic_shapes)\n")
        if sizes is not None or mode == "static":
            out += (f"xs = {mk(self.shapes_for(sizes))}\n"
                    "got = ep.module()(*[x.clone() for x in xs])\n"
                    "want = f(*[x.clone() for x in xs])   # compare outputs (and mutated inputs)\n")
        return out


# ----------------------------------------------------------------------------------------------
# Generator
# ----------------------------------------------------------------------------------------------

class _Gen:
    def __init__(self, rng: random.Random):
        self.rng = rng

    # size expressions: concrete ints, or symbolic in terms of `v.shape[d]`
    def size_expr(self, v, t, d, kind):
        """An int expression for dim `d` of `t` (named `v`): returns (source, value)."""
        n = t.shape[d]
        r = self.rng
        opts = []
        if kind == "start":
            opts = [("0", 0), ("1", 1), ("-1", -1), ("-2", -2), (str(r.randint(0, max(n, 0))), None),
                    (f"{v}.shape[{d}] // 2", n // 2), (f"{v}.shape[{d}] - 1", n - 1)]
        elif kind == "stop":
            opts = [(f"{v}.shape[{d}]", n), (f"{v}.shape[{d}] - 1", n - 1), ("-1", -1), ("-2", -2),
                    (str(r.randint(0, n + 1)), None), (f"{v}.shape[{d}] // 2", n // 2), ("100", 100),
                    (f"{v}.shape[{d}] + 1", n + 1)]
        elif kind == "index":
            opts = [("0", 0), ("1", 1), ("-1", -1), (f"{v}.shape[{d}] - 1", n - 1), (f"{v}.shape[{d}] // 2", n // 2),
                    (str(r.randint(0, max(n - 1, 0))), None)]
        elif kind == "count":   # a positive length
            opts = [("1", 1), ("2", 2), ("3", 3), (f"{v}.shape[{d}]", n), (f"{v}.shape[{d}] - 1", n - 1),
                    (f"{v}.shape[{d}] // 2", n // 2), (str(r.randint(1, max(n, 1))), None)]
        return r.choice(opts)[0]

    def dim(self, t, allow_neg=True):
        if t.dim() == 0:
            return None
        d = self.rng.randrange(t.dim())
        if allow_neg and self.rng.random() < 0.25:
            d -= t.dim()
        return d

    def index_tensor(self, v, t, d, unique=False):
        r = self.rng
        n = t.shape[d]
        opts = [f"torch.arange({v}.shape[{d}] - 1, -1, -1)", f"torch.arange(0, {v}.shape[{d}], 2)",
                "torch.tensor([0])", f"torch.arange({v}.shape[{d}] // 2)"]
        if n >= 2:
            opts.append("torch.tensor([1, 0])")
        if not unique:
            opts += [f"torch.arange(3) % {v}.shape[{d}]", "torch.tensor([0, 0, 1])",
                     f"torch.tensor([{v}.shape[{d}] - 1])"]
        return r.choice(opts)

    # -- steps: each returns (kind, expression) for a new variable, or (kind, statement, None)
    def step(self, v, t, env):
        r = self.rng
        nd = t.dim()
        choices = ["view", "reshape", "flatten", "unflatten", "transpose", "slice", "select",
                   "narrow", "split", "chunk", "unbind", "expand", "unsqueeze", "squeeze", "diagonal",
                   "unfold", "as_strided", "dtype_view", "movedim", "contiguous", "clone", "gather",
                   "take_along_dim", "index_select", "index", "arith",
                   # in-place
                   "add_", "mul_", "zero_", "fill_", "copy_", "masked_fill_", "slice_assign",
                   "index_put_", "index_copy_", "index_fill_", "setitem_int"]
        if nd >= 3:
            choices += ["permute", "permute"]
        if nd <= 2:
            choices.append("t")
        if t.is_complex():
            choices += ["real", "imag", "view_as_real", "view_as_real"]
        if t.dtype == torch.float32 and nd >= 1 and t.shape[-1] == 2:
            choices += ["view_as_complex"]
        kind = r.choice(choices)
        d = self.dim(t)
        D = (lambda k: self.size_expr(v, t, d, k)) if d is not None else None

        if kind in ("view", "reshape"):
            shape = [f"{v}.shape[{i}]" if r.random() < 0.6 else str(t.shape[i]) for i in range(nd)]
            mode = r.choice(["merge", "split", "flat", "neg"])
            if mode == "merge" and nd >= 2:
                i = r.randrange(nd - 1)
                shape[i:i + 2] = [f"{shape[i]} * {shape[i + 1]}"]
            elif mode == "split" and nd >= 1:
                i = r.randrange(nd)
                f = r.choice([1, 2, 3])
                shape[i:i + 1] = r.choice([[str(f), "-1"], ["-1", str(f)]])
            elif mode == "flat":
                shape = ["-1"]
            elif nd >= 1:
                shape[r.randrange(nd)] = "-1"
            return kind, f"{v}.{kind}(" + ", ".join(shape) + ("," if len(shape) == 1 else "") + ")"
        if kind == "flatten":
            if nd == 0:
                return kind, f"{v}.flatten()"
            a = r.randrange(nd)
            b = r.randrange(a, nd)
            return kind, f"{v}.flatten({a}, {b})"
        if kind == "unflatten" and d is not None:
            sizes = r.choice([["2", "-1"], ["-1", "2"], ["1", "-1"], ["-1", "1"], [f"{v}.shape[{d}]", "1"]])
            return kind, f"{v}.unflatten({d}, ({', '.join(sizes)}))"
        if kind == "permute":
            p = list(range(nd))
            r.shuffle(p)
            return kind, f"{v}.permute({', '.join(map(str, p))})"
        if kind == "transpose" and d is not None:
            return kind, f"{v}.transpose({d}, {self.dim(t)})"
        if kind == "t":
            return kind, f"{v}.t()"
        if kind == "movedim" and d is not None:
            return kind, f"{v}.movedim({d}, {self.dim(t)})"
        if kind == "slice" and d is not None:
            a, b = D("start"), D("stop")
            parts = r.choice([f"{a}:{b}", f"{a}:", f":{b}", f"{a}:{b}:{r.choice([2, 3])}",
                              f"::{r.choice([2, 3])}"])
            dd = d % nd
            if r.random() < 0.5 or dd == 0:
                idx = ":, " * dd + parts
            else:
                idx = "..., " + parts + ", :" * (nd - 1 - dd)
            return kind, f"{v}[{idx}]"
        if kind == "select" and d is not None:
            i = D("index")
            if r.random() < 0.5 and d % nd == 0:
                return kind, f"{v}[{i}]"
            return kind, f"{v}.select({d}, {i})"
        if kind == "narrow" and d is not None:
            s = r.choice(["0", "1", f"{v}.shape[{d}] // 2"])
            ln = r.choice(["1", f"{v}.shape[{d}] - {s}", f"{v}.shape[{d}] // 2", "2"])
            return kind, f"{v}.narrow({d}, {s}, {ln})"
        if kind == "split" and d is not None:
            if r.random() < 0.5:
                return kind, f"{v}.split({D('count')}, {d})[{r.choice([0, 1, -1])}]"
            return kind, f"{v}.split([1, {v}.shape[{d}] - 1], {d})[{r.choice([0, 1])}]"
        if kind == "chunk" and d is not None:
            m = r.choice(["chunk", "tensor_split"])
            return kind, f"{v}.{m}({r.choice([1, 2, 3])}, {d})[{r.choice([0, 1, -1])}]"
        if kind == "unbind" and d is not None:
            return kind, f"{v}.unbind({d})[{r.choice([0, 1, -1])}]"
        if kind == "expand":
            ones = [i for i in range(nd) if t.shape[i] == 1]
            if ones and r.random() < 0.6:
                sz = ["-1"] * nd
                sz[r.choice(ones)] = str(r.choice([2, 3]))
                return kind, f"{v}.expand({', '.join(sz)})"
            return kind, f"{v}.unsqueeze(0).expand({r.choice([1, 2, 3])}, *{v}.shape)"
        if kind == "unsqueeze":
            return kind, f"{v}.unsqueeze({r.randint(-nd - 1, nd)})"
        if kind == "squeeze":
            if d is None or r.random() < 0.2:
                return kind, f"{v}.squeeze()"
            ones = [i for i in range(nd) if t.shape[i] == 1]
            if ones and r.random() < 0.5:
                d = r.choice(ones)
            return kind, f"{v}.squeeze({d})"
        if kind == "diagonal" and nd >= 2:
            a = r.randrange(nd)
            b = r.choice([i for i in range(nd) if i != a])
            return kind, f"{v}.diagonal({r.choice([0, 0, 1, -1])}, {a}, {b})"
        if kind == "unfold" and d is not None:
            return kind, f"{v}.unfold({d}, {r.choice(['1', '2', '3', f'{v}.shape[{d}]'])}, {r.choice([1, 2])})"
        if kind == "as_strided" and nd >= 1:
            if nd == 1 and r.random() < 0.5 and t.is_contiguous():
                # overlapping sliding window of width 2 over a contiguous 1-D tensor
                return kind, f"{v}.as_strided(({v}.shape[0] - 1, 2), (1, 1), {v}.storage_offset())"
            dd = r.randrange(nd)
            sz = [f"{v}.shape[{i}]" for i in range(nd)]
            sz[dd] = r.choice(["1", f"{v}.shape[{dd}] - 1", f"{v}.shape[{dd}] // 2"])
            off = r.choice([f"{v}.storage_offset()", f"{v}.storage_offset() + {v}.stride({dd})"])
            if "+" in off:
                sz[dd] = f"{v}.shape[{dd}] - 1"
            return kind, f"{v}.as_strided(({', '.join(sz)},), {v}.stride(), {off})"
        if kind == "dtype_view":
            if t.dtype == torch.float32:
                return kind, f"{v}.view({r.choice(['torch.int32', 'torch.int16', 'torch.int32'])})"
            if t.dtype == torch.int32:
                return kind, f"{v}.view({r.choice(['torch.float32', 'torch.int16'])})"
            if t.dtype == torch.int16:
                return kind, f"{v}.view({r.choice(['torch.int32', 'torch.float32'])})"
            if t.dtype == torch.complex64:
                return kind, f"{v}.view(torch.float32)"
            return None
        if kind in ("real", "imag"):
            return kind, f"{v}.{kind}"
        if kind == "view_as_real":
            return kind, f"torch.view_as_real({v})"
        if kind == "view_as_complex":
            return kind, f"torch.view_as_complex({v})"
        if kind in ("contiguous", "clone"):
            return kind, f"{v}.{kind}()"
        if kind == "gather" and d is not None:
            idx = r.choice([f"{v}.argsort(dim={d})", f"torch.zeros_like({v}, dtype=torch.long)",
                            f"{v}.argsort(dim={d}).narrow({d}, 0, 1)"])
            return kind, f"{v}.gather({d}, {idx})"
        if kind == "take_along_dim" and d is not None:
            return kind, f"torch.take_along_dim({v}, {v}.argmax(dim={d}, keepdim=True), dim={d})"
        if kind == "index_select" and d is not None:
            return kind, f"{v}.index_select({d}, {self.index_tensor(v, t, d)})"
        if kind == "index" and d is not None:
            dd = d % nd
            return kind, f"{v}[{':, ' * dd}{self.index_tensor(v, t, dd)}]"
        if kind == "arith":
            others = [n for n, o in env.items() if n != v and o.dtype == t.dtype]
            if others and r.random() < 0.5:
                return kind, f"{v} + {r.choice(others)}"
            return kind, f"{v} * 2"

        # ---- in-place writes (statements) ---------------------------------------------------
        int_like = not (t.is_floating_point() or t.is_complex())
        sc = "3" if int_like else "1.5"
        if kind == "add_":
            return kind, f"{v}.add_({sc})", None
        if kind == "mul_":
            return kind, f"{v}.mul_({'2' if int_like else '-2.0'})", None
        if kind == "zero_":
            return kind, f"{v}.zero_()", None
        if kind == "fill_":
            return kind, f"{v}.fill_({'7' if int_like else '7.0'})", None
        if kind == "copy_":
            others = [n for n in env if n != v]
            src = r.choice([f"torch.full_like({v}, 5)", f"{v}.flip(0)"] +
                           [f"{o}.clone()" for o in others])
            return kind, f"{v}.copy_({src})", None
        if kind == "masked_fill_":
            m = r.choice([f"{v} > 0", f"{v} != 0"]) if not t.is_complex() else f"{v} != 0"
            return kind, f"{v}.masked_fill_({m}, {sc})", None
        if kind == "slice_assign" and d is not None:
            dd = d % nd
            sl = r.choice([f":{D('stop')}", f"{D('start')}:", f"::2"])
            target = f"{v}[..., {sl}" + ", :" * (nd - 1 - dd) + "]" if r.random() < 0.5 else f"{v}[{':, ' * dd}{sl}]"
            val = r.choice([sc, f"{target}.clone() * 2", f"{target}.flip({dd})"])
            return kind, f"{target} = {val}", None
        if kind == "setitem_int" and d is not None:
            return kind, f"{v}[{':, ' * (d % nd)}{D('index')}] = {sc}", None
        if kind == "index_put_" and d is not None:
            idx = self.index_tensor(v, t, 0, unique=True)
            if r.random() < 0.5:
                return kind, f"{v}[{idx}] = {sc}", None
            acc = r.choice(["False", "True"])
            return kind, f"{v}.index_put_(({idx},), torch.tensor({sc}, dtype={v}.dtype), accumulate={acc})", None
        if kind == "index_copy_" and d is not None:
            idx = self.index_tensor(v, t, d, unique=True)
            return kind, f"{v}.index_copy_({d}, {idx}, {v}.index_select({d}, {idx}) * 2)", None
        if kind == "index_fill_" and d is not None:
            return kind, f"{v}.index_fill_({d}, {self.index_tensor(v, t, d)}, {sc})", None
        return None


def _run_lines(shapes, dtypes, steps, seed=0, grammar="views"):
    p = Program(shapes, dtypes, list(steps), ["x0"], grammar=grammar)
    env = size_steps.namespace() if grammar == "sizes" else {"torch": torch}
    for i, x in enumerate(p.make_inputs(seed=seed)):
        env[f"x{i}"] = x
    with torch.random.fork_rng():
        torch.manual_seed(seed)   # random operators: the same values on every run
        for _, src in steps:
            exec(src, env)
    return env


def _eager_ok(prog: Program, seed=0, sizes=None):
    """Run eagerly; returns (outputs, inputs-after) or raises."""
    xs = prog.make_inputs(sizes, seed=seed)
    out = prog.fn()(*xs)
    return out, xs


def generate(seed: int, max_steps: int = 8, grammar: str = "views") -> Program:
    rng = random.Random(seed)
    g = _Gen(rng) if grammar == "views" else size_steps.SizeSteps(rng)
    n_in = rng.choice([1, 1, 2])
    shapes, dtypes = [], []
    for i in range(n_in):
        if i == 1 and rng.random() < 0.5:
            shapes.append(list(shapes[0]))
        else:
            rank = rng.randint(1, 4)
            shapes.append([rng.choice([1, 2, 2, 3, 4, 5, 6]) for _ in range(rank)])
        dtypes.append("complex64" if rng.random() < 0.1 else "float32")
    # dynamic dims: 1-2 dims, example sizes >= 2
    cands = [(i, k) for i in range(n_in) for k in range(len(shapes[i]))]
    rng.shuffle(cands)
    dims, used = [], set()
    want = rng.choice([1, 1, 2])
    for (i, k) in cands:
        if len(dims) >= want or (i, k) in used:
            continue
        if shapes[i][k] < 2:
            shapes[i][k] = rng.randint(2, 5)
        n = shapes[i][k]
        uses = [(i, k)]
        # share the Dim with the same position in an identically-shaped other input
        for j in range(n_in):
            if j != i and len(shapes[j]) == len(shapes[i]) and shapes[j] == shapes[i] and rng.random() < 0.8:
                uses.append((j, k))
        for u in uses:
            used.add(u)
        lo = rng.choice([0, 1, 2, 2, n])
        lo = min(lo, n)
        hi = rng.choice([n, n + 3, 2 * n, 16, 64])
        if hi == lo:
            hi = n + 3
        dims.append(DynDim(f"d{len(dims)}", lo, hi, uses))
    # shared dims may have been resized above: re-sync the shared positions
    for d in dims:
        n = shapes[d.uses[0][0]][d.uses[0][1]]
        for (i, k) in d.uses:
            shapes[i][k] = n
    shapes = [tuple(s) for s in shapes]

    steps = []
    env = _run_lines(shapes, dtypes, steps, grammar=grammar)
    names = [f"x{i}" for i in range(n_in)]
    n_steps = rng.randint(2, max_steps)
    attempts = 0
    while len(steps) < n_steps and attempts < 60:
        attempts += 1
        v = names[-1] if rng.random() < 0.6 else rng.choice(names)
        t = env[v]
        tensors = {n: env[n] for n in names}
        res = g.step(v, t, tensors)
        if res is None:
            continue
        if len(res) == 3:
            kind, src = res[0], res[1]
            new = None
        else:
            kind, expr = res
            new = f"v{len(names)}"
            src = f"{new} = {expr}"
        trial = steps + [(kind, src)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                env2 = _run_lines(shapes, dtypes, trial, grammar=grammar)
                env3 = _run_lines(shapes, dtypes, trial, grammar=grammar)
            if new is not None and not isinstance(env2[new], torch.Tensor):
                continue
            # determinism: two eager runs must agree
            for n in names + ([new] if new else []):
                torch.testing.assert_close(env2[n], env3[n], equal_nan=True, rtol=0, atol=0)
        except Exception:
            continue
        steps = trial
        env = env2
        if new is not None:
            names.append(new)
    # returns: the last value, plus some views written through, plus maybe the bases
    rets = [names[-1]]
    for n in names:
        if n not in rets and rng.random() < 0.3:
            rets.append(n)
    if rng.random() < 0.3 and "x0" not in rets:
        rets.append("x0")
    return Program(shapes, dtypes, steps, rets, dims, seed, grammar)


# ----------------------------------------------------------------------------------------------
# Oracle
# ----------------------------------------------------------------------------------------------

OK_OUTCOMES = {"ok", "refused", "refused-at-call", "both-raise"}
BUG_OUTCOMES = {"crash", "hang", "crash-at-call", "hang-at-call", "answers-where-eager-raises", "wrong",
                "false-claim", "false-claim-at-call"}
# What a refusal says when it claims eager fails too: at export (the example, which eager ran
# when the program was generated), or at call for the sizes it names.
_EAGER_FAILS_CLAIMS = ("fails the same way in eager", "the program fails there")


def _claims_eager_fails(error: BaseException, sizes: dict | None = None) -> bool:
    """Whether `error` says eager fails at the example (sizes None) or at `sizes`."""
    text = str(error)
    if not any(claim in text for claim in _EAGER_FAILS_CLAIMS):
        return False
    if sizes is None:
        return True
    named = re.findall(r"\bat ((?:\w+ = -?\d+(?:, )?)+), the program fails there", text)
    return any(all(sizes.get(k) == int(v) for k, v in re.findall(r"(\w+) = (-?\d+)", claim)) for claim in named)


class _Timeout(BaseException):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    def handler(signum, frame):
        raise _Timeout()
    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _first_line(e: BaseException) -> str:
    s = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
    if not s:
        return ""
    if s[0].endswith(":") and len(s) > 1:   # "... (1 violation):" -> keep the first violation
        return (s[0] + " " + s[1])[:240]
    return s[0][:240]


def _where(e: BaseException) -> str:
    """The innermost graphport frame of a traceback, and the innermost frame overall."""
    tb = traceback.extract_tb(e.__traceback__)
    gpf = [fr for fr in tb if "/graphport/" in fr.filename]
    parts = []
    if gpf:
        fr = gpf[-1]
        parts.append(f"graphport frame: {fr.filename.split('/src/')[-1]}:{fr.lineno} in {fr.name}")
    if tb:
        fr = tb[-1]
        parts.append(f"raised at: {fr.filename.split('/site-packages/')[-1].split('/src/')[-1]}:{fr.lineno} in {fr.name}")
    return "; ".join(parts)


def _norm(msg: str) -> str:
    """Message with numbers, symbol names and quoted bits blanked, for grouping bugs."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", msg)
    msg = re.sub(r"\b[a-z]?\d+\b", "N", msg)
    msg = re.sub(r"\[[^\]]*\]", "[_]", msg)
    return msg[:120]


@dataclass
class Finding:
    mode: str          # "static" | "dynamic"
    outcome: str
    sizes: dict | None = None
    exc_type: str = ""
    message: str = ""
    detail: str = ""

    @property
    def is_bug(self):
        return self.outcome in BUG_OUTCOMES

    def signature(self):
        if self.outcome == "wrong":
            where = "mutated input" if self.detail.startswith("mutated") else "output"
            what = "shape" if "'shape'" in self.detail else "dtype" if "'dtype'" in self.detail else "values"
            return (self.outcome, self.mode, where, what)
        return (self.outcome, self.exc_type, _norm(self.message)[:60])


def _compare(got, want):
    gl = torch.utils._pytree.tree_leaves(got)
    wl = torch.utils._pytree.tree_leaves(want)
    if len(gl) != len(wl):
        return f"structure: {len(gl)} leaves vs eager {len(wl)}"
    for i, (a, b) in enumerate(zip(gl, wl)):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"output[{i}]: got {type(a).__name__}, eager tensor"
            try:
                torch.testing.assert_close(a, b, equal_nan=True)
            except AssertionError as e:
                return f"output[{i}]: " + " ".join(str(e).split())[:300]
        elif a != b:
            return f"output[{i}]: {a!r} vs eager {b!r}"
    return None


def _quiet():
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def size_sweep(prog: Program, rng: random.Random, max_points: int = 14):
    """Dicts name->size: per Dim across its range (0, 1, bounds, example, interior), others at example."""
    ex = {d.name: prog.shapes[d.uses[0][0]][d.uses[0][1]] for d in prog.dims}
    pts = [dict(ex)]
    for d in prog.dims:
        vals = {d.min, d.max, ex[d.name], d.min + 1, ex[d.name] + 1, ex[d.name] - 1,
                rng.randint(d.min, d.max), rng.randint(d.min, d.max)}
        vals |= {v for v in (0, 1, 2) if d.min <= v <= d.max}
        for v in sorted(x for x in vals if d.min <= x <= d.max):
            if v != ex[d.name]:
                s = dict(ex)
                s[d.name] = v
                pts.append(s)
    if len(prog.dims) > 1:
        for _ in range(2):
            pts.append({d.name: rng.randint(d.min, d.max) for d in prog.dims})
    return pts[:max_points * max(1, len(prog.dims))]


def _is_refusal(error: BaseException, exporter: str) -> bool:
    """An error of the exporter's own, saying no (a refused input, an unsupported program)."""
    if exporter == "graphport":   # an InternalError is graphport's bug, not a refusal
        return isinstance(error, gp.GraphportError) and not isinstance(error, gp.InternalError)
    text = str(error)   # torch.export: its input guards, its user errors
    return (type(error).__module__.startswith("torch._dynamo") or "Expected input" in text or "Guard failed" in text
            or "Constraints violated" in text or type(error).__name__ in ("UserError", "Unsupported"))


def _run_at(prog: Program, f, ep, sizes, mode, call_timeout=10, exporter="graphport"):
    """Compare the exported program and eager at one size point; returns a Finding."""
    seed = 1 + sum((i + 1) * v for i, v in enumerate((sizes or {}).values()))
    eager_exc = None
    try:
        xs_e = prog.make_inputs(sizes, seed=seed)
        with torch.random.fork_rng():
            torch.manual_seed(seed)   # random operators draw the same values in both runs
            want = f(*xs_e)
    except Exception as e:  # noqa: BLE001
        eager_exc = e
    xs_g = prog.make_inputs(sizes, seed=seed)
    try:
        with time_limit(call_timeout), torch.random.fork_rng():
            torch.manual_seed(seed)
            got = ep.module()(*xs_g)
    except _Timeout:
        return Finding(mode, "hang-at-call", sizes)
    except Exception as e:  # noqa: BLE001
        et = type(e).__name__
        if eager_exc is not None:
            return Finding(mode, "both-raise", sizes, et, _first_line(e))
        if _is_refusal(e, exporter):
            if exporter == "graphport" and _claims_eager_fails(e, sizes or {}):
                return Finding(mode, "false-claim-at-call", sizes, et, _first_line(e), str(e)[:400])
            return Finding(mode, "refused-at-call", sizes, et, _first_line(e))
        return Finding(mode, "crash-at-call", sizes, et, _first_line(e), _where(e))
    if eager_exc is not None:
        return Finding(mode, "answers-where-eager-raises", sizes, type(eager_exc).__name__,
                       _first_line(eager_exc))
    diff = _compare(got, want)
    if diff is None:
        for i, (a, b) in enumerate(zip(xs_g, xs_e)):
            try:
                torch.testing.assert_close(a, b, equal_nan=True)
            except AssertionError as e:
                diff = f"mutated input x{i}: " + " ".join(str(e).split())[:300]
                break
    if diff is not None:
        return Finding(mode, "wrong", sizes, detail=diff)
    return Finding(mode, "ok", sizes)


class _AsModule(torch.nn.Module):
    """torch.export takes modules only."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _export(prog: Program, f, args, mode, exporter):
    if exporter == "graphport":
        return gp.export(f, args, dynamic_shapes=prog.dynamic_shapes() if mode == "dynamic" else None)
    spec = None
    if mode == "dynamic":
        dims = {d.name: torch.export.Dim(d.name, min=d.min, max=d.max) for d in prog.dims}
        spec = [None] * len(prog.shapes)
        for d in prog.dims:
            for i, k in d.uses:
                spec[i] = {**(spec[i] or {}), k: dims[d.name]}
        spec = (tuple(spec),)   # forward(*args): one entry, the spec of the args tuple
    return torch.export.export(_AsModule(f), args, dynamic_shapes=spec)


def check_program(prog: Program, modes=("static", "dynamic"), export_timeout=20, sweep_seed=0,
                  only_sizes=None, exporter="graphport"):
    """All findings for a program: one export finding per mode, then one per swept size.
    `exporter`: "graphport", or "torch" (torch.export, for figures side by side)."""
    findings = []
    f = prog.fn()
    rng = random.Random(sweep_seed)
    for mode in modes:
        args = tuple(prog.make_inputs(seed=0))
        with _quiet():
            try:
                with time_limit(export_timeout), torch.random.fork_rng():
                    ep = _export(prog, f, args, mode, exporter)
            except _Timeout:
                findings.append(Finding(mode, "hang"))
                continue
            except Exception as e:  # noqa: BLE001
                et = type(e).__name__
                if _is_refusal(e, exporter) and exporter == "graphport" and _claims_eager_fails(e):
                    findings.append(Finding(mode, "false-claim", None, et, _first_line(e), str(e)[:400]))
                elif _is_refusal(e, exporter):
                    findings.append(Finding(mode, "refused", None, et, _first_line(e)))
                else:
                    findings.append(Finding(mode, "crash", None, et, _first_line(e), _where(e)))
                continue
            findings.append(Finding(mode, "exported"))
            pts = [None] if mode == "static" else (only_sizes or size_sweep(prog, rng))
            for sizes in pts:
                findings.append(_run_at(prog, f, ep, sizes, mode, exporter=exporter))
    return findings


def bugs_of(findings):
    return [x for x in findings if x.is_bug]


# ----------------------------------------------------------------------------------------------
# Minimizer
# ----------------------------------------------------------------------------------------------

def _eager_valid(prog: Program) -> bool:
    try:
        with _quiet():
            _eager_ok(prog)
        return True
    except Exception:  # noqa: BLE001
        return False


def _defined(steps):
    out = set()
    for _, src in steps:
        m = re.match(r"(v\d+) = ", src)
        if m:
            out.add(m.group(1))
    return out


def minimize(prog: Program, finding: Finding, budget: int = 150) -> tuple[Program, Finding]:
    """Drop steps / returns / dims while a bug with the same signature still reproduces."""
    sig = finding.signature()
    mode = finding.mode
    tries = [0]

    def reproduces(p):
        if tries[0] >= budget:
            return None
        if not p.returns or not _eager_valid(p):
            return None
        tries[0] += 1
        for fd in bugs_of(check_program(p, modes=(mode,))):
            if fd.signature() == sig:
                return fd
        return None

    cur, cur_f = prog, finding
    changed = True
    while changed and tries[0] < budget:
        changed = False
        # drop a step (and returns of variables no longer defined)
        for i in reversed(range(len(cur.steps))):
            steps = cur.steps[:i] + cur.steps[i + 1:]
            defined = _defined(steps) | {f"x{j}" for j in range(len(cur.shapes))}
            rets = [r for r in cur.returns if r in defined] or [sorted(defined, key=lambda s: (s[0] != "v", len(s), s))[-1]]
            cand = replace(cur, steps=steps, returns=rets)
            fd = reproduces(cand)
            if fd is not None:
                cur, cur_f, changed = cand, fd, True
                break
        if changed:
            continue
        # bypass a step: `vK = vJ.op(...)` removed, later uses of vK read vJ
        for i in reversed(range(len(cur.steps))):
            m = re.match(r"(v\d+) = (?:torch\.\w+\()?(v\d+|x\d+)\b", cur.steps[i][1])
            if not m:
                continue
            new_v, old_v = m.groups()
            sub = lambda t: re.sub(rf"\b{new_v}\b", old_v, t)  # noqa: E731
            steps = cur.steps[:i] + [(k, sub(src)) for k, src in cur.steps[i + 1:]]
            rets = list(dict.fromkeys(sub(r) for r in cur.returns))
            cand = replace(cur, steps=steps, returns=rets)
            fd = reproduces(cand)
            if fd is not None:
                cur, cur_f, changed = cand, fd, True
                break
        if changed:
            continue
        for i in range(len(cur.returns)):
            if len(cur.returns) > 1:
                cand = replace(cur, returns=cur.returns[:i] + cur.returns[i + 1:])
                fd = reproduces(cand)
                if fd is not None:
                    cur, cur_f, changed = cand, fd, True
                    break
        if changed:
            continue
        # drop the last input when the program no longer reads it
        n_in = len(cur.shapes)
        if n_in > 1 and not re.search(rf"\bx{n_in - 1}\b", "\n".join(cur.body())):
            dims = [replace(d, uses=[u for u in d.uses if u[0] != n_in - 1]) for d in cur.dims]
            cand = replace(cur, shapes=cur.shapes[:-1], dtypes=cur.dtypes[:-1], dims=[d for d in dims if d.uses])
            if mode == "static" or cand.dims:
                fd = reproduces(cand)
                if fd is not None:
                    cur, cur_f, changed = cand, fd, True
                    continue
        if mode == "dynamic" and len(cur.dims) > 1:
            for i in range(len(cur.dims)):
                cand = replace(cur, dims=cur.dims[:i] + cur.dims[i + 1:])
                fd = reproduces(cand)
                if fd is not None:
                    cur, cur_f, changed = cand, fd, True
                    break
    return cur, cur_f


def describe(prog: Program, fd: Finding) -> str:
    head = f"[{fd.mode}] {fd.outcome}"
    if fd.sizes:
        head += f" at sizes {fd.sizes} (shapes {prog.shapes_for(fd.sizes)})"
    if fd.exc_type:
        head += f": {fd.exc_type}: {fd.message}"
    if fd.detail:
        head += f"\n  {fd.detail}"
    return head + "\n" + prog.reproducer(fd.mode, fd.sizes)

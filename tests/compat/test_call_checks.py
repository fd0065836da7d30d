"""The generated input checks of `ep.module()` (graphport/call_checks.py) against the
general ones in runtime.py: for every kind of spec, on calls that pass and calls that
fail, the generated checks accept only calls the general checks accept, answer the same
leaves, and a refused call raises the general checks' message."""
from __future__ import annotations

import pytest
import torch

import graphport as gp


def general(module, args, kwargs):
    """The general checks' verdict: the leaves, or the error (type and message)."""
    try:
        leaves = module._leaves(args, kwargs)[0]
        module._check_values(leaves)
    except Exception as e:   # noqa: BLE001 - the verdict is compared, whatever it is
        return None, (type(e), _words(e))
    return leaves, None


def _words(error: Exception) -> tuple:
    """What an error says, without the caller's line (each call site has its own)."""
    return getattr(error, "what", str(error)), getattr(error, "fix", None)


def agree(module, calls, *, generated: bool = True):
    """Every call: the generated checks agree with the general ones, and calling the module
    raises exactly the general checks' error. Returns how many calls each accepted."""
    if generated:
        assert module._fast_check is not None, "the program's checks should be generated"
    accepted = {"generated": 0, "general": 0}
    for args, kwargs in calls:
        expected, error = general(module, args, kwargs)
        fast = module._fast_check(args, kwargs) if module._fast_check is not None else None
        if fast is not None:
            assert error is None, f"generated checks accepted a call the general ones refuse: {error}"
            assert len(fast) == len(expected) and all(a is b for a, b in zip(fast, expected))
            accepted["generated"] += 1
        if error is None:
            accepted["general"] += 1
            module(*args, **kwargs)
        else:
            with pytest.raises(error[0]) as raised:
                module(*args, **kwargs)
            assert _words(raised.value) == error[1]
    return accepted


class Pair(torch.nn.Module):
    def forward(self, x, *, mask):
        return x.sum(1, keepdim=True) * mask


def test_dynamic_ranges_static_dims_dtypes_and_keywords():
    x, mask = torch.randn(8, 16), torch.ones(8, 4)
    b = gp.Dim("b", min=2, max=64)
    m = gp.export(Pair(), (x,), {"mask": mask}, dynamic_shapes={"x": {0: b}, "mask": {0: b}}).module()
    calls = [((torch.randn(n, 16),), {"mask": torch.ones(n, 4)}) for n in (2, 3, 64)]
    calls += [
        ((torch.randn(1, 16),), {"mask": torch.ones(1, 4)}),        # below the range
        ((torch.randn(65, 16),), {"mask": torch.ones(65, 4)}),      # above it
        ((torch.randn(8, 15),), {"mask": mask}),                    # a static dim
        ((torch.randn(8, 16),), {"mask": torch.ones(9, 4)}),        # b twice, two values
        ((torch.randn(8, 16, 1),), {"mask": mask}),                 # rank
        ((x.double(),), {"mask": mask}),                            # dtype
        ((x,), {}), ((x, mask), {}), ((x,), {"mask": mask, "other": mask}),   # structure
        ((x,), {"mask": [mask]}), (([x],), {"mask": mask}), ((3.0,), {"mask": mask}),
        ((torch.nn.Parameter(x),), {"mask": mask}),
    ]
    accepted = agree(m, calls)
    assert accepted == {"generated": 4, "general": 4}


class Derived(torch.nn.Module):
    def forward(self, x, y, z):
        return x[:, 1:] + y[:, ::2], z[: x.shape[0] // 2]


def test_derived_dims_and_relations():
    d = gp.Dim("d", min=2, max=32)
    x, y, z = torch.randn(3, 7), torch.randn(3, 12), torch.randn(5)
    spec = {"x": {1: d + 1}, "y": {1: 2 * d}, "z": None}
    m = gp.export(Derived(), (x, y, z), dynamic_shapes=spec).module()
    calls = [((torch.randn(3, n + 1), torch.randn(3, 2 * n), z), {}) for n in (2, 5, 32)]
    calls += [((torch.randn(3, 4), torch.randn(3, 7), z), {}),      # 7 is not 2 * d
              ((torch.randn(3, 4), torch.randn(3, 8), z), {}),      # d = 3 from x, 4 from y
              ((torch.randn(3, 34), torch.randn(3, 66), z), {})]    # beyond the range
    accepted = agree(m, calls)
    assert accepted == {"generated": 3, "general": 3}


class Scaled(torch.nn.Module):
    def forward(self, x, scale: float, flag: bool, name: str):
        return x * scale if flag and name == "a" else x


def test_scalar_inputs_are_specialized():
    x = torch.randn(4)
    m = gp.export(Scaled(), (x, 2.0, True, "a")).module()
    calls = [((x, 2.0, True, "a"), {}), ((x, 3.0, True, "a"), {}), ((x, 2, True, "a"), {}),
             ((x, 2.0, 1, "a"), {}), ((x, 2.0, True, "b"), {}), ((x, float("nan"), True, "a"), {})]
    assert agree(m, calls) == {"generated": 1, "general": 1}


class Tree(torch.nn.Module):
    def forward(self, d, pair, none):
        return d["a"] * 2 - d["b"], pair[0] + pair[1][0]


def test_pytree_structures():
    d = {"a": torch.randn(3), "b": torch.randn(3)}
    pair = (torch.randn(3), [torch.randn(3)])
    m = gp.export(Tree(), (d, pair, None)).module()
    calls = [((d, pair, None), {}),
             (({"b": d["b"], "a": d["a"]}, pair, None), {}),    # a dict's key order is part of it
             (({"a": d["a"]}, pair, None), {}), ((d, list(pair), None), {}), ((d, (pair[0], pair[1][0]), None), {}),
             ((d, pair, 0), {}), ((d, pair), {})]
    assert agree(m, calls) == {"generated": 1, "general": 1}


class Two(torch.nn.Module):
    def forward(self, a, *, y, z):
        return a * y - z


def test_keywords_in_another_order_are_accepted():
    a, y, z = torch.randn(3), torch.randn(3), torch.randn(3)
    m = gp.export(Two(), (a,), {"y": y, "z": z}).module()
    calls = [((a,), {"z": z, "y": y}), ((a,), {"y": y, "z": z}), ((a,), {"y": y, "w": z})]
    assert agree(m, calls) == {"generated": 2, "general": 2}
    torch.testing.assert_close(m(a, z=z, y=y), a * y - z)


class Same(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def test_a_tensor_passed_twice():
    x = torch.randn(3)
    m = gp.export(Same(), (x, x)).module()
    calls = [((x, x), {}), ((x, x.clone()), {})]
    assert agree(m, calls) == {"generated": 1, "general": 1}


class Halves(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0] // 2, 2, -1).sum(1)


def test_divisibility_and_small_sizes():
    b = gp.Dim("b", min=0, max=40)
    m = gp.export(Halves(), (torch.randn(6, 3),), dynamic_shapes=({0: 2 * b},)).module()
    calls = [((torch.randn(n, 3),), {}) for n in (0, 2, 4, 80, 7, 82, 1)]
    accepted = agree(m, calls)
    assert accepted["generated"] == accepted["general"] >= 3


def test_hooks_run_and_calls_are_still_checked():
    x, mask = torch.randn(8, 16), torch.ones(8, 4)
    b = gp.Dim("b", max=64)
    m = gp.export(Pair(), (x,), {"mask": mask}, dynamic_shapes={"x": {0: b}, "mask": {0: b}}).module()
    seen = []
    handle = m.register_forward_pre_hook(lambda mod, args: seen.append(args[0].shape[0]))
    torch.testing.assert_close(m(x, mask=mask), Pair()(x, mask=mask))
    with pytest.raises(gp.errors.InputGuardError):
        m(torch.randn(8, 15), mask=mask)
    assert seen == [8]
    handle.remove()
    torch.testing.assert_close(m(x, mask=mask), Pair()(x, mask=mask))
    assert seen == [8]


def test_only_integers_from_the_contract_are_written_into_the_source():
    import dataclasses

    from graphport.call_checks import build_input_checker

    x, mask = torch.randn(8, 16), torch.ones(8, 4)
    b = gp.Dim("b", max=64)
    m = gp.export(Pair(), (x,), {"mask": mask}, dynamic_shapes={"x": {0: b}, "mask": {0: b}}).module()
    contract = m._ep.shape_contract
    expected = [(False, m._placeholder_vals[s.arg.name]) for s in m._user_inputs]
    args = (m._in_spec, expected)
    assert build_input_checker(*args, contract, {}, True) is not None
    sym, fact = next(iter(contract.symbols.items()))
    tampered = dataclasses.replace(fact, source=dataclasses.replace(fact.source, dim="0] or __import__('os')"))
    bad = dataclasses.replace(contract, symbols={**contract.symbols, sym: tampered})
    assert build_input_checker(*args, bad, {}, True) is None

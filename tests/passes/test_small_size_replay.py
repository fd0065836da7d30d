"""The small-size proof by graph replay (passes/small_size_replay.py) against the re-trace.

Each program is exported with a dynamic dimension whose sizes 0 and 1 need proving, once
with the replay allowed and once re-tracing only: both must give the same valid sizes,
refusals and ranges, and the exported program must be refused or right (against eager) at
sizes 0, 1, 2 and the example. Programs whose size-1 behaviour is decided outside a
metadata computation must not be replayed."""
import sys
from unittest import mock

import pytest
import torch

import graphport as gp
from graphport.passes import small_sizes

_export_module = sys.modules["graphport.export"]


def _export(fn, x, low=0, replay=True):
    reports = []
    real = _export_module.prove_small_sizes

    def keep(*args):
        reports.append(real(*args))
        return reports[-1]
    with mock.patch.object(_export_module, "prove_small_sizes", keep), \
            (small_sizes.retrace_only() if not replay else mock.patch.object(small_sizes, "_REPLAY", [True])):
        ep = gp.export(fn, (x,), dynamic_shapes=({0: gp.Dim("n", min=low, max=16)},))
    return ep, reports[0]


def _refused_or_right(ep, fn, x):
    for n in (0, 1, 2, x.shape[0]):
        fresh = torch.randn(n, *x.shape[1:])
        try:
            expected = fn(fresh.clone())
        except Exception:
            with pytest.raises(Exception):
                ep.module()(fresh.clone())
            continue
        try:
            got = ep.module()(fresh.clone())
        except Exception:
            continue   # refused at call time
        torch.testing.assert_close(got, expected)


def _same_results(fn, x, low=0):
    try:
        ref, ref_report = _export(fn, x, low, replay=False)
    except gp.ConstraintViolationError as e:   # a size in range computes something else: both must say so
        with pytest.raises(gp.ConstraintViolationError) as again:
            _export(fn, x, low)
        assert str(again.value) == str(e)
        return None
    ep, report = _export(fn, x, low)
    assert report.valid == ref_report.valid
    assert report.refused.keys() == ref_report.refused.keys()
    assert report.exclusions == ref_report.exclusions
    assert {str(k): v for k, v in ep.range_constraints.items()} == \
        {str(k): v for k, v in ref.range_constraints.items()}
    assert ref_report.replays == 0
    _refused_or_right(ep, fn, x)
    return report


def _user_branch(x):
    return x + 1 if x.shape[0] == 1 else x * 2


def _broadcast_only_at_one(x):
    return x + x[:1].expand(x.shape[0], -1) if x.shape[0] != 1 else x


def _reshape_view_or_copy(x):
    y = x.transpose(0, 1).reshape(-1)   # a view at size 1, a copy above
    return y.view(x.shape[1], x.shape[0]) * 2


def _expand_size_one(x):
    return x[:, :1].expand(-1, 5) + 1


def _channels_last_kernel(x):
    return torch.nn.functional.adaptive_avg_pool2d(x.to(memory_format=torch.channels_last), 2) \
        .reshape(x.shape[0], -1)


def _constant_from_size(x):
    return x + torch.tensor([x.shape[0] - 1.0])


def _inplace_add(x):
    y = x * 2
    y += x[:, :1]
    return y


def _elementwise(x):
    return torch.relu(x) * 2 + x.sum(1, keepdim=True)


@pytest.mark.parametrize("fn", [_user_branch, _broadcast_only_at_one, _reshape_view_or_copy, _constant_from_size])
def test_size_one_decided_outside_kernels_is_traced_not_replayed(fn):
    x = torch.randn(4, 3)
    report = _same_results(fn, x)
    assert report is None or report.replays == 0


@pytest.mark.parametrize("fn", [_expand_size_one, _inplace_add, _elementwise])
def test_replay_or_trace_agree_and_are_right(fn):
    _same_results(fn, torch.randn(4, 3))


def test_channels_last_kernel_agrees():
    _same_results(_channels_last_kernel, torch.randn(3, 2, 8, 8))


def test_elementwise_program_is_replayed():
    # min=1: at min=0 the input's own metadata (empty_strided asks "n == 0?") is an outside assumption
    report = _same_results(_elementwise, torch.randn(4, 3), low=1)
    assert report.replays > 0 and report.traces == 0

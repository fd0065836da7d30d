"""An operator error claims a call "fails the same way in eager" only where eager fails at the
example's concrete layout; where eager runs it, the error says graphport could not follow it."""
import pytest
import torch
import transformers as tf

import graphport as gp
from graphport.capture.eager_check import runs_at_the_example

aten = torch.ops.aten


def test_eager_is_asked_at_the_concrete_layout():
    rows = torch.empty(4, 6, device="meta").t()           # transposed: not viewable as one row
    assert runs_at_the_example(aten.view.default, (rows, [24]), {}) is False
    assert runs_at_the_example(aten.view.default, (rows.t(), [24]), {}) is True


def test_a_call_eager_rejects_is_said_to_fail_in_eager():
    with pytest.raises(gp.OperatorError) as caught:
        gp.export(lambda x: x.view(-1, 7), (torch.randn(3, 5),))
    assert "fails the same way in eager" in caught.value.fix


def test_a_call_eager_runs_is_not_said_to_fail_in_eager():
    """Mamba-2's chunked scan: einsum over a padded sequence reshapes an operand that is viewable
    in eager at the example (one chunk) only; the call must never be said to fail in eager (it
    exports: the reshape is a view-or-copy choice, tests/soundness/test_unobserved_view_or_copy.py)."""
    torch.manual_seed(0)
    cfg = tf.Mamba2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_heads=4, head_dim=16,
                          state_size=8, n_groups=1, chunk_size=256, expand=2, use_cache=False)
    model = tf.Mamba2Model(cfg).eval()
    ids = torch.randint(0, 100, (2, 40))
    model(ids)   # eager runs it
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("seq", min=1, max=1024)},)
    try:
        gp.export(model, (ids,), dynamic_shapes=spec)
    except gp.OperatorError as e:
        pytest.fail(f"claims eager fails: {e}")
    except gp.UnsupportedFeatureError as e:
        assert "eager PyTorch runs it" in str(e) and isinstance(e, RuntimeError)

"""The model families of bench/zoo.py's FAMILIES (diffusion models with their default return_dict,
windowed and interpolating vision transformers with a dynamic image size, state-space models),
exported dynamically and checked against eager at batch 1, at every Dim's smallest size and at
other sizes inside the ranges. Two representatives run by default: Mamba-2's chunked scan (a
padded sequence contracted by einsum) and WavLM's feature extractor (floor-division size
arithmetic the ranges settle); the whole families list is slow. Timings live in bench/run_zoo.py.
"""
from __future__ import annotations

import copy
import inspect
import sys
from pathlib import Path

import pytest
import torch
import transformers as tf

import graphport as gp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench/ helpers live at the repo root

from bench import measure, zoo  # noqa: E402
from bench.harness import OK, compare  # noqa: E402


def _matches_eager(model, ep, inputs) -> None:
    """Eager from the module as exported at every size: Swin rewrites its own window and shift
    when called at a small image, so a shared module would answer later sizes from that state."""
    exported_from = copy.deepcopy(model)
    for args, kwargs in inputs:
        with torch.no_grad():
            expected = copy.deepcopy(exported_from)(*args, **kwargs)
            actual = ep.module()(*args, **kwargs)
        ok, diff, reason = compare(expected, actual)
        assert ok, f"at {[tuple(a.shape) for a in (*args, *kwargs.values())]}: {reason} (max diff {diff})"


def test_mamba2_exports_with_a_dynamic_sequence_across_chunk_boundaries():
    """The sequence is padded to whole chunks of 16 and contracted per chunk by einsum, whose
    reshape of a permuted operand is a view at one chunk and a copy from two on."""
    cfg = tf.Mamba2Config(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_heads=4, head_dim=16,
                          state_size=8, n_groups=1, chunk_size=16, expand=2, use_cache=False)
    model = tf.Mamba2Model(cfg).eval()
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("seq", min=1, max=64)},)
    ep = gp.export(model, (torch.randint(0, 100, (2, 16)),), dynamic_shapes=spec)
    _matches_eager(model, ep, [((torch.randint(0, 100, (b, s)),), {}) for b, s in
                               [(1, 1), (1, 16), (1, 17), (3, 33), (2, 64)]])


def _wavlm():
    cfg = tf.WavLMConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                         mask_time_prob=0.0, num_buckets=32, max_bucket_distance=80)
    return tf.WavLMModel(cfg).eval()


def test_wavlm_feature_extractor_exports_with_a_dynamic_sample_count():
    """The feature extractor's seven strided convolutions give (samples + 240) // 320 - 1 frames,
    and attention needs more than one: from 720 samples on, which the ranges settle."""
    model = _wavlm()
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("samples", min=720, max=16000)},)
    ep = gp.export(model, (torch.randn(2, 1600),), dynamic_shapes=spec)
    _matches_eager(model, ep, [((torch.randn(b, s),), {}) for b, s in
                               [(1, 720), (1, 1039), (1, 1040), (3, 999), (2, 16000)]])


def test_wavlm_below_two_frames_is_refused_with_the_models_line():
    """Below 720 samples there is one frame, which attention's checks refuse: the error names
    the model's line and suggests the range that holds (torch.export suggests the same)."""
    spec = ({0: gp.Dim("batch", min=1, max=8), 1: gp.Dim("samples", min=400, max=16000)},)
    with pytest.raises(gp.ConstraintViolationError) as caught:
        gp.export(_wavlm(), (torch.randn(2, 1600),), dynamic_shapes=spec)
    assert "modeling_wavlm.py" in str(caught.value) and "min=720" in str(caught.value)


@pytest.mark.slow
def test_longt5_exports_with_a_dynamic_sequence_on_and_off_whole_blocks():
    """LongT5's local attention pads the sequence to whole blocks of 5 only when it does not
    divide (`if x.shape[dim] % block_len != 0`): the branch is captured as a cond, and the side
    where the length divides views its blocks back knowing it does (shapes/multiples.py).
    Checked at batch 1, the smallest length, multiples of the block and not, and the largest.
    torch.export fails on this spec (its suggested-fix code raises "Cannot create Dim with
    inconsistent min=0, max=-26")."""
    cfg = tf.LongT5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_decoder_layers=1,
                          num_heads=2, local_radius=4, global_block_size=4, encoder_attention_type="local",
                          use_cache=False)
    torch.manual_seed(0)
    model = tf.LongT5Model(cfg).eval()

    def inputs(b, s, d):
        return (), {"input_ids": torch.randint(0, 100, (b, s)), "attention_mask": torch.ones(b, s, dtype=torch.long),
                    "decoder_input_ids": torch.randint(0, 100, (b, d))}

    batch, seq = gp.Dim("batch", min=1, max=4), gp.Dim("seq", min=1, max=512)
    spec = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq},
            "decoder_input_ids": {0: batch, 1: gp.Dim("dec_seq", min=1, max=64)}}
    args, kwargs = inputs(2, 16, 8)
    ep = gp.export(model, args, kwargs, dynamic_shapes=spec)
    assert sum(n.target is torch.ops.higher_order.cond for n in ep.graph.nodes if n.op == "call_function") >= 1
    _matches_eager(model, ep, [inputs(b, s, d) for b, s, d in
                               [(1, 1, 1), (1, 4, 2), (1, 5, 2), (1, 7, 3), (3, 20, 8), (1, 511, 1), (2, 512, 64)]])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.FAMILIES))
def test_family_dynamic_export_matches_eager_wherever_torch_export_exports(name: str):
    """Where torch.export's dynamic export exports, graphport's does too; and graphport's program
    answers every listed size (batch 1, the smallest, other in-range points) as eager does.
    A refusal is accepted only when it names the model's own line."""
    built = zoo.FAMILIES[name].build()
    rec = measure.attempt("graphport", built, dynamic=True, run=True)
    if rec["status"] != OK:
        torch_rec = measure.attempt("torch", zoo.FAMILIES[name].build(), dynamic=True, run=False)
        assert torch_rec["status"] != OK, f"torch.export exports {name} dynamically; graphport: {rec}"
        with pytest.raises(gp.GraphportError) as caught:
            args, kwargs = built.example_inputs()
            gp.export(built.module, args, kwargs, dynamic_shapes=measure.dynamic_spec(built, "graphport"))
        location = getattr(caught.value, "location", None)
        assert location is not None and "site-packages" in str(location.filename), str(caught.value)
        return
    args, kwargs = built.example_inputs()
    ep = gp.export(built.module, args, kwargs, dynamic_shapes=measure.dynamic_spec(built, "graphport"))
    sizes = [built.smallest_sizes, *built.range_sizes] if built.smallest_sizes else [built.other_sizes]
    _matches_eager(built.module, ep, [built.make_inputs(**s) for s in sizes])

"""Greedy decoding on exported programs: a prefill program and a one-token step program
that take and return transformers' DynamicCache, as a serving loop runs them.

Run: python examples/greedy_decode.py   (exits non-zero if the tokens differ from eager generate())
"""
from __future__ import annotations

import sys

import torch
import transformers as tf
from transformers.integrations.executorch import register_dynamic_cache_export_support

import graphport as gp


def small_model() -> tf.PreTrainedModel:
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256)
    return tf.LlamaForCausalLM(config).eval()


def export_decoder(model: tf.PreTrainedModel, max_len: int = 128) -> tuple[gp.ExportedProgram, gp.ExportedProgram]:
    """(prefill, step): the prompt with an empty cache; then one token with the cache so far."""
    register_dynamic_cache_export_support()   # lets pytree (and so export) flatten a DynamicCache
    batch, seq, past = gp.Dim("batch", min=1, max=8), gp.Dim("seq", min=1, max=max_len), gp.Dim("past", min=1, max=max_len)
    layers = model.config.num_hidden_layers
    prompt = torch.randint(0, model.config.vocab_size, (2, 5))
    with torch.no_grad():
        prefill = gp.export(model, (), {"input_ids": prompt, "past_key_values": tf.DynamicCache(config=model.config),
                                        "use_cache": True},
                            dynamic_shapes={"input_ids": {0: batch, 1: seq}, "past_key_values": [[], []]})
        cache = model(prompt, use_cache=True).past_key_values
        per_layer = [{0: batch, 2: past}] * layers   # the cache's pytree layout: [keys per layer], [values per layer]
        step = gp.export(model, (), {"input_ids": prompt[:, :1], "past_key_values": cache, "use_cache": True},
                         dynamic_shapes={"input_ids": {0: batch}, "past_key_values": [per_layer, per_layer]})
    return prefill, step


def greedy_decode(prefill: gp.ExportedProgram, step: gp.ExportedProgram, config, prompt: torch.Tensor,
                  new_tokens: int) -> torch.Tensor:
    prefill_fn, step_fn = prefill.module(), step.module()
    with torch.no_grad():
        out = prefill_fn(input_ids=prompt, past_key_values=tf.DynamicCache(config=config), use_cache=True)
        tokens = [out.logits[:, -1:].argmax(-1)]
        for _ in range(new_tokens - 1):
            out = step_fn(input_ids=tokens[-1], past_key_values=out.past_key_values, use_cache=True)
            tokens.append(out.logits[:, -1:].argmax(-1))
    return torch.cat([prompt] + tokens, dim=1)


def main(new_tokens: int = 8) -> bool:
    model = small_model()
    prefill, step = export_decoder(model)
    prompt = torch.randint(0, model.config.vocab_size, (3, 7))
    got = greedy_decode(prefill, step, model.config, prompt, new_tokens)
    with torch.no_grad():
        expected = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    print("exported program:", got[:, prompt.shape[1]:].tolist())
    print("eager generate():", expected[:, prompt.shape[1]:].tolist())
    return torch.equal(got, expected)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)

"""Small causal language models and the decoding loop the decoding tests run on them.

Each model is built from a small config with random weights. A decoding run is a prefill
(the prompt, an empty cache) and then one-token steps that feed back the cache the
previous call returned, as transformers' generate() and serving stacks do.
"""
from __future__ import annotations

from typing import Callable

import torch
import transformers as tf
from transformers.integrations.executorch import register_dynamic_cache_export_support

import graphport as gp

register_dynamic_cache_export_support()   # DynamicCache as a pytree node, as torch.export needs it too

VOCAB = 128
CONFIGS = {
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=VOCAB, n_layer=2, n_embd=32, n_head=4,
                                                     n_positions=128)),
    "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=VOCAB, num_hidden_layers=2, hidden_size=32,
                                                        num_attention_heads=4, num_key_value_heads=2,
                                                        intermediate_size=64, max_position_embeddings=128)),
    "gpt_neox": lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(vocab_size=VOCAB, num_hidden_layers=2, hidden_size=32,
                                                               num_attention_heads=4, intermediate_size=64,
                                                               max_position_embeddings=128)),
    "phi": lambda: tf.PhiForCausalLM(tf.PhiConfig(vocab_size=VOCAB, num_hidden_layers=2, hidden_size=32,
                                                  num_attention_heads=4, intermediate_size=64,
                                                  max_position_embeddings=128)),
}
NAMES = sorted(CONFIGS)
MAX_BATCH, MAX_LEN = 8, 96


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return CONFIGS[name]().eval()


def empty_cache(model: torch.nn.Module) -> tf.DynamicCache:
    return tf.DynamicCache(config=model.config)


def layers(model: torch.nn.Module) -> int:
    return model.config.num_hidden_layers


def prefill_dynamic_shapes(dim: Callable = gp.Dim) -> dict:
    """`dim` is graphport's Dim, or torch.export's for the reference export."""
    return {"input_ids": {0: dim("batch", min=1, max=MAX_BATCH), 1: dim("seq", min=1, max=MAX_LEN)},
            "past_key_values": [[], []], "use_cache": None}


def step_dynamic_shapes(model: torch.nn.Module, dim: Callable = gp.Dim) -> dict:
    """One spec per cache tensor, in the cache's pytree layout: [key tensors], [value tensors]."""
    batch, past = dim("batch", min=1, max=MAX_BATCH), dim("past", min=1, max=MAX_LEN)
    per_layer = [{0: batch, 2: past}] * layers(model)
    return {"input_ids": {0: batch}, "past_key_values": [per_layer, per_layer], "use_cache": None}


def prefill_inputs(model: torch.nn.Module, batch: int = 2, seq: int = 5) -> dict:
    ids = torch.randint(0, VOCAB, (batch, seq))
    return {"input_ids": ids, "past_key_values": empty_cache(model), "use_cache": True}


def step_inputs(model: torch.nn.Module, batch: int = 2, past: int = 5) -> dict:
    """A one-token step after a prompt of `past` tokens (the cache eager prefill returns)."""
    with torch.no_grad():
        cache = model(**prefill_inputs(model, batch, past)).past_key_values
    return {"input_ids": torch.randint(0, VOCAB, (batch, 1)), "past_key_values": cache, "use_cache": True}


def export_pair(export: Callable, model: torch.nn.Module, dim: Callable = gp.Dim) -> tuple:
    """(prefill program, step program), exported with `export` and `dim` (graphport's or torch's)."""
    with torch.no_grad():
        prefill = export(model, (), prefill_inputs(model), dynamic_shapes=prefill_dynamic_shapes(dim))
        step = export(model, (), step_inputs(model), dynamic_shapes=step_dynamic_shapes(model, dim))
    return prefill, step


def decode(prefill: Callable, step: Callable, model: torch.nn.Module, prompt: torch.Tensor,
           tokens: list[torch.Tensor]) -> list[torch.Tensor]:
    """Logits of the prefill on `prompt`, then of one step per token of `tokens`, each step
    fed the cache the previous call returned."""
    with torch.no_grad():
        out = prefill(input_ids=prompt, past_key_values=empty_cache(model), use_cache=True)
        logits = [out.logits]
        for token in tokens:
            out = step(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits)
    return logits


def greedy_tokens(model: torch.nn.Module, prompt: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The tokens eager greedy decoding feeds back, so every runner sees the same inputs."""
    tokens = []
    with torch.no_grad():
        out = model(input_ids=prompt, past_key_values=empty_cache(model), use_cache=True)
        for _ in range(steps):
            tokens.append(out.logits[:, -1:].argmax(-1))
            out = model(input_ids=tokens[-1], past_key_values=out.past_key_values, use_cache=True)
    return tokens

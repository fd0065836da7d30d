"""Decoding with a KV cache: export time, and per-token step latency of the exported step
program against eager and torch.export's program, side by side in one process.

One model (GPT-NeoX from a small config, random weights) with transformers' DynamicCache:
a prefill program (prompt, empty cache) and a step program (one token, the cache so far),
both with dynamic batch, sequence and cache length. Export time is the two exports together,
graphport and torch.export interleaved, median of --repeats. Step latency is one call of
the step on a cache of --past tokens at batch 1 (the serving case), each runner's calls
interleaved with the others', median over --calls calls; the cache is built before each
timed call, since eager extends the cache it is given.
Run: PYTHONPATH=src python bench/decoding.py [--model gpt_neox|phi] [--repeats 3] [--calls 50] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers as tf
from transformers.integrations.executorch import register_dynamic_cache_export_support

import graphport as gp

MODELS = {
    "gpt_neox": lambda: tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(
        vocab_size=1024, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=512)),
    "phi": lambda: tf.PhiForCausalLM(tf.PhiConfig(
        vocab_size=1024, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=512)),
}
MAX_LEN = 256


def export_pair(export, dim, model):
    layers = model.config.num_hidden_layers
    batch, seq, past = dim("batch", min=1, max=8), dim("seq", min=1, max=MAX_LEN), dim("past", min=1, max=MAX_LEN)
    prompt = torch.randint(0, model.config.vocab_size, (2, 5))
    with torch.no_grad():
        prefill = export(model, (), {"input_ids": prompt, "past_key_values": tf.DynamicCache(config=model.config),
                                     "use_cache": True},
                         dynamic_shapes={"input_ids": {0: batch, 1: seq}, "past_key_values": [[], []],
                                         "use_cache": None})
        cache = model(prompt, use_cache=True).past_key_values
        per_layer = [{0: batch, 2: past}] * layers
        step = export(model, (), {"input_ids": prompt[:, :1], "past_key_values": cache, "use_cache": True},
                      dynamic_shapes={"input_ids": {0: batch}, "past_key_values": [per_layer, per_layer],
                                      "use_cache": None})
    return prefill, step


def torch_export(model, args, kwargs, dynamic_shapes):
    return torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt_neox")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--past", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    register_dynamic_cache_export_support()
    torch.manual_seed(0)
    model = MODELS[opts.model]().eval()
    export_pair(gp.export, gp.Dim, model)                            # warm-up: imports, first-call costs
    export_pair(torch_export, torch.export.Dim, model)

    export_s = {"graphport": [], "torch.export": []}
    for _ in range(opts.repeats):
        for name, export, dim in (("graphport", gp.export, gp.Dim), ("torch.export", torch_export, torch.export.Dim)):
            start = time.perf_counter()
            programs = export_pair(export, dim, model)
            export_s[name].append(time.perf_counter() - start)
            if name == "graphport":
                ours = programs
            else:
                theirs = programs

    prompt = torch.randint(0, model.config.vocab_size, (1, opts.past))
    with torch.no_grad():
        base = model(prompt, use_cache=True)
    token = base.logits[:, -1:].argmax(-1)

    def fresh_cache():
        return tf.DynamicCache([(layer.keys.clone(), layer.values.clone()) for layer in base.past_key_values.layers])

    runners = {"eager": model, "graphport": ours[1].module(), "torch.export": theirs[1].module()}
    step_ms = {name: [] for name in runners}
    with torch.no_grad():
        expected = model(input_ids=token, past_key_values=fresh_cache(), use_cache=True).logits
        for name, run in runners.items():   # same logits before timing anything
            got = run(input_ids=token, past_key_values=fresh_cache(), use_cache=True).logits
            assert torch.allclose(got, expected, atol=1e-5), name
        for _ in range(opts.calls):
            for name, run in runners.items():
                cache = fresh_cache()
                start = time.perf_counter()
                run(input_ids=token, past_key_values=cache, use_cache=True)
                step_ms[name].append((time.perf_counter() - start) * 1e3)

    print(f"model: {opts.model} ({model.config.num_hidden_layers} layers, hidden {model.config.hidden_size}), "
          f"step at batch 1 on a cache of {opts.past} tokens, {opts.threads} torch thread(s)")
    ours_s, torch_s = statistics.median(export_s["graphport"]), statistics.median(export_s["torch.export"])
    print(f"export (prefill + step programs): graphport {ours_s:.2f} s, torch.export {torch_s:.2f} s, "
          f"ratio graphport/torch.export {ours_s / torch_s:.2f}")
    eager_ms = statistics.median(step_ms["eager"])
    for name in runners:
        ms = statistics.median(step_ms[name])
        print(f"step latency {name:>12}: {ms:.2f} ms per token  ({ms / eager_ms:.2f}x eager)")


if __name__ == "__main__":
    main()

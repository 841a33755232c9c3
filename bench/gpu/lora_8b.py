#!/usr/bin/env python3
"""LoRA on an 8B-shaped Llama (issue 42), for bench/gpu/check.sh: torchtune's published
figure for Llama 3.1 8B LoRA is 16.2 GiB peak on one GPU; this measures ours.

Writes a Llama-3.1-8B-shaped folder (32 layers, 4096 wide, 32 query and 8 key/value heads,
feed-forward 14336, vocabulary 128,256, untied head: 8.03B parameters) of random bf16
weights with torch alone (safetensors written by hand: the GPU machine has no
transformers), with the carried SentencePiece tokenizer, then trains nightshift-trainer on
it as a causal LM: model.adapter {type: lora, r: 16, alpha: 32, target_modules:
all-linear}, model.base_precision bf16, train.precision bf16, packed rows of 512 tokens,
--tokens a step, activation checkpointing as --ac says. Prints one JSON line: tokens/s and
the peak GPU memory the trainer reports (CUDA's peak allocated bytes).

  bench/gpu/lora_8b.py --carry bench/gpu/.carry --build build-gpu [--shape 8b|tiny]
                       [--steps 12] [--tokens 4096] [--ac full] [--work /tmp/nightshift-lora8b]

--shape tiny (2 layers, 64 wide) checks the plumbing on a CPU in seconds (run so on the CPU
machine: 0.52 GiB peak RSS, a loss of 9.03 after 4 steps).
"""
import argparse
import json
import os
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trainer_bench import run_trainer  # noqa: E402

SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=8192),
}


def tensors(c):
    """(name, shape) of LlamaForCausalLM's weights, in transformers' names."""
    d, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = d // c["num_attention_heads"] * c["num_key_value_heads"]
    yield "model.embed_tokens.weight", (v, d)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (d,)
        yield p + "self_attn.q_proj.weight", (d, d)
        yield p + "self_attn.k_proj.weight", (kv, d)
        yield p + "self_attn.v_proj.weight", (kv, d)
        yield p + "self_attn.o_proj.weight", (d, d)
        yield p + "post_attention_layernorm.weight", (d,)
        yield p + "mlp.gate_proj.weight", (f, d)
        yield p + "mlp.up_proj.weight", (f, d)
        yield p + "mlp.down_proj.weight", (d, f)
    yield "model.norm.weight", (d,)
    yield "lm_head.weight", (v, d)


def write_folder(folder, shape, tokenizer_model, device):
    c = dict(SHAPES[shape], architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
             max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
             torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False)
    os.makedirs(folder, exist_ok=True)
    json.dump(c, open(os.path.join(folder, "config.json"), "w"), indent=1)
    shutil.copy(tokenizer_model, os.path.join(folder, "tokenizer.model"))
    # One safetensors file per layer or so (under 1 GiB each), with the index transformers writes.
    files, current, size, weight_map, n = [], [], 0, {}, 0
    for name, dims in tensors(c):
        current.append((name, dims))
        size += 2 * int(torch.Size(dims).numel())
        if size > (1 << 30):
            files.append(current)
            current, size = [], 0
    if current:
        files.append(current)
    g = torch.Generator(device=device).manual_seed(0)
    for k, group in enumerate(files):
        fname = f"model-{k + 1:05d}-of-{len(files):05d}.safetensors"
        header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
        for name, dims in group:
            if name.endswith("norm.weight"):
                t = torch.ones(dims, dtype=torch.bfloat16)
            else:
                t = (torch.randn(dims, generator=g, device=device, dtype=torch.float32) * 0.02).to(torch.bfloat16).cpu()
            b = t.contiguous().view(torch.int16).numpy().tobytes()
            header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [at, at + len(b)]}
            blobs.append(b)
            at += len(b)
            weight_map[name] = fname
            n += t.numel()
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(folder, fname), "wb") as out:
            out.write(struct.pack("<Q", len(text)))
            out.write(text)
            for b in blobs:
                out.write(b)
    json.dump({"metadata": {"total_size": 2 * n}, "weight_map": weight_map},
              open(os.path.join(folder, "model.safetensors.index.json"), "w"))
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--carry", default="bench/gpu/.carry")
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--ac", default="full")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--work", default="/tmp/nightshift-lora8b")
    a = ap.parse_args()
    data = os.path.join(a.carry, "spam-lm-512")
    meta = json.load(open(os.path.join(data, "meta.json")))
    folder = os.path.join(a.work, "llama-" + a.shape)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    params = write_folder(folder, a.shape, os.path.join(data, "tokenizer.model"), device)
    model = {"pretrained": folder, "task": "causal_lm", "max_len": 512, "base_precision": "bf16",
             "adapter": {"type": "lora", "r": 16, "alpha": 32, "target_modules": "all-linear"}}
    precision = "bf16" if device == "cuda" else "fp32"  # autocast to bf16 on a GPU; the CPU check runs float32
    r = run_trainer(a.build, data, dict(meta, num_classes=0), a.work, "lora-" + a.shape, max_len=512, model=model,
                    precision=precision, ac=a.ac, rows="packed", max_tokens=str(a.tokens),
                    max_steps=a.steps, skip_steps=2, lr=2e-4, warmup=2, threads=a.threads)
    r.update(shape=a.shape, parameters=params, setting="LoRA r 16 alpha 32 all-linear, base bf16, precision " +
             precision + ", activation checkpointing " + a.ac + ", packed rows of 512, %d tokens a step" % a.tokens,
             peak_gib=round(r["peak_rss_bytes"] / 2**30, 2), torchtune_published_gib=16.2)
    print(json.dumps(r))
    shutil.rmtree(folder, ignore_errors=True)  # 16 GB of random weights


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plain-PyTorch baselines for the trainer benchmarks: PyTorch 2.14.1 from the project's
virtual environment (/opt/nightshift/venv, scripts/install-deps.sh), eager or under
torch.compile (inductor).

The same model as nightshift-trainer's transformer_classifier (pre-LN blocks, fused QKV,
GELU, CLS pooling; attention through F.scaled_dot_product_attention when no dropout is
applied to the attention probabilities, as the trainer does), the same optimizer and
schedule, on the same token shards that nightshift-prepare wrote, so the only
differences are the training loop and batching. The optimizer is torch.optim.AdamW with
fused=True by default (ATen's _fused_adamw_: what PyTorch users on the CPU pass, what
transformers' Trainer builds by default on torch >= 2.8, and the kernel
nightshift-trainer's FusedAdamW calls), weight decay on every parameter as the trainer
does; --optimizer foreach or single for the other two implementations (single: the
single-tensor loop, PyTorch's CPU default when neither flag is passed). The JSON line
names it ("optimizer").

  --batching fixed   the tutorial way: DataLoader(batch_size=32, shuffle=True), each
                     batch padded to its longest sample;
  --batching tokens  fairseq-style: sort by length, fill batches to a padded-token
                     budget (--max-tokens), shuffle the batches.
  --compile          torch.compile(model) (inductor on the CPU; dynamic shapes, since
                     every batch has its own length). Compilation happens in the first
                     steps, which --skip-steps leaves out of the timing.

Prints one JSON line with the measurements.
"""
import argparse
import contextlib
import json
import math
import resource
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_shard(path):
    with open(path, "rb") as f:
        header = f.read(64)
        magic, version, vocab, n, ntok, ncls = struct.unpack("<8sIIQQI", header[:36])
        assert magic == b"NSSHARD1", path
        offsets = np.frombuffer(f.read(8 * (n + 1)), dtype=np.uint64).astype(np.int64)
        labels = np.frombuffer(f.read(4 * n), dtype=np.int32).astype(np.int64)
        f.read(8 * n)  # ids
        tokens = np.frombuffer(f.read(4 * ntok), dtype=np.int32).astype(np.int64)
    samples = [tokens[offsets[i]:offsets[i + 1]] for i in range(n)]
    return samples, labels, vocab, ncls


class Block(nn.Module):
    def __init__(self, d, h, ffn, p, attn_p):
        super().__init__()
        self.h, self.p, self.attn_p = h, p, attn_p
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x, bias):
        b, l, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, l, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if self.attn_p == 0 or not self.training:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.h) + bias, -1)
            y = F.dropout(att, self.attn_p, self.training) @ v
        y = y.transpose(1, 2).reshape(b, l, d)
        x = x + F.dropout(self.proj(y), self.p, self.training)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class Classifier(nn.Module):
    def __init__(self, vocab, ncls, layers, d, h, ffn, p, max_len, pad_id=0, attn_p=0.0):
        super().__init__()
        self.p = p
        self.tok = nn.Embedding(vocab, d, padding_idx=pad_id)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([Block(d, h, ffn, p, attn_p) for _ in range(layers)])
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, ncls)

    def forward(self, tokens, pad_mask):
        l = tokens.shape[1]
        x = F.dropout(self.tok(tokens) + self.pos(torch.arange(l, device=tokens.device)), self.p, self.training)
        bias = torch.zeros(pad_mask.shape, device=tokens.device).masked_fill(pad_mask, float("-inf")).view(-1, 1, 1, l)
        for blk in self.blocks:
            x = blk(x, bias)
        return self.head(F.dropout(self.ln_f(x[:, 0]), self.p, self.training))


OPTIMIZERS = {"fused": {"fused": True}, "foreach": {"foreach": True, "fused": False},
              "single": {"foreach": False, "fused": False}}


def adamw(params, lr, weight_decay, kind="fused"):
    """torch.optim.AdamW (betas 0.9/0.999, eps 1e-8) over `params` (parameters or groups)
    with implementation `kind` (OPTIMIZERS); returns it and its name for the output."""
    flags = OPTIMIZERS[kind]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay, **flags)
    return opt, "AdamW(" + ", ".join(f"{k}={v}" for k, v in flags.items()) + ")"


def collate(batch):
    lens = [len(t) for t, _ in batch]
    L = max(lens)
    tokens = torch.zeros(len(batch), L, dtype=torch.long)
    for i, (t, _) in enumerate(batch):
        tokens[i, : len(t)] = torch.as_tensor(t)
    return tokens, tokens == 0, torch.tensor([y for _, y in batch]), sum(lens)


def token_batches(samples, max_tokens, seed):
    # Shuffle, then a stable sort by length, as fairseq's ordered_indices does: samples of
    # equal length (every mail truncated to max_len) must not stay in shard order, which
    # groups them by label and makes whole batches of one class.
    rng = np.random.default_rng(seed)
    order = sorted(rng.permutation(len(samples)).tolist(), key=lambda i: len(samples[i]))
    batches, cur, longest = [], [], 0
    for i in order:
        n = len(samples[i])
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder with train.shard and val.shard")
    ap.add_argument("--batching", choices=["fixed", "tokens"], default="fixed")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--max-samples", type=int, default=0, help="first N training samples")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attention-dropout", type=float, default=0.0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    ap.add_argument("--skip-steps", type=int, default=0, help="steps run before the timing starts")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--optimizer", default="fused", choices=sorted(OPTIMIZERS),
                    help="AdamW's implementation: fused=True (default), foreach=True, or the single-tensor loop")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, ytrain, vocab, ncls = read_shard(a.data + "/train.shard")
    val, yval, _, _ = read_shard(a.data + "/val.shard")
    train = [t[: a.max_len] for t in train]
    val = [t[: a.max_len] for t in val]
    if a.max_samples:
        train, ytrain = train[: a.max_samples], ytrain[: a.max_samples]
    data = list(zip(train, ytrain.tolist()))

    dev = torch.device(a.device)
    model = Classifier(vocab, ncls, a.layers, a.d_model, a.heads, a.ffn, a.dropout, a.max_len,
                       attn_p=a.attention_dropout).to(dev)
    run = torch.compile(model, dynamic=True) if a.compile else model
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.cuda.amp.GradScaler() if a.precision == "fp16" else None
    opt, opt_name = adamw(model.parameters(), a.lr, 0.01, a.optimizer)
    if a.batching == "fixed":
        loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, shuffle=True, collate_fn=collate)
        steps_per_epoch = len(loader)
    else:
        steps_per_epoch = len(token_batches(train, a.max_tokens, a.seed))
    total = a.epochs * steps_per_epoch
    if a.max_steps:
        total = min(total, a.max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (total - s) / max(1, total - a.warmup)))

    step, real_tokens, padded_tokens, samples = 0, 0, 0, 0
    t0 = time.perf_counter()
    model.train()
    for epoch in range(a.epochs):
        if a.batching == "fixed":
            it = iter(loader)
        else:
            it = (collate([data[i] for i in b]) for b in token_batches(train, a.max_tokens, a.seed + epoch))
        for tokens, mask, y, ntok in it:
            tokens, mask, y = tokens.to(dev, non_blocking=True), mask.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            with torch.autocast(dev.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
                loss = F.cross_entropy(run(tokens, mask), y)
            opt.zero_grad(set_to_none=True)
            if scaler:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            sched.step()
            step += 1
            if step == a.skip_steps:  # warm-up (and compilation) done: the timing starts
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                real_tokens = padded_tokens = samples = 0
                continue
            real_tokens += ntok
            padded_tokens += tokens.numel()
            samples += tokens.shape[0]
            if step >= total:
                break
        if step >= total:
            break
    if dev.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0

    result = {"batching": a.batching, "max_len": a.max_len, "steps": step - a.skip_steps,
              "train_seconds": round(train_s, 2), "compile": a.compile, "torch_version": torch.__version__,
              "tokens_per_second": round(real_tokens / train_s, 1), "samples_per_second": round(samples / train_s, 2),
              "padding_efficiency": round(real_tokens / padded_tokens, 4),
              "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
              "device": a.device, "precision": a.precision,
              "optimizer": opt_name + ", weight decay 0.01 on every parameter"}
    if dev.type == "cuda":
        result["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    if not a.no_eval:
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(val), 64):
                tokens, mask, y, _ = collate(list(zip(val[i : i + 64], yval[i : i + 64].tolist())))
                tokens, mask, y = tokens.to(dev), mask.to(dev), y.to(dev)
                correct += (model(tokens, mask).argmax(-1) == y).sum().item()
        result["val_accuracy"] = round(correct / len(val), 4)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

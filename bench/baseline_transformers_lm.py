#!/usr/bin/env python3
"""transformers' side of bench/decoder_bench.py: fine-tuning a Hugging Face decoder folder
as a causal LM (AutoModelForCausalLM, SDPA attention) with PyTorch 2.14.1 from the
project's virtual environment, on the token shards nightshift-prepare wrote with the
folder's tokenizer (--classifier false: bos ... eos per sample, so both sides see the same
ids), packed as nightshift-trainer packs them (train.batching.rows: packed;
worker/trainer/data/batching.cc, PlanEpoch with pack_len, mirrored here):

  samples, shuffled (a seeded permutation: not the trainer's own order), fill rows of
  --max-len tokens by best-fit decreasing (longest first, ties in the shuffled order; each
  into the row whose free space fits it most tightly, ties to the row whose free space
  reached that size first; else a new row); a step takes max(1, --budget / --max-len)
  consecutive rows (in the order they were started), padded to its longest row, and the
  steps are shuffled. Each row gets
  position_ids restarting at 0 per sample and no attention_mask, which transformers 5
  turns into a block-diagonal causal mask (masking_utils.find_packed_sequence_indices;
  use_cache=False, since it is only done without a cache). Labels are -100 at each
  sample's first token, at its prompt (a shard label > 1: prompt/completion data) and at
  padding; the loss is the mean next-token cross-entropy over the rest, as ours.

The optimizer is what transformers' Trainer builds by default on torch >= 2.8 (optim
"adamw_torch_fused"): torch.optim.AdamW(fused=True), weight decay 0.01 except on biases and
norm weights (Trainer.get_decay_parameter_names; see baseline_transformers.py); --optimizer
foreach or single for the other implementations; the JSON line names it. Linear warm-up
and decay, gradient clipping 1.0, --threads.
--compile: torch.compile(model, dynamic=True); --skip-steps leaves compilation out of
the timing. --check: before training, compares the step whose packed rows hold the most
samples against the same samples run one by one (per-sample forwards, the same targets):
both losses and the largest logit difference, in the JSON line.

Prints one JSON line: steps, seconds, real (non-padding) tokens per second, loss.
"""
import argparse
import bisect
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_pytorch import OPTIMIZERS, adamw, read_shard  # noqa: E402
from baseline_transformers import trainer_param_groups  # noqa: E402


def pack_rows(order, lengths, row_len):
    """nightshift's PackRowsBestFit (worker/trainer/data/batching.cc): best-fit decreasing. The
    samples, longest first (a stable sort: ties keep `order`), each go to the row with the
    least free space that still holds them (among equal free space, the entry made first,
    as std::multimap::lower_bound finds it), else start a new row. Rows in the order they
    were started, their samples in the order they were placed."""
    packed = lambda i: min(max(lengths[i], 1), row_len)  # noqa: E731
    rows, free, made = [], [], 0  # free: sorted (free tokens, entry number, row)
    for i in sorted(order, key=lambda i: -packed(i)):
        n = packed(i)
        at = bisect.bisect_left(free, (n, -1, -1))
        if at == len(free):
            row, left = len(rows), row_len - n
            rows.append([])
        else:
            space, _, row = free.pop(at)
            left = space - n
        rows[row].append(i)
        if left > 0:
            bisect.insort(free, (left, made, row))
            made += 1
    return rows


def collate(rows, samples, prompts, pad_id):
    """One step's packed rows: input ids, position ids (restarting per sample; the padding at
    a row's end is a segment of its own), labels (-100 where not a target), real tokens."""
    longest = max(sum(len(samples[i]) for i in row) for row in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), longest), dtype=torch.long)
    labels = torch.full((len(rows), longest), -100, dtype=torch.long)
    real = 0
    for r, row in enumerate(rows):
        c = 0
        for i in row:
            t = torch.as_tensor(samples[i])
            n = len(t)
            ids[r, c:c + n] = t
            pos[r, c:c + n] = torch.arange(n)
            p = max(int(prompts[i]), 1)
            labels[r, c + p:c + n] = t[p:]
            c += n
            real += n
        pos[r, c:] = torch.arange(longest - c)
    return ids, pos, labels, real


def lm_loss(logits, labels):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), labels[:, 1:].reshape(-1),
                           ignore_index=-100)


def check_packing(model, rows, samples, prompts, pad_id):
    """The first step's packed rows against the same samples run one by one: losses (the
    same targets) and the largest logit difference; also with positions not restarting
    (one causal sequence per row, attention crossing samples), which should differ."""
    model.eval()
    with torch.no_grad():
        ids, pos, labels, _ = collate(rows, samples, prompts, pad_id)
        logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits
        packed = float(lm_loss(logits, labels))
        cross_logits = model(input_ids=ids, position_ids=torch.arange(ids.size(1)).expand_as(ids),
                             use_cache=False).logits
        total, count, diff, cross_diff, multi = 0.0, 0, 0.0, 0.0, 0
        for r, row in enumerate(rows):
            c = 0
            multi += len(row) > 1
            for i in row:
                sid, _, slab, _ = collate([[i]], samples, prompts, pad_id)
                n = sid.size(1)
                one = model(input_ids=sid, use_cache=False).logits
                diff = max(diff, float((one[0] - logits[r, c:c + n]).abs().max()))
                cross_diff = max(cross_diff, float((one[0] - cross_logits[r, c:c + n]).abs().max()))
                k = int((slab[:, 1:] != -100).sum())
                if k:
                    total += float(lm_loss(one, slab)) * k
                    count += k
                c += n
    model.train()
    return {"samples": sum(len(r) for r in rows), "rows": len(rows), "rows_with_several": multi,
            "packed_loss": packed, "per_sample_loss": total / max(count, 1), "max_logit_diff": diff,
            "max_logit_diff_positions_not_restarting": cross_diff}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the Hugging Face folder")
    ap.add_argument("--data", required=True, help="folder with train.shard (nightshift-prepare --classifier false)")
    ap.add_argument("--max-len", type=int, default=512, help="row length (model.max_len)")
    ap.add_argument("--budget", type=int, default=2048, help="tokens per step: budget / max-len rows")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--skip-steps", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--optimizer", default="fused", choices=sorted(OPTIMIZERS),
                    help="AdamW's implementation: fused=True (Trainer's default, adamw_torch_fused), foreach, single")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--lora", type=int, default=0,
                    help="r > 0: a PEFT LoRA adapter (LoraConfig(r, lora_alpha=2r, target_modules='all-linear', "
                         "lora_dropout=0)) on the frozen model; the optimizer sees its parameters only, as Trainer's")
    ap.add_argument("--base-dtype", default="fp32", choices=("fp32", "bf16"),
                    help="the model's dtype as loaded (from_pretrained(dtype=...)); with --lora, PEFT keeps the "
                         "adapter in float32 (autocast_adapter_dtype, its default)")
    ap.add_argument("--ac", action="store_true",
                    help="activation checkpointing: model.gradient_checkpointing_enable() (with --lora, PEFT's "
                         "enable_input_require_grads, as its docs say)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    samples, prompts, _, _ = read_shard(os.path.join(a.data, "train.shard"))
    samples = [t[:a.max_len] for t in samples]
    pad_id = json.load(open(os.path.join(a.data, "meta.json")))["pad_id"]
    model = AutoModelForCausalLM.from_pretrained(a.model, attn_implementation="sdpa",
                                                 dtype=torch.bfloat16 if a.base_dtype == "bf16" else torch.float32)
    model.config.use_cache = False
    if a.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if a.lora > 0:
            model.enable_input_require_grads()
    if a.lora > 0:
        from peft import LoraConfig, TaskType, get_peft_model
        model = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=a.lora, lora_alpha=2 * a.lora,
                                                 lora_dropout=0.0, target_modules="all-linear"))
    rng = random.Random(a.seed)
    order = list(range(len(samples)))
    rng.shuffle(order)
    rows = pack_rows(order, [len(t) for t in samples], a.max_len)
    per = max(1, a.budget // a.max_len)
    batches = [rows[i:i + per] for i in range(0, len(rows), per)]
    rng.shuffle(batches)  # rows stay in their order within a step, as the trainer's
    total = min(len(batches), a.max_steps) if a.max_steps else len(batches)
    result = {}
    if a.check:
        # The step whose rows hold the most samples (the first ones may hold one each).
        fullest = max(batches, key=lambda b: sum(len(r) for r in b))
        result["check"] = check_packing(model, fullest, samples, prompts, pad_id)
    run = torch.compile(model, dynamic=True) if a.compile else model
    opt, opt_name = adamw(trainer_param_groups(model, 0.01), a.lr, 0.01, a.optimizer)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (total - s) / max(1, total - a.warmup)))
    model.train()
    tokens, padded = 0, 0
    t0 = time.perf_counter()
    for step, batch in enumerate(batches[:total]):
        if step == a.skip_steps:
            tokens, padded, t0 = 0, 0, time.perf_counter()
        ids, pos, labels, n = collate(batch, samples, prompts, pad_id)
        loss = lm_loss(run(input_ids=ids, position_ids=pos, use_cache=False).logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        tokens += n
        padded += ids.numel()
    seconds = time.perf_counter() - t0
    result.update({"who": ("peft+" if a.lora else "") + "transformers" + ("+compile" if a.compile else ""),
                   "lora_r": a.lora, "base_dtype": a.base_dtype, "activation_checkpointing": a.ac, "steps": total - a.skip_steps,
                   "seconds": round(seconds, 2), "tokens_per_second": round(tokens / seconds, 1),
                   "padding_efficiency": round(tokens / max(padded, 1), 4), "loss": float(loss.detach()),
                   "packing": "best-fit decreasing (nightshift's PackRowsBestFit)",
                   "optimizer": opt_name + ", Trainer's groups: weight decay 0.01 except biases and norms"})
    print(json.dumps(result))


if __name__ == "__main__":
    main()

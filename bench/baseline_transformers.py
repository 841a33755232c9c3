#!/usr/bin/env python3
"""transformers' side of bench/hf_bench.py: fine-tuning a Hugging Face folder
(AutoModelForSequenceClassification, SDPA attention, the folder's dropout) with
PyTorch 2.14.1 from the project's virtual environment, on the token shards that
nightshift-prepare wrote with the folder's tokenizer (so both sides see the same ids),
with linear warm-up and decay and gradient clipping as nightshift-trainer does.

The optimizer is what transformers' Trainer builds by default on torch >= 2.8
(TrainingArguments.optim "adamw_torch_fused": Trainer.create_optimizer): torch.optim.AdamW
with fused=True, betas 0.9/0.999, eps 1e-8, in two groups, weight decay (0.01 here, the
benchmark's setting on both sides) on the parameters Trainer.get_decay_parameter_names
names and none on biases and LayerNorm weights (called from transformers itself).
nightshift-trainer decays every parameter; the step's cost is the same. --optimizer
foreach or single: the other AdamW implementations (single: the single-tensor loop,
PyTorch's CPU default when neither flag is passed), the same groups. The JSON line names
it ("optimizer").

  --batching fixed     DataLoader(batch_size, shuffle=True), each batch padded to its longest;
  --batching grouped   Trainer's train_sampling_strategy "group_by_length" (transformers
                       5.24's name for group_by_length=True: LengthGroupedSampler):
                       mega-batches of 50 x batch_size sorted by length, cut in batch_size;
  --batching budget    nightshift-trainer's token budget (worker/trainer/data/batching.cc,
                       PlanEpoch with max_tokens, mirrored here, since Trainer has no token
                       budget): shuffle, length-sorted pools of about 100 budgets' worth of
                       tokens, each cut greedily into batches of at most --max-tokens padded
                       tokens (batch size x its longest sample), batches shuffled. A seeded
                       permutation, not the trainer's own random order.
  --compile            torch.compile(model, dynamic=True); --skip-steps leaves compilation
                       out of the timing.
  --eval               after training (not timed): accuracy on DATA/val.shard, the rows
                       nightshift-trainer validates on when given the same folder.

Prints one JSON line: steps, seconds, real tokens per second, epoch seconds, optimizer,
padding efficiency (and val_accuracy with --eval).
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification
from transformers.trainer_pt_utils import LengthGroupedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_pytorch import OPTIMIZERS, adamw, read_shard  # noqa: E402


def trainer_param_groups(model, weight_decay):
    """The two parameter groups transformers' Trainer.create_optimizer makes: weight decay
    on the parameters Trainer.get_decay_parameter_names returns (not biases, not LayerNorm
    or other norm weights), none on the rest."""
    from transformers import Trainer
    decay = set(Trainer.get_decay_parameter_names(None, model))  # uses no Trainer state
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if n in decay], "weight_decay": weight_decay},
            {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]


def budget_batches(lengths, max_tokens, seed, pool_batches=100):
    """nightshift's token-budget PlanEpoch (world size 1): a shuffled order, pools of
    samples holding at least pool_batches x max_tokens tokens each sorted by length (stable),
    cut into batches of at most max_tokens padded tokens (a sample longer than the budget is
    a batch alone), the batches shuffled."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches, pool, tokens = [], [], 0
    for k, i in enumerate(order):
        pool.append(i)
        tokens += lengths[i]
        if tokens >= max_tokens * pool_batches or k + 1 == len(order):
            batch = []
            for j in sorted(pool, key=lambda j: lengths[j]):
                if batch and (len(batch) + 1) * max(lengths[j], 1) > max_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(j)
            if batch:
                batches.append(batch)
            pool, tokens = [], 0
    rng.shuffle(batches)
    return batches


def collate(rows, pad_id):
    longest = max(len(t) for t, _ in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    for i, (t, _) in enumerate(rows):
        ids[i, :len(t)] = torch.as_tensor(t)
    return ids, (ids != pad_id).long(), torch.tensor([y for _, y in rows]), sum(len(t) for t, _ in rows)


def accuracy(model, data, pad_id, batch_size=32):
    """Accuracy on `data` (ids, label), in length order, batch_size rows at a time."""
    model.eval()
    order = sorted(range(len(data)), key=lambda i: len(data[i][0]))
    correct = 0
    with torch.no_grad():
        for k in range(0, len(order), batch_size):
            ids, mask, y, _ = collate([data[i] for i in order[k:k + batch_size]], pad_id)
            correct += int((model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == y).sum())
    model.train()
    return correct / max(len(data), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the Hugging Face folder")
    ap.add_argument("--data", required=True, help="folder with train.shard (nightshift-prepare --pretrained)")
    ap.add_argument("--batching", choices=["fixed", "grouped", "budget"], default="fixed")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=8192, help="--batching budget: padded tokens per batch")
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--max-samples", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--skip-steps", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--eval", action="store_true", help="accuracy on DATA/val.shard after training (not timed)")
    ap.add_argument("--optimizer", default="fused", choices=sorted(OPTIMIZERS),
                    help="AdamW's implementation: fused=True (Trainer's default, adamw_torch_fused), foreach, single")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    samples, labels, _, ncls = read_shard(os.path.join(a.data, "train.shard"))
    samples = [t[:a.max_len] for t in samples]
    if a.max_samples:
        samples, labels = samples[:a.max_samples], labels[:a.max_samples]
    data = list(zip(samples, labels.tolist()))
    pad_id = json.load(open(os.path.join(a.data, "meta.json")))["pad_id"]
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=ncls, attn_implementation="sdpa",
                                                               ignore_mismatched_sizes=True)
    run = torch.compile(model, dynamic=True) if a.compile else model
    lengths = [len(t) for t in samples]
    if a.batching == "fixed":
        order = torch.randperm(len(data)).tolist()
        batches = [order[i:i + a.batch_size] for i in range(0, len(order), a.batch_size)]
    elif a.batching == "grouped":
        order = list(LengthGroupedSampler(a.batch_size, lengths=lengths))
        batches = [order[i:i + a.batch_size] for i in range(0, len(order), a.batch_size)]
    else:
        batches = budget_batches(lengths, a.max_tokens, a.seed)
    total = min(len(batches), a.max_steps) if a.max_steps else len(batches)
    opt, opt_name = adamw(trainer_param_groups(model, 0.01), a.lr, 0.01, a.optimizer)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (total - s) / max(1, total - a.warmup)))
    model.train()
    tokens = padded = 0
    t_all = time.perf_counter()
    t0 = t_all
    for step, batch in enumerate(batches[:total]):
        if step == a.skip_steps:
            tokens, padded, t0 = 0, 0, time.perf_counter()
        ids, mask, y, n = collate([data[i] for i in batch], pad_id)
        loss = F.cross_entropy(run(input_ids=ids, attention_mask=mask).logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        tokens += n
        padded += ids.numel()
    seconds = time.perf_counter() - t0
    result = {"who": "transformers" + ("+compile" if a.compile else ""), "batching": a.batching,
              "steps": total - a.skip_steps, "seconds": round(seconds, 2),
              "tokens_per_second": round(tokens / seconds, 1), "padding_efficiency": round(tokens / max(padded, 1), 4),
              "epoch_seconds": round(time.perf_counter() - t_all, 2), "loss": float(loss.detach()),
              "optimizer": opt_name + ", Trainer's groups: weight decay 0.01 except biases and norms"}
    if a.batching == "budget":
        result["max_tokens"] = a.max_tokens
    if a.eval:
        val, yval, _, _ = read_shard(os.path.join(a.data, "val.shard"))
        result["val_accuracy"] = round(accuracy(model, [(t[:a.max_len], y) for t, y in zip(val, yval.tolist())],
                                                pad_id), 4)
        result["val_samples"] = len(val)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

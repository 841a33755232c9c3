#!/usr/bin/env python3
"""transformers' side of bench/hf_bench.py: fine-tuning a Hugging Face folder
(AutoModelForSequenceClassification, SDPA attention, the folder's dropout) with
PyTorch 2.14.1 from the project's virtual environment, on the token shards that
nightshift-prepare wrote with the folder's tokenizer (so both sides see the same ids),
with AdamW, linear warm-up and decay and gradient clipping as nightshift-trainer does.

  --batching fixed     DataLoader(batch_size, shuffle=True), each batch padded to its longest;
  --batching grouped   transformers' group_by_length (Trainer's LengthGroupedSampler):
                       mega-batches of 50 x batch_size sorted by length, cut in batch_size;
  --compile            torch.compile(model, dynamic=True); --skip-steps leaves compilation
                       out of the timing.

Prints one JSON line: steps, seconds, real tokens per second, epoch seconds.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from transformers import AutoModelForSequenceClassification
from transformers.trainer_pt_utils import LengthGroupedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_pytorch import read_shard  # noqa: E402


def collate(rows, pad_id):
    longest = max(len(t) for t, _ in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    for i, (t, _) in enumerate(rows):
        ids[i, :len(t)] = torch.as_tensor(t)
    return ids, (ids != pad_id).long(), torch.tensor([y for _, y in rows]), sum(len(t) for t, _ in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the Hugging Face folder")
    ap.add_argument("--data", required=True, help="folder with train.shard (nightshift-prepare --pretrained)")
    ap.add_argument("--batching", choices=["fixed", "grouped"], default="fixed")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--max-samples", type=int, default=0)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--skip-steps", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
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
    if a.batching == "fixed":
        order = torch.randperm(len(data)).tolist()
    else:
        order = list(LengthGroupedSampler(a.batch_size, lengths=[len(t) for t in samples]))
    batches = [order[i:i + a.batch_size] for i in range(0, len(order), a.batch_size)]
    total = min(len(batches), a.max_steps) if a.max_steps else len(batches)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (total - s) / max(1, total - a.warmup)))
    model.train()
    tokens = 0
    t_all = time.perf_counter()
    t0 = t_all
    for step, batch in enumerate(batches[:total]):
        if step == a.skip_steps:
            tokens, t0 = 0, time.perf_counter()
        ids, mask, y, n = collate([data[i] for i in batch], pad_id)
        loss = F.cross_entropy(run(input_ids=ids, attention_mask=mask).logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        tokens += n
    seconds = time.perf_counter() - t0
    print(json.dumps({"who": "transformers" + ("+compile" if a.compile else ""), "batching": a.batching,
                      "steps": total - a.skip_steps, "seconds": round(seconds, 2),
                      "tokens_per_second": round(tokens / seconds, 1),
                      "epoch_seconds": round(time.perf_counter() - t_all, 2), "loss": float(loss)}))


if __name__ == "__main__":
    main()

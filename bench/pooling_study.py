#!/usr/bin/env python3
"""model.pooling cls against mean for transformer_classifier (issue 27): validation accuracy
and training speed side by side, alternating runs in one invocation, on two tasks:

- spamassassin: whole mails (max_len 256, 1 epoch), the demo's task;
- subjects: the same corpus's Subject lines alone, a short-text task (max_len 32, 3 epochs).

Both with the spec's defaults otherwise (2 layers, d_model 128, 4 heads, batch 32, lr 1e-3,
warm-up 100), two seeds each.

  bench/pooling_study.py --build build [--seeds 1234,1235]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_bench import ROOT, prepare, run_trainer  # noqa: E402


def subjects_jsonl(path):
    """One {"text", "label"} line per mail with a Subject header (its first line)."""
    corpus = os.path.join(ROOT, "data/spamassassin")
    n = 0
    with open(path, "w") as out:
        for label in ("ham", "spam"):
            folder = os.path.join(corpus, label)
            for name in sorted(os.listdir(folder)):
                head = open(os.path.join(folder, name), "rb").read(65536).decode("utf-8", errors="replace")
                m = re.search(r"^Subject:[ \t]*(.*)$", head, re.MULTILINE | re.IGNORECASE)
                if m and m.group(1).strip():
                    out.write(json.dumps({"text": m.group(1).strip(), "label": label}) + "\n")
                    n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench/.work"))
    ap.add_argument("--seeds", default="1234,1235")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    subjects = os.path.join(args.work, "subjects.jsonl")
    print("subjects:", subjects_jsonl(subjects), "mails with a Subject line", flush=True)
    tasks = {
        "spamassassin": dict(max_len=256, epochs=1,
                             data=prepare(args.build, os.path.join(args.work, "pool-spam-256"), 256),
                             dir=os.path.join(args.work, "pool-spam-256")),
        "subjects": dict(max_len=32, epochs=3,
                         data=prepare(args.build, os.path.join(args.work, "pool-subjects-32"), 32, path=subjects,
                                      extra=["--format", "jsonl", "--label-field", "label"]),
                         dir=os.path.join(args.work, "pool-subjects-32")),
    }
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for task, t in tasks.items():
            for seed in [int(s) for s in args.seeds.split(",")]:
                for pooling in ("cls", "mean"):
                    model = {"arch": "transformer_classifier", "pooling": pooling, "max_len": t["max_len"]}
                    r = run_trainer(args.build, t["dir"], t["data"], tmp, f"{task}-{pooling}-{seed}",
                                    max_len=t["max_len"], epochs=t["epochs"], seed=seed, model=model)
                    r.update(task=task, pooling=pooling, seed=seed)
                    print(json.dumps(r), flush=True)
                    results.append(r)
    print("\n| task | pooling | val_accuracy (per seed) | mean | train s (mean) | tokens/s (mean) |")
    print("|---|---|---|---|---|---|")
    for task in tasks:
        for pooling in ("cls", "mean"):
            rs = [r for r in results if r["task"] == task and r["pooling"] == pooling]
            accs = [r["val_accuracy"] for r in rs]
            print(f"| {task} | {pooling} | {', '.join(f'{a:.4f}' for a in accs)} | {statistics.mean(accs):.4f} | "
                  f"{statistics.mean(r['train_seconds'] for r in rs):.1f} | "
                  f"{statistics.mean(r['tokens_per_second'] for r in rs):.0f} |")


if __name__ == "__main__":
    main()

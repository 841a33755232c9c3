#!/usr/bin/env python3
"""A fine-tuned job's model, downloaded with `nightshift job artifacts`, in transformers:
AutoModelForSequenceClassification and AutoTokenizer load it, its labels are the data's
(ham, spam), and its logits on mails of the corpus equal `nightshift predict`'s within 1e-4
(the same labels too).

  pretrained_check.py BIN_DIR CORPUS_DIR MODEL_DIR...
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def mails(corpus, n):
    paths = sorted(os.path.join(root, f) for root, _, files in os.walk(corpus) for f in files)
    return [open(p, "rb").read().decode("utf-8", errors="replace") for p in paths[:: max(1, len(paths) // n)][:n]]


def ours(bin_dir, folder, texts, tmp):
    path = os.path.join(tmp, "inputs.jsonl")
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    p = subprocess.run([os.path.join(bin_dir, "nightshift-predict"), "--model", folder, "--jsonl", path, "-o", "json",
                        "--logits", "--device", "cpu"], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"nightshift-predict on {folder}: exit {p.returncode}: {p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines()]


def check(bin_dir, folder, texts, tmp):
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if labels != ["ham", "spam"]:
        fail(f"{folder}: id2label gives {labels}, not the data's [ham, spam]")
    max_len = json.load(open(os.path.join(folder, "config.json")))["max_len"]
    rows = ours(bin_dir, folder, texts, tmp)
    if len(rows) != len(texts):
        fail(f"{folder}: {len(rows)} predictions for {len(texts)} texts")
    worst = 0.0
    for text, row in zip(texts, rows):
        enc = tok(text, truncation=True, max_length=max_len, return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc).logits[0]
        diff = (logits - torch.tensor(row["logits"])).abs().max().item()
        worst = max(worst, diff)
        if diff > 1e-4:
            fail(f"{folder}: logits differ by {diff:.3g} on {text[:60]!r}: {logits.tolist()} vs {row['logits']}")
        if labels[int(logits.argmax())] != row["label"]:
            fail(f"{folder}: transformers says {labels[int(logits.argmax())]}, nightshift predict {row['label']}")
    print(f"ok {folder}: {len(texts)} mails, logits within {worst:.2g}")


def main():
    bin_dir, corpus, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
    texts = mails(corpus, 24)
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            check(bin_dir, folder, texts, tmp)


if __name__ == "__main__":
    main()

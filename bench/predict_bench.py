#!/usr/bin/env python3
"""Predict throughput: nightshift-predict (C++) against the Python package, the same
model folder and the same texts, on the CPU, alternating runs.

  bench/predict_bench.py [--build build] [--model DIR] [--samples 1000] [--threads 2] [--pairs 3]

Without --model it writes a folder of the demo's shape (deploy/examples/spam-classifier.yaml:
2 layers, d_model 128, 4 heads, ffn 512, max_len 512, an 8000-piece tokenizer trained on
data/spamassassin by nightshift-prepare) with random weights: throughput does not depend
on the weights. Texts: the first --samples mails of data/spamassassin. Each run is a fresh
process that loads the folder and classifies every text (batched to 8192 padded tokens
both sides); samples/s counts the whole run
(start, load, tokenize, forward, print).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "predict"))
sys.path.insert(0, os.path.join(ROOT, "python"))

PY_RUN = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[3]))
t0 = time.perf_counter()
import nightshift
m = nightshift.load(sys.argv[1])
texts = [json.loads(l)["text"] for l in open(sys.argv[2])]
out = m.predict(texts)
print(len(out), file=sys.stderr)
"""


def demo_folder(build, tmp):
    import folder_util
    data = os.path.join(tmp, "prep")
    subprocess.run([os.path.join(build, "bin", "nightshift-prepare"), "--path", os.path.join(ROOT, "data/spamassassin"),
                    "--vocab-size", "8000", "--max-len", "512", "--output-dir", data, "--threads", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    meta = json.load(open(os.path.join(data, "meta.json")))
    folder = os.path.join(tmp, "model")
    folder_util.write_folder(folder, "transformer_classifier", os.path.join(data, "tokenizer.model"), meta["vocab_size"],
                             labels=meta["class_names"], layers=2, d_model=128, heads=4, ffn=512, max_len=512)
    return folder


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--predict", default="", help="the binary (default BUILD/bin/nightshift-predict)")
    ap.add_argument("--model", default="")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    binary = a.predict or os.path.join(a.build, "bin", "nightshift-predict")
    python = os.path.join(os.environ.get("NIGHTSHIFT_VENV", "/opt/nightshift/venv"), "bin", "python")
    with tempfile.TemporaryDirectory(prefix="nightshift-predict-bench-") as tmp:
        folder = a.model or demo_folder(a.build, tmp)
        files = sorted(glob.glob(os.path.join(ROOT, "data/spamassassin/*/*")))[: a.samples]
        inputs = os.path.join(tmp, "texts.jsonl")
        with open(inputs, "w") as f:
            for p in files:
                f.write(json.dumps({"text": open(p, "rb").read(512 * 16).decode("utf-8", "replace")}) + "\n")
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), PYTHONPATH=os.path.join(ROOT, "python"))
        runs = {"nightshift-predict": [], "python": []}
        for _ in range(a.pairs):
            for who in runs:
                cmd = ([binary, "--model", folder, "--jsonl", inputs, "-o", "json", "--device", "cpu"] if who != "python"
                       else [python, "-c", PY_RUN, folder, inputs, str(a.threads)])
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
                runs[who].append(len(files) / (time.perf_counter() - t0))
        cpp, py = max(runs["nightshift-predict"]), max(runs["python"])
        print(json.dumps({"samples": len(files), "threads": a.threads, "cpp_samples_per_s": round(cpp, 1),
                          "python_samples_per_s": round(py, 1), "ratio": round(cpp / py, 2),
                          "runs": {k: [round(x, 1) for x in v] for k, v in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()

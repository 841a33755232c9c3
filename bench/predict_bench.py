#!/usr/bin/env python3
"""Predict throughput: nightshift-predict (C++) against the Python package, the same
model folder and the same texts, on the CPU, alternating runs. Model load and per-mail
throughput are reported apart, so the figure is not the start-up of a Python process
(import torch) spread over the mails.

  bench/predict_bench.py [--build build] [--model DIR] [--samples 1000] [--threads 2] [--pairs 3]

Without --model it writes a folder of the demo's shape (deploy/examples/spam-classifier.yaml:
2 layers, d_model 128, 4 heads, ffn 512, max_len 512, an 8000-piece tokenizer trained on
data/spamassassin by nightshift-prepare) with random weights: throughput does not depend
on the weights. Texts: the first --samples mails of data/spamassassin (N), batched to
8192 padded tokens on both sides.

- Python package: one process loads the model once, then classifies mail 1 alone, then
  mails 2..N in one call, each timed in the process: import seconds (torch and
  nightshift), load seconds (nightshift.load), first-mail seconds, and mails/s = (N - 1) /
  the seconds of the second call. "start to first answer": the process's wall time less
  that second call.
- nightshift-predict has no timer of its own for classification, so from outside: one
  process classifying mail 1 alone (wall time t1: start, load, one mail: "start to first
  answer") and one classifying all N (tN); mails/s = (N - 1) / (tN - t1), the time the
  extra mails cost a process that has already loaded the model.

Prints one JSON object: both sides' start-to-first-answer seconds and mails/s (means of
--pairs alternating runs, each run listed), the Python side's import and load seconds, and
the ratio of mails/s.
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
sys.path.insert(0, os.path.join(ROOT, "tests", "worker", "predict"))
sys.path.insert(0, os.path.join(ROOT, "python"))

PY_RUN = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads(int(sys.argv[3]))
import nightshift
t1 = time.perf_counter()
m = nightshift.load(sys.argv[1])
t2 = time.perf_counter()
texts = [json.loads(l)["text"] for l in open(sys.argv[2])]
m.predict(texts[:1])
t3 = time.perf_counter()
out = m.predict(texts[1:])
t4 = time.perf_counter()
assert len(out) == len(texts) - 1
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "first_s": t3 - t2, "rest_s": t4 - t3}))
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
        if len(files) < 2:
            sys.exit("predict_bench: needs at least 2 mails (scripts/fetch-data.sh)")
        inputs, first = os.path.join(tmp, "texts.jsonl"), os.path.join(tmp, "first.jsonl")
        with open(inputs, "w") as f:
            for p in files:
                f.write(json.dumps({"text": open(p, "rb").read(512 * 16).decode("utf-8", "replace")}) + "\n")
        with open(inputs) as f, open(first, "w") as g:
            g.write(f.readline())
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), PYTHONPATH=os.path.join(ROOT, "python"))
        n = len(files)

        def wall(cmd):
            t0 = time.perf_counter()
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                 text=True).stdout
            return time.perf_counter() - t0, out

        def cpp(jsonl):
            return wall([binary, "--model", folder, "--jsonl", jsonl, "-o", "json", "--device", "cpu"])[0]

        # One untimed run of each first: the first process to map LibTorch (and torch's
        # libraries) reads them from disk, which would land in the first t1 alone.
        cpp(first)
        wall([python, "-c", PY_RUN, folder, first, str(a.threads)])
        runs = {"cpp": [], "python": []}
        for _ in range(a.pairs):
            t1, tn = cpp(first), cpp(inputs)
            runs["cpp"].append({"first_answer_s": t1, "all_s": tn, "mails_per_s": (n - 1) / max(tn - t1, 1e-9)})
            seconds, out = wall([python, "-c", PY_RUN, folder, inputs, str(a.threads)])
            r = json.loads(out.strip().splitlines()[-1])
            r.update(process_s=seconds, first_answer_s=seconds - r["rest_s"], mails_per_s=(n - 1) / r["rest_s"])
            runs["python"].append(r)

        def mean(who, key):
            return sum(r[key] for r in runs[who]) / len(runs[who])

        rounded = {who: [{k: round(v, 3) for k, v in r.items()} for r in rs] for who, rs in runs.items()}
        print(json.dumps({
            "samples": n, "threads": a.threads, "pairs": a.pairs,
            "cpp_first_answer_s": round(mean("cpp", "first_answer_s"), 3),
            "cpp_mails_per_s": round(mean("cpp", "mails_per_s"), 1),
            "python_first_answer_s": round(mean("python", "first_answer_s"), 3),
            "python_import_s": round(mean("python", "import_s"), 3),
            "python_load_s": round(mean("python", "load_s"), 3),
            "python_mails_per_s": round(mean("python", "mails_per_s"), 1),
            "mails_per_s_ratio": round(mean("cpp", "mails_per_s") / mean("python", "mails_per_s"), 2),
            "runs": rounded}, indent=1))

if __name__ == "__main__":
    main()

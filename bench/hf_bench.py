#!/usr/bin/env python3
"""Fine-tuning a BERT of MiniLM's sizes (6 layers, 384 wide, 12 heads, feed-forward 1536,
vocabulary 30,522; random weights and a WordPiece tokenizer trained on the corpus, made by
tests/support/hf_folders.py: no download) on SpamAssassin at max_len 256 (issue 27):
nightshift-trainer (model.pretrained) against transformers (bench/baseline_transformers.py,
SDPA attention, eager and torch.compile, the optimizer transformers' Trainer builds by
default: AdamW fused=True, no weight decay on biases and norms) on the same token ids, 2
threads, runs alternating in one invocation.

- fixed: batch 32 on both sides, --steps timed steps after 2 (eager) or 3 (compile) warm-up
  steps: real tokens per second, peak resident memory (/usr/bin/time's maximum RSS), MFU
  (the model's nominal training FLOPs, 6 x non-embedding parameters + 12 x layers x width x
  row length per token, the whole last layer counted for both sides although nightshift
  computes it at the first position only, over the GEMM peak nightshift-trainer measured);
- epoch: one epoch of --epoch-samples mails, nightshift with a token budget (--budget,
  default 32 x 256) against transformers with Trainer's group_by_length at batch 32:
  seconds of training steps (nightshift's step times, without its final evaluation and
  export), and the validation accuracy of both on the same rows (the folder's val.shard);
- varied: texts of varied length (bench/.work/spam-varied.jsonl: each mail's Subject and a
  prefix of its body of a random length, log-uniform from 64 to 8,192 characters, so short
  and long texts mixed, about a third cut at max_len), --epoch-samples of them, one epoch
  with a token budget of --budget padded tokens on both sides: nightshift's max_tokens
  against baseline_transformers.py --batching budget (the trainer's token-budget plan
  mirrored: length-sorted pools cut to the budget), and Trainer's group_by_length at batch
  32 for reference; seconds, real tokens/s, padding efficiency, validation accuracy on the
  same rows.

  bench/hf_bench.py --build build [--steps 8] [--repeats 2] [--epoch-samples 800] [--only fixed,epoch,varied]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_bench import ROOT, VENV_PYTHON, prepare, run_trainer  # noqa: E402

LAYERS, WIDTH, HEADS, FFN, VOCAB, MAX_LEN, BATCH = 6, 384, 12, 1536, 30522, 256, 32


def timed(cmd, **kw):
    """Runs cmd under /usr/bin/time; returns (stdout, peak RSS bytes)."""
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + p.stderr[-3000:])
    return p.stdout, int(re.findall(r"MAXRSS (\d+)", p.stderr)[-1]) * 1024


def nominal_flops_per_token(row_len):
    non_embedding = LAYERS * (4 * WIDTH * WIDTH + 2 * WIDTH * FFN + 9 * WIDTH + FFN) + WIDTH * WIDTH + WIDTH
    return 6 * non_embedding + 12 * LAYERS * WIDTH * row_len


def varied_jsonl(path, seed=0):
    """{"text": "Subject: ...\\n" + a prefix of the body, "label": ham or spam} per mail with
    a body; the prefix's length in characters is log-uniform in [64, 8192] (whole bodies
    shorter than that stay whole). Lines in a seeded random order, so that any first N
    (nightshift-prepare --max-samples) hold both classes."""
    if os.path.exists(path):
        return
    import email
    import math
    import random
    corpus = os.path.join(ROOT, "data", "spamassassin")
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(corpus) for f in fs if f.endswith(".txt"))
    rng = random.Random(seed)
    lines = []
    for p in files:
        raw = open(p, "rb").read().decode("utf-8", errors="replace")
        subject = " ".join((email.message_from_string(raw).get("Subject") or "").split())
        parts = re.split(r"\r?\n\r?\n", raw, maxsplit=1)
        body = parts[1].strip() if len(parts) == 2 else ""
        chars = int(math.exp(rng.uniform(math.log(64), math.log(8192))))
        if body:
            lines.append(json.dumps({"text": "Subject: " + subject + "\n" + body[:chars],
                                     "label": os.path.basename(os.path.dirname(p))}))
    rng.shuffle(lines)
    with open(path + ".tmp", "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def ours(build, folder, data_dir, meta, tmp, name, **kw):
    model = {"pretrained": folder, "max_len": MAX_LEN}
    return run_trainer(build, data_dir, meta, tmp, name, max_len=MAX_LEN, model=model, lr=5e-5, warmup=10,
                    trainer=os.path.join(tmp, "timed-trainer"), **kw)


def theirs(folder, data_dir, *args):
    out, rss = timed([VENV_PYTHON, os.path.join(ROOT, "bench", "baseline_transformers.py"), "--model", folder,
                      "--data", data_dir, "--max-len", str(MAX_LEN), "--batch-size", str(BATCH), *args])
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_bytes"] = rss
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench/.work"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--epoch-samples", type=int, default=800)
    ap.add_argument("--only", default="fixed,epoch,varied")
    ap.add_argument("--folder", default="",
                    help="a Hugging Face folder of these sizes to fine-tune instead of the random one (a real "
                         "checkpoint: see RESULTS); give it its own --work")
    ap.add_argument("--varied-baselines", default="budget,grouped",
                    help="transformers' batchings in the varied runs: budget (ours mirrored), grouped (group_by_length)")
    ap.add_argument("--seed", type=int, default=1234,
                    help="repeat k runs both sides with seed + k (initialisation of the head, dropout, order)")
    ap.add_argument("--budget", type=int, default=BATCH * MAX_LEN,
                    help="nightshift's max_tokens in the epoch and varied runs (and transformers' in varied)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    folder = os.path.abspath(a.folder) if a.folder else os.path.join(a.work, "minilm", "bert")
    if not os.path.exists(os.path.join(folder, "config.json")):
        subprocess.run([VENV_PYTHON, os.path.join(ROOT, "tests", "support", "hf_folders.py"), os.path.join(a.work, "minilm"),
                        os.path.join(ROOT, "data", "spamassassin"), "--kinds", "bert", "--vocab", str(VOCAB),
                        "--hidden", str(WIDTH), "--layers", str(LAYERS), "--heads", str(HEADS), "--ffn", str(FFN)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data_dir = os.path.join(a.work, "minilm-256")
    meta = prepare(a.build, data_dir, MAX_LEN, extra=["--pretrained", folder])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        # nightshift-trainer under /usr/bin/time, so both sides' peak RSS is measured alike.
        wrapper = os.path.join(tmp, "timed-trainer")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/time -f 'MAXRSS %M' -o " + tmp + "/rss " +
                    os.path.join(a.build, "bin", "nightshift-trainer") + ' "$@"\n')
        os.chmod(wrapper, 0o755)

        def rss():
            return int(re.findall(r"MAXRSS (\d+)", open(os.path.join(tmp, "rss")).read())[-1]) * 1024

        for rep in range(a.repeats):
            seed = a.seed + rep
            if "fixed" in a.only:
                r = ours(a.build, folder, data_dir, meta, tmp, f"fixed-{rep}", batch_size=BATCH,
                         max_steps=a.steps + 2, skip_steps=2)
                r.update(who="nightshift", mode="fixed", peak_rss_bytes=rss())
                results.append(r)
                print(json.dumps(r), flush=True)
                for extra, skip in (([], 2), (["--compile"], 3)):
                    r = theirs(folder, data_dir, "--max-steps", str(a.steps + skip), "--skip-steps", str(skip),
                               "--lr", "5e-5", *extra)
                    r["mode"] = "fixed"
                    results.append(r)
                    print(json.dumps(r), flush=True)
            if "epoch" in a.only:
                epoch_dir = os.path.join(a.work, f"minilm-256-{a.epoch_samples}")
                epoch_meta = prepare(a.build, epoch_dir, MAX_LEN, max_samples=a.epoch_samples,
                                     extra=["--pretrained", folder])
                r = ours(a.build, folder, epoch_dir, epoch_meta, tmp, f"epoch-{rep}", max_tokens=str(a.budget),
                         seed=seed)
                r.update(who="nightshift", mode="epoch", epoch_seconds=r["train_seconds"], peak_rss_bytes=rss(),
                         seed=seed)
                results.append(r)
                print(json.dumps(r), flush=True)
                r = theirs(folder, epoch_dir, "--batching", "grouped", "--lr", "5e-5", "--eval", "--seed", str(seed))
                r.update(mode="epoch", seed=seed)
                results.append(r)
                print(json.dumps(r), flush=True)
            if "varied" in a.only:
                jsonl = os.path.join(a.work, "spam-varied.jsonl")
                varied_jsonl(jsonl)
                varied_dir = os.path.join(a.work, f"minilm-256-varied-{a.epoch_samples}")
                varied_meta = prepare(a.build, varied_dir, MAX_LEN, max_samples=a.epoch_samples, path=jsonl,
                                      extra=["--pretrained", folder, "--format", "jsonl", "--text-field", "text",
                                             "--label-field", "label"])
                r = ours(a.build, folder, varied_dir, varied_meta, tmp, f"varied-{rep}", max_tokens=str(a.budget),
                         seed=seed)
                r.update(who="nightshift", mode="varied", epoch_seconds=r["train_seconds"], peak_rss_bytes=rss(),
                         seed=seed)
                results.append(r)
                print(json.dumps(r), flush=True)
                for batching in a.varied_baselines.split(","):
                    r = theirs(folder, varied_dir, "--batching", batching, "--max-tokens", str(a.budget),
                               "--lr", "5e-5", "--eval", "--seed", str(seed))
                    grouped = " (group_by_length)" if batching == "grouped" else ""
                    r.update(mode="varied", who="transformers" + grouped, seed=seed)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    peak = max((r.get("peak_gflops") or 0) for r in results if r["who"] == "nightshift") * 1e9

    def mean(who, mode, key):
        vs = [r[key] for r in results if r["who"] == who and r["mode"] == mode and r.get(key) is not None]
        return sum(vs) / len(vs) if vs else float("nan")

    print(f"\nGEMM peak measured by nightshift-trainer: {peak / 1e9:.1f} GFLOP/s. MFU: nominal FLOPs (the whole "
          "last layer counted for both sides; nightshift computes it at the first position only), fixed mode only.")
    opts = sorted({r["optimizer"] for r in results if r.get("optimizer")})
    print("transformers' optimizer: " + "; ".join(opts))
    print("| mode | who | tokens/s | vs transformers eager | MFU | peak RSS (MiB) | epoch s | padding eff. | val acc |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in ("fixed", "epoch", "varied"):
        base = mean("transformers", mode, "tokens_per_second")
        base_epoch = mean("transformers", mode, "epoch_seconds")
        for who in ("nightshift", "transformers", "transformers+compile", "transformers (group_by_length)"):
            tps = mean(who, mode, "tokens_per_second")
            if tps != tps:
                continue
            mfu = tps * nominal_flops_per_token(MAX_LEN) / peak if peak and mode == "fixed" else float("nan")
            ep = mean(who, mode, "epoch_seconds")
            ratio = f"{tps / base:.2f}x" if mode == "fixed" else f"{ep / base_epoch:.2f}x the time"
            rss = mean(who, mode, "peak_rss_bytes") / 2**20
            print(f"| {mode} | {who} | {tps:.0f} | {ratio} | {mfu:.2f} | {rss:.0f} | {ep:.1f} "
                  f"| {mean(who, mode, 'padding_efficiency'):.3f} | {mean(who, mode, 'val_accuracy'):.4f} |")

    print("\nvalidation accuracy per seed (the same rows on both sides):")
    for mode in ("epoch", "varied"):
        for who in ("nightshift", "transformers", "transformers (group_by_length)"):
            accs = [f"{r['seed']}: {r['val_accuracy']:.4f}" for r in results
                    if r["who"] == who and r["mode"] == mode and r.get("val_accuracy") is not None]
            if accs:
                print(f"  {mode} {who}: " + ", ".join(accs))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sharded AdamW (issue 43, resources.sharding: optimizer) against unsharded data
parallelism and PyTorch's own, two ranks on this machine (Gloo on 127.0.0.1): the 210M
Llama-layout model of bench/lora_bench.py (random weights saved by transformers) fully
fine-tuned as a causal LM on SpamAssassin in packed rows of 512 tokens, --budget tokens per
rank and step, float32, --threads per rank, grad_clip 1.0, the two ranks as torchrun
would start them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):

- nightshift-trainer, resources.sharding none (DDP: all-reduced gradient buckets, fused AdamW);
- nightshift-trainer, resources.sharding optimizer (reduce-scatter, sharded fused AdamW,
  all-gather);
- nightshift-trainer, resources.sharding full (each block gathered around its forward and
  again for its backward, gradients reduce-scattered per block), and with every block
  activation-checkpointed (full-ac);
- PyTorch: transformers' model in DistributedDataParallel with fused AdamW whole, and with
  ZeroRedundancyOptimizer(AdamW fused), and in FSDP2 (fully_shard per layer, fused AdamW)
  with and without activation checkpointing (bench/baseline_zero.py);
- with --only lora-none,lora-full: a LoRA adapter (r 16, all-linear) on the base kept in
  bf16 (model.base_precision, from the float32 folder: a private copy per rank), bf16
  autocast, unsharded and with sharding full, which cuts the frozen base's blocks too.

Each: --steps timed steps after 2 warm-up steps; tokens per second of both ranks together,
each rank's peak resident memory (/usr/bin/time's maximum RSS) and the optimizer state
each rank holds (what the trainer's start event reports; PyTorch's from its state dict).

With --precision bf16 the full fine-tunes run under bf16 autocast (ours: the blocks'
projections gathered as bf16 compute copies under sharding full) and PyTorch's with its
AMP (DDP) or FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32).

With --accumulate N each of our steps takes N batches of --budget tokens per rank
(train.accumulate_steps; PyTorch's runs take one); full-whole and full-sharded are full
with resources.accumulate_gradients whole (the blocks' gradients summed whole between a
step's batches, reduce-scattered once) and sharded (reduce-scattered at every batch).

With --scratch our runs train model.arch gpt_lm from scratch instead (GPT-2 blocks, 16 x
d_model 1024, ffn 4096, rows padded) and PyTorch's are skipped:
for the memory a model from scratch takes before step 1.

  bench/sharding_bench.py [--bin build/bin] [--steps 4] [--budget 1024] [--threads 1] [--precision fp32]
                          [--accumulate 1]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_bench as db  # noqa: E402
from lora_bench import llama210m  # noqa: E402  (sets decoder_bench's sizes to the 210M model's)
from trainer_bench import VENV_PYTHON  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_ranks(cmd, tmp, name):
    """Runs cmd as ranks 0 and 1 under /usr/bin/time; returns (stdouts, peak RSS bytes)."""
    port = free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        rss = os.path.join(tmp, f"{name}-{rank}.rss")
        procs.append((subprocess.Popen(["/usr/bin/time", "-f", "MAXRSS %M", "-o", rss] + cmd, env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), rss))
    outs, peaks = [], []
    for p, rss in procs:
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"{name}: a rank exited with {p.returncode}")
        outs.append(out)
        peaks.append(int(open(rss).read().split("MAXRSS ")[-1].split()[0]) * 1024)
    return outs, peaks


def ours(binary, folder, data, meta, tmp, sharding, a, ac=False, lora=False, accumulate_gradients="auto"):
    model = {"pretrained": folder, "max_len": db.MAX_LEN, "task": "causal_lm"}
    if a.scratch:
        model = {"arch": "gpt_lm", "layers": 16, "d_model": 1024, "heads": 16, "ffn": 4096, "max_len": db.MAX_LEN}
    if lora:
        model.update(adapter={"type": "lora", "r": 16, "alpha": 32, "target_modules": "all-linear"},
                     base_precision="bf16")
    spec = {"name": "sharding-" + sharding,
            "model": model,
            "train": {"epochs": 1, "optimizer": "adamw", "lr": 5e-5, "weight_decay": 0.01, "warmup_steps": 2,
                      "batching": {"max_tokens": str(a.budget), "rows": "padded" if a.scratch else "packed"},
                      "precision": "bf16" if lora else a.precision,
                      "grad_clip": 1.0, "max_steps": str(a.steps + 2), "threads": a.threads,
                      "activation_checkpointing": "full" if ac else "none", "accumulate_steps": a.accumulate},
            "data": {"path": data},
            "resources": {"world_size": 2, "sharding": sharding, "accumulate_gradients": accumulate_gradients},
            "checkpoint": {"every_steps": 0, "every_seconds": 0, "keep_last": 1}}
    ckpt = tempfile.mkdtemp(dir=tmp)
    cfg = {"job_id": "sharding-" + sharding, "attempt": 0, "spec": spec, "checkpoint_dir": ckpt,
           "data": dict(meta, num_classes=0, train_shard=os.path.join(data, "train.shard"),
                        val_shard=os.path.join(data + "-val", "val.shard"))}
    name = ("lora-" if lora else "") + sharding + ("-ac" if ac else "") + \
        ("" if accumulate_gradients == "auto" else "-" + accumulate_gradients)
    path = os.path.join(tmp, f"sharding-{name}.json")
    json.dump(cfg, open(path, "w"))
    outs, peaks = two_ranks([binary, "--config", path], tmp, "ours-" + name)
    tokens = seconds = 0.0
    state, model_state, start_peak = [], [], []
    for out in outs:
        rank_tokens = rank_seconds = 0.0
        for line in out.splitlines():
            ev = json.loads(line)
            if ev["event"] == "start":
                state.append(int(ev["optimizer_state_bytes"]))
                model_state.append(int(ev["parameter_bytes"] + ev["gradient_bytes"] + ev["optimizer_state_bytes"]))
                start_peak.append(int(ev.get("host_peak_bytes", 0)))
            elif ev["event"] == "step" and ev["step"] > 2:
                rank_seconds += ev["step_seconds"]
                rank_tokens += ev["tokens_per_second"] * ev["step_seconds"]
        tokens += rank_tokens
        seconds = max(seconds, rank_seconds)
    return {"who": "nightshift", "sharding": sharding + ("+ac" if ac else ""), "accumulate_steps": a.accumulate,
            "accumulate_gradients": accumulate_gradients,
            "setting": "lora r16 all-linear, base bf16, bf16 autocast" if lora else
                       ("gpt_lm from scratch, " if a.scratch else "full fine-tune, ") + a.precision,
            "tokens_per_second": round(tokens / seconds, 1),
            "peak_rss_bytes_per_rank": peaks, "optimizer_state_bytes_per_rank": state,
            "model_state_bytes_per_rank": model_state, "peak_rss_before_step_1_per_rank": start_peak}


def theirs(folder, data, tmp, zero, a, ac=False):
    cmd = [VENV_PYTHON, os.path.join(db.ROOT, "bench", "baseline_zero.py"), "--model", folder, "--data", data,
           "--max-len", str(db.MAX_LEN), "--budget", str(a.budget), "--max-steps", str(a.steps + 2),
           "--skip-steps", "2", "--zero", zero, "--threads", str(a.threads)] + (["--ac"] if ac else []) + \
          (["--bf16"] if a.precision == "bf16" else [])
    outs, peaks = two_ranks(cmd, tmp, "pytorch-" + zero + ("-ac" if ac else ""))
    rs = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    return {"who": rs[0]["who"], "tokens_per_second": round(sum(r["tokens_per_second"] for r in rs), 1),
            "peak_rss_bytes_per_rank": peaks, "optimizer_state_bytes_per_rank": [r["optimizer_state_bytes"] for r in rs]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(db.ROOT, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(db.ROOT, "bench/.work"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--budget", type=int, default=2 * db.MAX_LEN)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--scratch", action="store_true")
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--only", default="none,optimizer,full,full-ac,pytorch,pytorch-zero,pytorch-fsdp2,pytorch-fsdp2-ac")
    a = ap.parse_args()
    _, folder, data, _, meta = llama210m(a.work, a.bin)
    binary = os.path.join(os.path.abspath(a.bin), "nightshift-trainer")
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        for key in a.only.split(","):
            if key in ("full-whole", "full-sharded"):
                r = ours(binary, folder, data, meta, tmp, "full", a, accumulate_gradients=key.split("-")[1])
            elif key in ("none", "optimizer", "full", "full-ac", "lora-none", "lora-full"):
                r = ours(binary, folder, data, meta, tmp, key.replace("-ac", "").replace("lora-", ""), a,
                         ac=key.endswith("-ac"), lora=key.startswith("lora-"))
            else:
                zero = {"pytorch": "off", "pytorch-zero": "on", "pytorch-fsdp2": "fsdp2", "pytorch-fsdp2-ac": "fsdp2"}[key]
                r = theirs(folder, data, tmp, zero, a, ac=key.endswith("-ac"))
            r.update(threads_per_rank=a.threads, budget_per_rank=a.budget, steps=a.steps)
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

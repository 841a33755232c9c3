#!/usr/bin/env python3
"""Side-by-side trainer benchmarks (issues 3 and 15): nightshift-trainer against plain
PyTorch 2.14.1 from the project's virtual environment (bench/baseline_pytorch.py, eager
and torch.compile) on the same token shards, the same model, the same thread count,
alternating runs in one invocation.

  bench/trainer_bench.py --build build [--only throughput,short,dynamic,...]

Prints one table, and the raw results as JSON lines. Needs the SpamAssassin corpus
(scripts/fetch-data.sh) and a build (scripts/test.sh or the quickstart).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(os.environ.get("NIGHTSHIFT_VENV", "/opt/nightshift/venv"), "bin", "python")


def prepare(build, out_dir, max_len, vocab=8000, max_samples=0, path=None, extra=()):
    """nightshift-prepare of `path` (default: the SpamAssassin corpus); `extra`: more flags."""
    if os.path.exists(os.path.join(out_dir, "meta.json")):
        return json.load(open(os.path.join(out_dir, "meta.json")))
    cmd = [os.path.join(build, "bin", "nightshift-prepare"), "--path", path or os.path.join(ROOT, "data/spamassassin"),
           "--vocab-size", str(vocab), "--max-len", str(max_len), "--max-samples", str(max_samples),
           "--output-dir", out_dir, "--threads", "2", *extra]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(os.path.join(out_dir, "meta.json")))


def run_trainer(build, data_dir, meta, tmp, name, *, max_len, layers=2, batch_size=32, max_tokens="",
                max_steps=0, epochs=1, precision="fp32", ac="none", threads=2, d_model=128, heads=4, ffn=512,
                progress=True, val_dir=None, warmup=100, seed=1234, lr=1e-3, attention_dropout=0.0, trainer=None,
                model=None, skip_steps=0, rows=""):
    """model: the spec's model section instead of a transformer_classifier of these sizes;
    skip_steps: the first steps are left out of the throughput (warm-up); rows: the spec's
    train.batching.rows (packed or padded; empty: the default)."""
    spec = {"name": name,
            "model": model or {"arch": "transformer_classifier", "layers": layers, "d_model": d_model, "heads": heads,
                               "ffn": ffn, "dropout": 0.1, "attention_dropout": attention_dropout,
                               "max_len": max_len},
            "train": {"epochs": epochs, "optimizer": "adamw", "lr": lr, "weight_decay": 0.01, "warmup_steps": warmup,
                      "seed": str(seed), "batching": {"batch_size": batch_size, "max_tokens": max_tokens, "prefetch": 2},
                      "precision": precision, "grad_clip": 1.0, "activation_checkpointing": ac,
                      "max_steps": str(max_steps), "threads": threads},
            "data": {"path": data_dir},
            "resources": {"world_size": 1},
            "checkpoint": {"every_steps": 0, "every_seconds": 0, "keep_last": 1}}
    if rows:
        spec["train"]["batching"]["rows"] = rows
    data = dict(meta)
    data["train_shard"] = os.path.join(data_dir, "train.shard")
    data["val_shard"] = os.path.join(val_dir or data_dir, "val.shard")  # val_dir: a small one, for timing runs
    cfg = {"job_id": name, "attempt": 0, "spec": spec, "data": data,
           "checkpoint_dir": tempfile.mkdtemp(dir=tmp)}
    path = os.path.join(tmp, name + ".json")
    json.dump(cfg, open(path, "w"))
    env = dict(os.environ)
    if not progress:  # no step records built or written (reporting's own cost)
        env["NIGHTSHIFT_PROGRESS_FD"] = "none"
    t0 = time.perf_counter()
    p = subprocess.run([trainer or os.path.join(build, "bin", "nightshift-trainer"), "--config", path],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    wall = time.perf_counter() - t0
    if not progress:
        if p.returncode != 0:
            raise RuntimeError(name + ": exit %d" % p.returncode)
        return {"who": "nightshift", "name": name, "steps": max_steps, "train_seconds": 0.0, "tokens_per_second": 0.0,
                "padding_efficiency": 0.0, "peak_rss_bytes": 0, "wall_seconds": round(wall, 1), "progress": False}
    tokens = seconds = flops = 0.0
    prev, last_step, done, peak, pad_real, pad_all, device, peak_flops = 0, {}, {}, 0, 0.0, 0.0, "cpu", 0.0
    for line in p.stdout.splitlines():
        ev = json.loads(line)
        if ev["event"] == "step":
            n = ev["step"] - prev
            prev = ev["step"]
            if ev["step"] <= skip_steps:
                continue
            s = ev["step_seconds"] * n
            seconds += s
            tokens += ev["tokens_per_second"] * s
            pad_real += ev["tokens_per_second"] * s
            pad_all += ev["tokens_per_second"] * s / max(ev["padding_efficiency"], 1e-9)
            flops += (ev.get("mfu") or 0.0) * s  # MFU weighted by time: achieved FLOPs / peak
            peak = max(peak, ev.get("memory_peak_bytes", 0))
            device = ev.get("device", "cpu")
            last_step = ev
        elif ev["event"] == "start":
            device = ev.get("device", "cpu")
            peak_flops = ev.get("peak_flops", 0.0)
        elif ev["event"] == "done":
            done = ev
        elif ev["event"] == "error":
            raise RuntimeError(name + ": " + ev["message"])
    return {"who": "nightshift", "name": name, "steps": prev, "train_seconds": round(seconds, 2),
            "tokens_per_second": round(tokens / seconds, 1), "padding_efficiency": round(pad_real / pad_all, 4),
            "peak_rss_bytes": int(peak), "val_accuracy": done.get("val_accuracy"), "wall_seconds": round(wall, 1),
            "device": device, "precision": precision, "progress": True, "mfu": round(flops / seconds, 4),
            "peak_gflops": round(peak_flops / 1e9, 1), "done_train_seconds": done.get("train_seconds"),
            "loss": last_step.get("loss")}


def run_python(data_dir, name, *, max_len, layers=2, batching="fixed", max_tokens=16384, max_steps=0, epochs=1,
               threads=2, evaluate=False, d_model=128, heads=4, ffn=512, batch_size=32, device="cpu", precision="fp32",
               python=VENV_PYTHON, warmup=100, seed=1234, lr=1e-3, compile=False, skip_steps=0):
    cmd = [python, os.path.join(ROOT, "bench/baseline_pytorch.py"), "--data", data_dir,
           "--batching", batching, "--max-tokens", str(max_tokens), "--max-len", str(max_len), "--layers", str(layers),
           "--max-steps", str(max_steps), "--epochs", str(epochs), "--threads", str(threads), "--d-model", str(d_model),
           "--heads", str(heads), "--ffn", str(ffn), "--batch-size", str(batch_size), "--device", device,
           "--precision", precision, "--warmup", str(warmup), "--seed", str(seed), "--lr", str(lr)]
    if not evaluate:
        cmd.append("--no-eval")
    if compile:
        cmd.append("--compile")
    if skip_steps:
        cmd += ["--skip-steps", str(skip_steps)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r.update({"who": "pytorch", "name": name})
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench/.work"))
    ap.add_argument("--steps", type=int, default=40, help="steps of the throughput runs")
    ap.add_argument("--long-samples", type=int, default=150, help="samples (train+val) of the max_len 2048 runs")
    ap.add_argument("--only", default="",
                    help="comma list: throughput,short,short-accuracy,dynamic,ac,bf16,accuracy,accuracy-py,"
                         "overhead (CPU) or gpu")
    ap.add_argument("--data-512", default="", help="prepared shards (default: prepared into --work)")
    ap.add_argument("--data-2048", default="")
    ap.add_argument("--against", default="", help="another nightshift-trainer binary (e.g. an older "
                    "commit's) for --only versus: alternating pairs against --build's")
    ap.add_argument("--python", default=VENV_PYTHON, help="python with torch for the baseline")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of the accuracy runs")
    ap.add_argument("--warmup", type=int, default=100, help="warm-up steps of the accuracy runs")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the accuracy runs")
    ap.add_argument("--budget", type=int, default=4096, help="max_tokens of the accuracy runs")
    ap.add_argument("--short-steps", type=int, default=300, help="steps of the short-accuracy runs")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=a.work)
    only = set(a.only.split(",")) if a.only else {"throughput", "dynamic", "ac", "bf16", "accuracy", "overhead"}
    results = []

    def emit(r):
        results.append(r)
        print(json.dumps(r), flush=True)

    d512 = a.data_512 or os.path.join(a.work, "spam-512")
    m512 = prepare(a.build, d512, 512)
    if "gpu" in only:
        # A transformer large enough to keep an H100/H200 busy; every run on CUDA.
        big = dict(layers=12, d_model=1024, heads=16, ffn=4096)
        steps = a.steps
        for prec in ["fp32", "bf16", "fp16"]:
            emit(run_trainer(a.build, d512, m512, tmp, f"gpu-{prec}", max_len=512, batch_size=64, max_steps=steps,
                             precision=prec, threads=4, **big))
        emit(run_trainer(a.build, d512, m512, tmp, "gpu-bf16-ac", max_len=512, batch_size=64, max_steps=steps,
                         precision="bf16", ac="full", threads=4, **big))
        emit(run_trainer(a.build, d512, m512, tmp, "gpu-bf16-tokens32k", max_len=512, max_tokens="32768",
                         max_steps=steps, precision="bf16", threads=4, **big))
        emit(run_python(d512, "gpu-bf16-pytorch", max_len=512, batch_size=64, max_steps=steps, device="cuda",
                        precision="bf16", threads=4, python=a.python, **big))
        only = set()
    # PyTorch runs skip their first steps (compilation, allocator warm-up) in the timing.
    skip = 3
    if "throughput" in only:
        for rep in range(2):  # alternate, since this machine is noisy
            emit(run_python(d512, f"fixed32-512-eager-{rep}", max_len=512, max_steps=a.steps + skip,
                            skip_steps=skip, python=a.python))
            emit(run_python(d512, f"fixed32-512-compile-{rep}", max_len=512, max_steps=a.steps + skip,
                            skip_steps=skip, compile=True, python=a.python))
            emit(run_trainer(a.build, d512, m512, tmp, f"fixed32-512-ns-{rep}", max_len=512, max_steps=a.steps))
    if "versus" in only:  # this build's trainer against --against's, three alternating pairs
        if not a.against:
            sys.exit("--only versus needs --against PATH")
        for rep in range(3):
            pair = (("this", None), ("against", a.against))
            for who, binary in pair if rep % 2 == 0 else pair[::-1]:  # neither always goes first
                r = run_trainer(a.build, d512, m512, tmp, f"versus-{who}-{rep}", max_len=512, max_steps=a.steps,
                                trainer=binary)
                r["who"] = who
                emit(r)
    if "short" in only or "short-accuracy" in only:
        # Short samples: SpamAssassin cut into chunks of 100-200 tokens (most about 150),
        # max_len 256, fixed batch 32.
        dlong = os.path.join(a.work, "spam-8192")
        prepare(a.build, dlong, 8192)
        dshort = os.path.join(a.work, "spam-chunks-150")
        if not os.path.exists(os.path.join(dshort, "meta.json")):
            subprocess.run([sys.executable, os.path.join(ROOT, "bench/chunk_shards.py"), dlong, dshort], check=True)
        mshort = json.load(open(os.path.join(dshort, "meta.json")))
    if "short" in only:
        for rep in range(2):
            emit(run_python(dshort, f"short-fixed32-eager-{rep}", max_len=256, max_steps=a.steps * 3 + skip,
                            skip_steps=skip, python=a.python))
            emit(run_python(dshort, f"short-fixed32-compile-{rep}", max_len=256, max_steps=a.steps * 3 + skip,
                            skip_steps=skip, compile=True, python=a.python))
            emit(run_trainer(a.build, dshort, mshort, tmp, f"short-fixed32-ns-{rep}", max_len=256,
                             max_steps=a.steps * 3))
    if "short-accuracy" in only:  # the same steps, then the validation accuracy of each
        steps = a.short_steps
        emit(run_trainer(a.build, dshort, mshort, tmp, f"short-acc-{steps}-ns", max_len=256, max_steps=steps,
                         warmup=30, lr=2e-3))
        emit(run_python(dshort, f"short-acc-{steps}-eager", max_len=256, max_steps=steps, evaluate=True,
                        warmup=30, lr=2e-3, python=a.python))
    if "dynamic" in only:
        d2k = a.data_2048 or os.path.join(a.work, f"spam-2048-{a.long_samples}")
        m2k = prepare(a.build, d2k, 2048, max_samples=a.long_samples)
        for rep in range(2):  # the fairseq-style script against the trainer, alternating
            emit(run_python(d2k, f"tokens16k-2048-eager-{rep}", max_len=2048, batching="tokens", max_tokens=16384,
                            python=a.python))
            emit(run_trainer(a.build, d2k, m2k, tmp, f"tokens16k-2048-ns-{rep}", max_len=2048, max_tokens="16384"))
    if "ac" in only:  # alternating pairs; the validation set of 80 samples, since only time and memory count
        tiny = os.path.join(a.work, "spam-512-80")
        prepare(a.build, tiny, 512, max_samples=80)
        for rep in range(3):
            for ac in ["none", "full"]:
                emit(run_trainer(a.build, d512, m512, tmp, f"ac-{ac}-6layers-{rep}", max_len=512, layers=6,
                                 max_steps=max(4, a.steps // 6), ac=ac, val_dir=tiny))
    if "bf16" in only:
        for prec in ["fp32", "bf16"]:
            emit(run_trainer(a.build, d512, m512, tmp, f"prec-{prec}", max_len=512, max_steps=a.steps // 2,
                             precision=prec))
    opt = dict(lr=a.lr, warmup=a.warmup, seed=a.seed)
    tok = "tokens%dk" % (a.budget // 1024)
    if "accuracy" in only:  # one full epoch each, validation accuracy at the end
        emit(run_trainer(a.build, d512, m512, tmp, f"epoch-{tok}-512-ns", max_len=512, max_tokens=str(a.budget), **opt))
        emit(run_trainer(a.build, d512, m512, tmp, f"epoch-{tok}-512-ns-bf16", max_len=512,
                         max_tokens=str(a.budget), precision="bf16", **opt))
        emit(run_trainer(a.build, d512, m512, tmp, "epoch-fixed32-512-ns", max_len=512, **opt))
    if "accuracy-py" in only:  # the tutorial script's full epoch, fixed and token batches, for reference
        emit(run_python(d512, "epoch-fixed32-512-py", max_len=512, evaluate=True, **opt))
        emit(run_python(d512, f"epoch-{tok}-512-py", max_len=512, batching="tokens", max_tokens=a.budget,
                        evaluate=True, **opt))
    if "overhead" in only:  # progress reporting on against off, alternating, wall time of whole runs
        for rep in range(3):
            for on in [True, False]:
                emit(run_trainer(a.build, d512, m512, tmp, f"progress-{'on' if on else 'off'}-{rep}", max_len=512,
                                 max_steps=a.steps // 2, progress=on))

    opts = sorted({r["optimizer"] for r in results if r.get("optimizer")})
    if opts:
        print("\nplain PyTorch's optimizer: " + "; ".join(opts))
    print("\n%-28s %-10s %-6s %7s %9s %11s %8s %10s %8s %8s %6s" % (
        "run", "who", "device", "steps", "seconds", "tokens/s", "pad_eff", "peak_MiB", "wall_s", "val_acc", "MFU"))
    for r in results:
        peak = r.get("peak_device_bytes", r["peak_rss_bytes"])
        acc = r.get("val_accuracy")
        mfu = r.get("mfu")
        print("%-28s %-10s %-6s %7d %9.1f %11.1f %8.3f %10.0f %8.1f %8s %6s" % (
            r["name"], r["who"], r.get("device", "cpu"), r["steps"], r["train_seconds"], r["tokens_per_second"],
            r["padding_efficiency"], peak / 2**20, r.get("wall_seconds", 0), "-" if acc is None else "%.4f" % acc,
            "-" if mfu is None else "%.3f" % mfu))


if __name__ == "__main__":
    main()

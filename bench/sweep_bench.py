"""ASHA against the same trials run to the end (issue 45), side by side in one invocation.

Two sweeps of the same trials on one local cluster (a coordinator and a worker with one
CPU slot, tests/python/local_cluster.py): `method: asha` and `method: random`, the same
seed, so trial i has the same params in both (coordinator/sweep_spec.h draws them from
(seed, i) alone). The random sweep runs every trial to max_steps, as a grid would; ASHA
pauses and stops the losers at its rungs. Printed, as JSON lines: per sweep, the trial-steps
spent (the sum over trial jobs of the furthest step each reached), the best trial's final metric and the wall
time.

For ASHA, also how far the trials it stopped ran past the evaluation that stopped them
(overrun: the job's last step minus that evaluation's step): the stop's latency in steps
(heartbeat, the sweep runner's pass, the stop's heartbeat, SIGTERM, the checkpoint).

Usage: /opt/nightshift/venv/bin/python bench/sweep_bench.py [--bin build/bin] [--trials 12]
       [--max-steps 270] [--min-steps 30] [--eta 3] [--d-model 128] [--ffn 256] [--max-len 256]
       [--budget 4096]
The data: data/spamassassin (scripts/fetch-data.sh).
"""
import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from local_cluster import LocalCluster, build_package  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--max-steps", type=int, default=270)
    ap.add_argument("--min-steps", type=int, default=30)
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--budget", type=int, default=4096, help="train.batching.max_tokens")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="nightshift-sweep-bench-")
    sys.path.insert(0, build_package(ROOT, tmp.name))
    base = {"model": {"arch": "transformer_classifier", "layers": 1, "d_model": a.d_model, "heads": 4, "ffn": a.ffn,
                      "max_len": a.max_len},
            "data": {"format": "text_dir", "path": os.path.join(ROOT, "data", "spamassassin"),
                     "validation_fraction": 0.1, "tokenizer": {"vocab_size": 4000}},
            "train": {"epochs": 100, "max_steps": a.max_steps, "threads": 2, "seed": 1,
                      "batching": {"max_tokens": a.budget}},
            "eval": {"every_steps": a.min_steps}}
    sweep = {"base": base, "search": {"train.lr": {"log_uniform": [1e-5, 3e-2]}}, "metric": "val_loss",
             "max_trials": a.trials, "parallelism": 1, "seed": 11}
    with LocalCluster(a.bin, ROOT, os.path.join(ROOT, "data")) as cluster:
        client = cluster.client("alice")
        # The data's features are cached by the worker on the first trial: a warm-up job
        # builds them, so neither sweep pays for it.
        client.submit(dict(base, name="warm-up", train=dict(base["train"], max_steps=1))).wait(progress=False)
        for method in ("random", "asha"):
            spec = dict(sweep, name=method, method=method)
            if method == "asha":
                spec["asha"] = {"min_steps": a.min_steps, "reduction_factor": a.eta}
            t0 = time.monotonic()
            s = client.sweep(spec).wait(timeout=3600, poll=0.5)
            wall = time.monotonic() - t0
            trials = s.trials()
            # Steps each trial computed: the furthest its job got (a paused trial's stop
            # checkpoints where its ranks were, "requeued from step N", and it would resume
            # there; its progress may show less afterwards).
            last = {}
            for j in trials["job"]:
                p = client.job(j).proto
                last[j] = max([p.progress.step] + [e.step for e in p.events])
            steps = sum(last.values())
            stopped = trials[trials["state"] == "STOPPED"]
            overrun = sorted(int(last[j] - step) for j, step in zip(stopped["job"], stopped["step"]))
            best = s.best()
            print(json.dumps({"method": method, "trials": len(trials), "trial_steps": int(steps),
                              "full_steps": a.trials * a.max_steps, "best_job": best.id,
                              "best_lr": float(trials[trials["job"] == best.id]["train.lr"].iloc[0]),
                              "best_val_loss": best.metrics().final.get("val_loss"),
                              "stopped": int((trials["state"] == "STOPPED").sum()),
                              "promotions": int(trials["promotions"].sum()), "wall_seconds": round(wall, 1),
                              "overrun_steps": overrun,
                              "state": s.state}), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Memory of two ranks on one machine loading one pretrained folder (issue 30): a random
Llama-layout LlamaForCausalLM of about 500 million parameters (16 layers, 1536 wide, 16
query and 4 key/value heads, feed-forward 4096, vocabulary 32,000, untied LM head), saved
by transformers in float32 as 500 MB shards, fine-tuned as a causal LM by two
nightshift-trainer ranks (Gloo on 127.0.0.1, RANK/WORLD_SIZE as torchrun sets them).

From the start of the two processes until each has written its "start" record (model
built and loaded, data parallelism started, optimizer made: training starts next), their
/proc/PID/smaps_rollup is read every 20 ms; the peak over time of the two ranks' sums:

- pss: proportional set size, each page shared by the two counted once (half in each):
  the memory the two ranks hold together;
- rss: resident set size, a shared page counted in both (what `ps` shows per process);
- anonymous: the pages that are the processes' own (heap, and mapped pages they wrote).

Runs alternate between the default (F32 tensors are views of the mapped files, hf_weights.h)
and NIGHTSHIFT_COPY_WEIGHTS=1 (every tensor copied into the rank's own parameters, as before).
Sizes are divided by the folder's size on disk (the target: pss at most 1.5x).

  bench/shared_weights_bench.py [--bin build/bin] [--repeats 2] [--work bench/.work]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_bench import ROOT, prepare  # noqa: E402

LAYERS, WIDTH, HEADS, KV_HEADS, FFN, VOCAB, MAX_LEN = 16, 1536, 16, 4, 4096, 32000, 128
CORPUS = os.path.join(ROOT, "data", "spamassassin")


def make_folder(folder, work):
    if os.path.exists(os.path.join(folder, "config.json")):
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import torch
    from hf_folders import LLAMA3_SPECIALS, decoder_tokenizer, save_decoder_tokenizer, texts_of
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = decoder_tokenizer("llama3", texts_of(CORPUS), VOCAB - len(LLAMA3_SPECIALS), os.path.join(work, "vocab-32k"))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, intermediate_size=FFN, max_position_embeddings=1024,
                      tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(tmp, max_shard_size="500MB")
    save_decoder_tokenizer(tok, tmp)
    os.replace(tmp, folder)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rollup(pid):
    """kB of Rss, Pss and Anonymous of /proc/PID/smaps_rollup ({} once the process is gone)."""
    try:
        out = {}
        for line in open(f"/proc/{pid}/smaps_rollup"):
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Anonymous"):
                out[key.lower()] = int(rest.split()[0])
        return out
    except OSError:
        return {}


def two_ranks(binary, config_path, copy):
    """Starts both ranks; returns the peaks of the sums (bytes) and the seconds to both starts."""
    port = free_port()
    procs, started = [], [None, None]
    t0 = time.perf_counter()
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.pop("NIGHTSHIFT_COPY_WEIGHTS", None)
        if copy:
            env["NIGHTSHIFT_COPY_WEIGHTS"] = "1"
        procs.append(subprocess.Popen([binary, "--config", config_path], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True))

    def watch(rank):
        for line in procs[rank].stdout:
            if line.startswith("{") and json.loads(line).get("event") == "start":
                started[rank] = time.perf_counter() - t0
                return
    watchers = [threading.Thread(target=watch, args=(r,), daemon=True) for r in range(2)]
    for w in watchers:
        w.start()
    peak = {"rss": 0, "pss": 0, "anonymous": 0}
    try:
        while None in started:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a rank exited with %s before it started" % [p.poll() for p in procs])
            if time.perf_counter() - t0 > 600:
                raise RuntimeError("the ranks did not start within 600 s")
            now = [rollup(p.pid) for p in procs]
            for k in peak:
                peak[k] = max(peak[k], sum(n.get(k, 0) for n in now) * 1024)
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return peak, max(started)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", ".work"))
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    folder = os.path.join(a.work, "llama-500m")
    make_folder(folder, a.work)
    disk = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.endswith(".safetensors"))
    build = os.path.join(a.work, "build-link")  # trainer_bench's helpers take BUILD/bin
    os.makedirs(build, exist_ok=True)
    if os.path.realpath(os.path.join(build, "bin")) != os.path.realpath(a.bin):
        if os.path.lexists(os.path.join(build, "bin")):
            os.remove(os.path.join(build, "bin"))
        os.symlink(os.path.abspath(a.bin), os.path.join(build, "bin"))
    data_dir = os.path.join(a.work, "llama-500m-data")
    meta = prepare(build, data_dir, MAX_LEN, max_samples=64, extra=["--pretrained", folder, "--classifier", "false"])
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        spec = {"name": "shared-weights",
                "model": {"pretrained": folder, "max_len": MAX_LEN, "task": "causal_lm"},
                "train": {"epochs": 1, "optimizer": "adamw", "lr": 1e-5, "batching": {"batch_size": 2},
                          "precision": "fp32", "max_steps": "1", "threads": 1},
                "data": {"path": data_dir}, "resources": {"world_size": 2},
                "checkpoint": {"every_steps": 0, "every_seconds": 0, "keep_last": 1}}
        data = dict(meta, num_classes=0, train_shard=os.path.join(data_dir, "train.shard"),
                    val_shard=os.path.join(data_dir, "val.shard"))
        config = os.path.join(tmp, "config.json")
        json.dump({"job_id": "shared-weights", "attempt": 0, "spec": spec, "data": data, "checkpoint_dir": tmp},
                  open(config, "w"))
        for rep in range(a.repeats):
            for copy in (False, True):
                peak, seconds = two_ranks(os.path.join(a.bin, "nightshift-trainer"), config, copy)
                r = {"mode": "copy" if copy else "shared", "repeat": rep, "disk_bytes": disk,
                     "seconds_to_start": round(seconds, 1), "loadavg_1m": round(os.getloadavg()[0], 2)}
                for k, v in peak.items():
                    r[f"peak_{k}_bytes"] = v
                    r[f"peak_{k}_over_disk"] = round(v / disk, 3)
                print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

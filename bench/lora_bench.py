#!/usr/bin/env python3
"""LoRA on a frozen base (issue 42): a Llama-layout model of 210M parameters (12 layers,
1024 wide, 16 query and 4 key/value heads, feed-forward 3072, vocabulary 32,000, untied
LM head; random weights saved by transformers, a byte-level BPE tokenizer trained on the
corpus by tests/support/hf_folders.py: no download), fine-tuned as a causal LM on
SpamAssassin in packed rows of 512 tokens, --budget tokens a step, fp32, 2 threads, side
by side in one run:

- nightshift-trainer, every weight trained (AdamW, ATen's fused kernel);
- nightshift-trainer with model.adapter {type: lora, r: 16, alpha: 32,
  target_modules: all-linear}, the base in float32 and with model.base_precision bf16
  (the frozen projections kept and computed in bf16);
- PEFT + transformers (bench/baseline_transformers_lm.py --lora 16: get_peft_model with
  LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"), SDPA attention,
  torch.optim.AdamW(fused=True) over the trainable parameters in Trainer's two groups:
  Trainer's defaults) on the same packed rows, its model loaded in float32 and (for the
  bf16-base row) in bfloat16 (from_pretrained(dtype=torch.bfloat16): PEFT keeps the
  adapter in float32, everything else computes in bf16).

--ac: every run with activation checkpointing (ours: train.activation_checkpointing full;
transformers: gradient_checkpointing_enable(use_reentrant=False)), the setting torchtune's
LoRA recipes ship with.

Each: --steps timed steps after 2 warm-up steps; real tokens per second and the process's
peak resident memory (/usr/bin/time's maximum RSS).

  bench/lora_bench.py [--bin build/bin] [--steps 4] [--repeats 1] [--budget 1024]
                     [--only full,lora,lora-bf16,peft,peft-bf16] [--ac]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_bench as db  # noqa: E402
from trainer_bench import prepare, run_trainer  # noqa: E402

db.LAYERS, db.WIDTH, db.HEADS, db.KV_HEADS, db.FFN = 12, 1024, 16, 4, 3072


def llama210m(work, bin_dir):
    """The 210M Llama folder and its causal-LM shards of 512-token rows, made once under
    `work`: (build, folder, data, val, meta); build/bin links to bin_dir (trainer_bench's
    helpers take a build folder)."""
    os.makedirs(work, exist_ok=True)
    build = os.path.join(work, "build-link")
    os.makedirs(build, exist_ok=True)
    if not os.path.lexists(os.path.join(build, "bin")):
        os.symlink(os.path.abspath(bin_dir), os.path.join(build, "bin"))
    folder = os.path.join(work, "llama210m", "llama3")
    db.make_folder(folder)
    extra = ["--pretrained", folder, "--classifier", "false"]
    data = os.path.join(work, "llama210m-lm-512")
    meta = prepare(build, data, db.MAX_LEN, extra=extra)
    val = os.path.join(work, "llama210m-lm-512-val")
    prepare(build, val, db.MAX_LEN, max_samples=8, extra=extra)
    return build, folder, data, val, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(db.ROOT, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(db.ROOT, "bench/.work"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--budget", type=int, default=2 * db.MAX_LEN)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--only", default="full,lora,lora-bf16,peft,peft-bf16")
    ap.add_argument("--ac", action="store_true", help="activation checkpointing in every run")
    ap.add_argument("--precision", default="fp32", help="our runs' train.precision (fp32 or bf16: autocast)")
    a = ap.parse_args()
    build, folder, d, val, meta = llama210m(a.work, a.bin)
    params = None
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        wrapper = os.path.join(tmp, "timed-trainer")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/time -f 'MAXRSS %M' -o " + tmp + "/rss " +
                    os.path.join(os.path.abspath(a.bin), "nightshift-trainer") + ' "$@"\n')
        os.chmod(wrapper, 0o755)

        def ours(name, adapter, base=""):
            model = {"pretrained": folder, "max_len": db.MAX_LEN, "task": "causal_lm"}
            if adapter:
                model["adapter"] = {"type": "lora", "r": a.r, "alpha": 2 * a.r, "target_modules": "all-linear"}
            if base:
                model["base_precision"] = base
            r = run_trainer(build, d, dict(meta, num_classes=0), tmp, name, max_len=db.MAX_LEN, model=model, lr=5e-5,
                            warmup=10, trainer=wrapper, rows="packed", max_steps=a.steps + 2, skip_steps=2,
                            val_dir=val, max_tokens=str(a.budget), ac="full" if a.ac else "none",
                            precision=a.precision)
            rss = int(open(os.path.join(tmp, "rss")).read().split("MAXRSS ")[-1].split()[0]) * 1024
            r.update(step_memory_peak_bytes=r["peak_rss_bytes"], peak_rss_bytes=rss,
                     setting=("lora r %d all-linear" % a.r + (", base " + base if base else "")) if adapter
                     else "full fine-tune", activation_checkpointing=a.ac)
            return r

        for rep in range(a.repeats):
            only = a.only.split(",")
            peft = ["--max-steps", str(a.steps + 2), "--skip-steps", "2", "--lr", "5e-5", "--lora", str(a.r)] + (
                ["--ac"] if a.ac else [])
            runs = [lambda: ours(f"full-{rep}", False), lambda: ours(f"lora-{rep}", True),
                    lambda: ours(f"lora-bf16-{rep}", True, "bf16"),
                    lambda: db.theirs(folder, d, a.budget, *peft),
                    lambda: db.theirs(folder, d, a.budget, *peft, "--base-dtype", "bf16")]
            for r in (run() for key, run in zip(("full", "lora", "lora-bf16", "peft", "peft-bf16"), runs)
                      if key in only):
                r.setdefault("setting", "lora r %d all-linear" % a.r)
                r["repeat"] = rep
                print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Decoders (issue 30), on SpamAssassin, with a Llama-layout model (4 layers, 512 wide, 8
query and 2 key/value heads, feed-forward 1536, vocabulary 32,000, untied LM head; random
weights and a Llama 3-kind byte-level BPE tokenizer trained on the corpus, made with
tests/support/hf_folders.py's decoder_tokenizer: no download), 2 threads, runs alternating:

- lm: fine-tuning as a causal LM on packed rows of 512 tokens (a budget of --budget tokens
  per step, fp32, AdamW lr 5e-5, clipping 1.0): nightshift-trainer (model.task causal_lm,
  train.batching.rows packed) against transformers' LlamaForCausalLM
  (bench/baseline_transformers_lm.py: SDPA, eager and torch.compile, AdamW fused=True as
  transformers' Trainer builds it by default) on the same token ids packed the same way
  (best-fit decreasing, position_ids restarting per sample, block-diagonal mask;
  its --check, run once in the packing part where rows hold several samples, compares
  packed rows with the same samples run one by one). --steps timed steps after 2
  (eager, ours) or 3 (compile) warm-up steps: real tokens per second, peak resident memory
  (/usr/bin/time's maximum RSS), MFU (6 x non-embedding parameters, the untied LM head
  counted, + 12 x layers x width x 512 per token, over the GEMM peak nightshift-trainer
  measured).
- packing: the corpus as prompt/completion pairs (prompt: the mail's Subject, completion:
  its body, or with --split paragraph the body's first paragraph; bench/.work/
  subject-body*.jsonl), the same model, max_len 512, the same token budget: rows packed
  against rows padded (token-budget batches, length-sorted pools) and padded with a fixed
  batch of budget / max_len samples: real (non-padding) tokens per second.
- generate: 128 new tokens, greedy, from a mail's opening, with nightshift-predict's
  key/value cache against --no-kv-cache (the whole sequence recomputed per token), on the
  lm folder; transformers' model.generate(max_new_tokens=128, do_sample=False) with its
  cache for context, and whether the tokens agree.

  bench/decoder_bench.py [--bin .bin] [--only lm,packing,generate] [--steps 6] [--repeats 2]
  bench/decoder_bench.py --summarize RUN.log ...   (the tables of several runs' JSON lines)

--bin: the folder with nightshift-trainer, nightshift-prepare and nightshift-predict
(default: build/bin). Work files in --work (bench/.work).
"""
import argparse
import email
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_bench import ROOT, VENV_PYTHON, prepare, run_trainer  # noqa: E402

LAYERS, WIDTH, HEADS, KV_HEADS, FFN, VOCAB, MAX_LEN = 4, 512, 8, 2, 1536, 32000, 512
CORPUS = os.path.join(ROOT, "data", "spamassassin")


def make_folder(folder):
    """The Llama-layout LlamaForCausalLM folder, vocab_size 32,000 exactly (the tokenizer is
    trained to 31,995 + Llama 3's 5 special tokens)."""
    if os.path.exists(os.path.join(folder, "config.json")):
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    import torch
    from hf_folders import LLAMA3_SPECIALS, decoder_tokenizer, save_decoder_tokenizer, texts_of
    from transformers import LlamaConfig, LlamaForCausalLM
    tok = decoder_tokenizer("llama3", texts_of(CORPUS), VOCAB - len(LLAMA3_SPECIALS), folder + "-vocab")
    assert len(tok) == VOCAB, len(tok)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, intermediate_size=FFN, max_position_embeddings=1024,
                      rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    save_decoder_tokenizer(tok, folder)


def subject_body_jsonl(path, split="body"):
    """{"prompt": Subject, "completion": body} per mail with a Subject and a body; split
    "paragraph": the completion is the body's first paragraph (up to its first blank line)."""
    if os.path.exists(path):
        return
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(CORPUS) for f in fs)
    with open(path + ".tmp", "w") as out:
        for p in files:
            raw = open(p, "rb").read().decode("utf-8", errors="replace")
            subject = (email.message_from_string(raw).get("Subject") or "").strip()
            parts = re.split(r"\r?\n\r?\n", raw, maxsplit=1)
            body = parts[1].strip() if len(parts) == 2 else ""
            if split == "paragraph":
                body = re.split(r"\r?\n\s*\r?\n", body, maxsplit=1)[0].strip()
            if subject and body:
                out.write(json.dumps({"prompt": "Subject: " + " ".join(subject.split()) + "\n",
                                      "completion": body}) + "\n")
    os.replace(path + ".tmp", path)


def nominal_flops_per_token(row_len):
    kv = WIDTH // HEADS * KV_HEADS
    layer = 2 * WIDTH * WIDTH + 2 * WIDTH * kv + 3 * WIDTH * FFN + 2 * WIDTH
    non_embedding = LAYERS * layer + WIDTH + WIDTH * VOCAB  # final norm, untied lm_head
    return 6 * non_embedding + 12 * LAYERS * WIDTH * row_len


def timed(cmd, **kw):
    """Runs cmd under /usr/bin/time; returns (stdout, peak RSS bytes)."""
    p = subprocess.run(["/usr/bin/time", "-f", "MAXRSS %M", *cmd], capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + p.stderr[-3000:])
    return p.stdout, int(re.findall(r"MAXRSS (\d+)", p.stderr)[-1]) * 1024


def theirs(folder, data_dir, budget, *args):
    out, rss = timed([VENV_PYTHON, os.path.join(ROOT, "bench", "baseline_transformers_lm.py"), "--model", folder,
                      "--data", data_dir, "--max-len", str(MAX_LEN), "--budget", str(budget), *args])
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_bytes"] = rss
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench/.work"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget", type=int, default=4 * MAX_LEN, help="tokens per step (max_tokens)")
    ap.add_argument("--only", default="lm,packing,generate")
    ap.add_argument("--split", default="body", choices=("body", "paragraph"),
                    help="packing's completions: the mail's body, or its first paragraph (shorter samples)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--peak-gflops", type=float, default=0.0,
                    help="MFU's denominator (default: the highest GEMM peak nightshift-trainer measured in these "
                         "runs; on a loaded machine that probe reads low)")
    ap.add_argument("--summarize", nargs="*", default=None,
                    help="only print the tables of earlier runs' output (their JSON lines)")
    a = ap.parse_args()
    if a.summarize is not None:
        results = []
        for path in a.summarize:
            for line in open(path):
                if line.startswith("{"):
                    results.append(json.loads(line))
        summarize(results, a)
        return
    only = set(a.only.split(","))
    binary = lambda name: os.path.join(os.path.abspath(a.bin), name)  # noqa: E731
    os.makedirs(a.work, exist_ok=True)
    # trainer_bench's helpers take a build folder (BUILD/bin/nightshift-prepare): a link to --bin.
    build = os.path.join(a.work, "build-link")
    os.makedirs(build, exist_ok=True)
    if os.path.realpath(os.path.join(build, "bin")) != os.path.realpath(a.bin):
        if os.path.lexists(os.path.join(build, "bin")):
            os.remove(os.path.join(build, "bin"))
        os.symlink(os.path.abspath(a.bin), os.path.join(build, "bin"))
    folder = os.path.join(a.work, "llama", "llama3")
    make_folder(folder)
    lm_extra = ["--pretrained", folder, "--classifier", "false"]
    results = []

    def emit(r):
        r["loadavg_1m"] = round(os.getloadavg()[0], 2)  # the machine's load when the run ended
        results.append(r)
        print(json.dumps(r), flush=True)

    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        wrapper = os.path.join(tmp, "timed-trainer")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/time -f 'MAXRSS %M' -o " + tmp + "/rss " + binary("nightshift-trainer") +
                    ' "$@"\n')
        os.chmod(wrapper, 0o755)

        def rss():
            return int(re.findall(r"MAXRSS (\d+)", open(os.path.join(tmp, "rss")).read())[-1]) * 1024

        def ours(data_dir, meta, name, rows, val_dir, **kw):
            data = dict(meta, num_classes=0)
            model = {"pretrained": folder, "max_len": MAX_LEN, "task": "causal_lm"}
            r = run_trainer(build, data_dir, data, tmp, name, max_len=MAX_LEN, model=model, lr=5e-5, warmup=10,
                            trainer=wrapper, rows=rows, max_steps=a.steps + 2, skip_steps=2, val_dir=val_dir, **kw)
            # The trainer's own memory_peak_bytes of its steps, and the process's peak RSS (all of it).
            r.update(step_memory_peak_bytes=r["peak_rss_bytes"], peak_rss_bytes=rss(), rows=rows)
            return r

        if "lm" in only:
            d = os.path.join(a.work, "llama-lm-512")
            meta = prepare(build, d, MAX_LEN, extra=lm_extra)
            # A small validation shard: the trainer's final evaluation is not what is timed.
            val = os.path.join(a.work, "llama-lm-512-val")
            prepare(build, val, MAX_LEN, max_samples=40, extra=lm_extra)
            for rep in range(a.repeats):
                r = ours(d, meta, f"lm-{rep}", "packed", val, max_tokens=str(a.budget))
                r["mode"] = "lm"
                emit(r)
                for extra, skip in (([], 2), (["--compile"], 3)):
                    r = theirs(folder, d, a.budget, "--max-steps", str(a.steps + skip), "--skip-steps", str(skip),
                               "--lr", "5e-5", *extra)
                    r["mode"] = "lm"
                    emit(r)
        if "packing" in only:
            tag = "" if a.split == "body" else "-" + a.split
            jsonl = os.path.join(a.work, f"subject-body{tag}.jsonl")
            subject_body_jsonl(jsonl, a.split)
            d = os.path.join(a.work, f"llama-pc{tag}-512")
            pc = ["--format", "jsonl", "--text-field", "prompt", "--completion-field", "completion"]
            meta = prepare(build, d, MAX_LEN, path=jsonl, extra=lm_extra + pc)
            val = os.path.join(a.work, f"llama-pc{tag}-512-val")
            prepare(build, val, MAX_LEN, path=jsonl, max_samples=40, extra=lm_extra + pc)
            # Once: transformers' packed rows (position_ids restarting, no attention_mask)
            # against the same samples one by one, on the step whose rows hold the most samples.
            r = theirs(folder, d, a.budget, "--max-steps", "1", "--check")
            r["mode"] = "check"
            emit(r)
            for rep in range(a.repeats):
                for rows, kw in (("packed", {"max_tokens": str(a.budget)}), ("padded", {"max_tokens": str(a.budget)}),
                                 ("padded", {"batch_size": a.budget // MAX_LEN})):
                    label = rows + ("-budget" if "max_tokens" in kw else "-fixed")
                    r = ours(d, meta, f"pc-{label}-{rep}", rows, val, **kw)
                    r.update(mode="packing", variant=label, split=a.split)
                    emit(r)
        if "generate" in only:
            prompt = ("Hello, I am writing to let you know about the meeting next week. We will go over the "
                      "results of the last quarter and the plans for the new year, so please bring your notes")
            for rep in range(a.repeats):
                for cache in (True, False):
                    cmd = [binary("nightshift-predict"), "--model", folder, "--generate", str(a.new_tokens),
                           "--prompt", prompt, "-o", "json"] + ([] if cache else ["--no-kv-cache"])
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                    g = json.loads(out.strip().splitlines()[-1])
                    emit({"who": "nightshift", "mode": "generate", "cache": cache, "seconds": g["seconds"],
                          "new": len(g["new_ids"]), "tokens_per_second": round(len(g["new_ids"]) / g["seconds"], 1),
                          "prompt_ids": g["prompt_ids"], "new_ids": g["new_ids"]})
                code = ("import json,sys,time,torch\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
                        "torch.set_num_threads(2)\nf,p,n,ids=sys.argv[1],sys.argv[2],int(sys.argv[3]),json.loads(sys.argv[4])\n"
                        "m=AutoModelForCausalLM.from_pretrained(f,dtype=torch.float32).eval()\n"
                        "t=AutoTokenizer.from_pretrained(f)(p)['input_ids']\nx=torch.tensor([ids])\n"
                        "with torch.no_grad():\n m.generate(x,max_new_tokens=4,do_sample=False)\n"
                        " t0=time.perf_counter();y=m.generate(x,max_new_tokens=n,do_sample=False)\n"
                        "s=time.perf_counter()-t0\nnew=y[0,x.size(1):].tolist()\n"
                        "print(json.dumps({'seconds':s,'new_ids':new,'tokenizer_ids':t}))\n")
                ours_ids = [r for r in results if r["mode"] == "generate" and r["cache"]][-1]
                out = subprocess.run([VENV_PYTHON, "-c", code, folder, prompt, str(a.new_tokens),
                                      json.dumps(ours_ids["prompt_ids"])], check=True, capture_output=True,
                                     text=True).stdout
                g = json.loads(out.strip().splitlines()[-1])
                same = 0
                while same < min(len(g["new_ids"]), len(ours_ids["new_ids"])) and \
                        g["new_ids"][same] == ours_ids["new_ids"][same]:
                    same += 1
                emit({"who": "transformers", "mode": "generate", "cache": True, "seconds": round(g["seconds"], 3),
                      "new": len(g["new_ids"]), "tokens_per_second": round(len(g["new_ids"]) / g["seconds"], 1),
                      "same_prompt_ids": g["tokenizer_ids"] == ours_ids["prompt_ids"],
                      "agreeing_prefix": same, "new_ids": g["new_ids"]})
    summarize(results, a)


def mean(results, key, **match):
    vs = [r[key] for r in results if all(r.get(k) == v for k, v in match.items()) and r.get(key) is not None]
    return sum(vs) / len(vs) if vs else float("nan")


def summarize(results, a):
    peaks = [r.get("peak_gflops") or 0 for r in results if r["who"] == "nightshift" and r.get("peak_gflops")]
    if any(r["mode"] == "lm" for r in results):
        peak = (a.peak_gflops or max(peaks)) * 1e9
        f = nominal_flops_per_token(MAX_LEN)
        print(f"\nGEMM peak: {peak / 1e9:.1f} GFLOP/s (measured by nightshift-trainer in these runs: "
              f"{', '.join(f'{p:.1f}' for p in peaks)}); nominal {f / 1e6:.1f} MFLOP/token")
        base = mean(results, "tokens_per_second", mode="lm", who="transformers")
        comp = mean(results, "tokens_per_second", mode="lm", who="transformers+compile")
        base_rss = mean(results, "peak_rss_bytes", mode="lm", who="transformers")
        opts = sorted({r["optimizer"] for r in results if r["mode"] == "lm" and r.get("optimizer")})
        print("transformers' optimizer: " + "; ".join(opts) + ". MFU: nominal FLOPs (every position's LM head "
              "counted; nightshift's head runs only on positions whose next token counts)")
        print("| causal LM, packed rows of 512 | tokens/s | vs eager | vs compile | MFU | peak RSS (MiB) | vs eager |")
        print("|---|---|---|---|---|---|---|")
        for who in ("nightshift", "transformers", "transformers+compile"):
            tps = mean(results, "tokens_per_second", mode="lm", who=who)
            m = mean(results, "peak_rss_bytes", mode="lm", who=who)
            per = ", ".join(f"{r['tokens_per_second']:.0f}" for r in results if r["mode"] == "lm" and r["who"] == who)
            print(f"| {who} ({per}) | {tps:.0f} | {tps / base:.2f}x | {tps / comp:.2f}x | {tps * f / peak:.2f} "
                  f"| {m / 2**20:.0f} | {m / base_rss:.2f}x |")
    for split in sorted({r.get("split", "body") for r in results if r["mode"] == "packing"}):
        print(f"\n| prompt/completion ({split}), max_len 512 | real tokens/s | vs padded (budget) "
              "| vs padded (fixed batch) | padding efficiency | runs |")
        print("|---|---|---|---|---|---|")
        of = lambda key, v: mean([r for r in results if r.get("split", "body") == split], key,  # noqa: E731
                                 mode="packing", variant=v)
        for v in ("packed-budget", "padded-budget", "padded-fixed"):
            tps = of("tokens_per_second", v)
            per = ", ".join(f"{r['tokens_per_second']:.0f}" for r in results
                            if r.get("variant") == v and r.get("split", "body") == split)
            print(f"| {v} | {tps:.0f} | {tps / of('tokens_per_second', 'padded-budget'):.2f}x "
                  f"| {tps / of('tokens_per_second', 'padded-fixed'):.2f}x | {of('padding_efficiency', v):.3f} | {per} |")
    if any(r["mode"] == "generate" for r in results):
        print(f"\n| generate {a.new_tokens} tokens, greedy | seconds | tokens/s | vs no cache | runs (s) |")
        print("|---|---|---|---|---|")
        nocache = mean(results, "seconds", mode="generate", who="nightshift", cache=False)
        for who, cache in (("nightshift", True), ("nightshift", False), ("transformers", True)):
            s = mean(results, "seconds", mode="generate", who=who, cache=cache)
            n = mean(results, "new", mode="generate", who=who, cache=cache)
            per = ", ".join(f"{r['seconds']:.2f}" for r in results
                            if r["mode"] == "generate" and r["who"] == who and r["cache"] == cache)
            print(f"| {who}{' (kv cache)' if cache else ' --no-kv-cache'} | {s:.2f} | {n / s:.1f} | {nocache / s:.2f}x "
                  f"| {per} |")


if __name__ == "__main__":
    main()

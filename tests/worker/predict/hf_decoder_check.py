#!/usr/bin/env python3
"""Hugging Face decoder folders (GPT-2, Llama, Qwen2 layouts; ...ForCausalLM and
...ForSequenceClassification) through nightshift-predict, against transformers.

  hf_decoder_check.py make OUT_DIR CORPUS_DIR [--kinds gpt2,llama3,qwen2]
      writes OUT_DIR/<kind>: a tiny random ...ForCausalLM saved by transformers, with a
      tokenizer of that kind trained here on the corpus (tests/support/hf_folders.py; no download).
  hf_decoder_check.py PREDICT_BIN CORPUS_DIR
      both: folders of every kind (gpt2, llama3, qwen2, llama2, mistral) made in a temporary
      folder, then checked (the ctest predict_hf_decoders).
  hf_decoder_check.py check PREDICT_BIN CORPUS_DIR DIR...
      for each folder, loaded by transformers with AutoTokenizer and the class its
      config.json's "architectures" names: a causal LM's greedy continuation of mail
      prompts (nightshift-predict --generate) is model.generate(do_sample=False)'s, token
      for token, its text tok.decode(ids, skip_special_tokens=True)'s, and its --score perplexities are exp(loss) of transformers within 1e-4
      relative; a classifier's labels are ham/spam and its logits equal transformers' within
      1e-4 (tests/e2e/pretrained_check.py).
      Exit 1 naming what differs; prints "ok DIR: ..." per folder.
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "e2e"))

import pretrained_check  # noqa: E402  (the classifier check, fail, mails)
from pretrained_check import fail, mails  # noqa: E402

NEW_TOKENS = 16


def predict(bin_path, args):
    p = subprocess.run([bin_path, "--device", "cpu", *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"nightshift-predict {' '.join(args[:3])}: exit {p.returncode}: {p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines()]


def max_len_of(folder, tok):
    config = json.load(open(os.path.join(folder, "config.json")))
    if "max_len" in config:
        return config["max_len"]
    positions = config.get("n_positions") or config.get("max_position_embeddings")
    return min(positions, tok.model_max_length)


def check_lm(bin_path, folder, texts, tmp):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    eos = model.generation_config.eos_token_id
    max_len = max_len_of(folder, tok)
    for text in [t for t in texts if t.strip()][:6]:
        prompt = text[:120]
        ours = predict(bin_path, ["--model", folder, "--generate", str(NEW_TOKENS), "--prompt", prompt, "-o", "json"])[0]
        enc = tok(prompt, truncation=True, max_length=max_len, return_tensors="pt")  # as our rows
        if enc["input_ids"][0].tolist() != ours["prompt_ids"]:
            fail(f"{folder}: prompt ids differ on {prompt!r}: {enc['input_ids'][0].tolist()} vs {ours['prompt_ids']}")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=eos)
        theirs = out[0, enc["input_ids"].shape[1]:].tolist()
        if theirs != ours["new_ids"]:
            fail(f"{folder}: greedy continuation of {prompt!r} differs: transformers {theirs}, ours {ours['new_ids']}")
        want_text = tok.decode(theirs, skip_special_tokens=True)
        if ours["text"] != want_text:
            fail(f"{folder}: the continuation's text differs: transformers {want_text!r}, ours {ours['text']!r}")
    path = os.path.join(tmp, "inputs.jsonl")
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    rows = predict(bin_path, ["--model", folder, "--jsonl", path, "--score", "-o", "json"])
    worst = 0.0
    for text, row in zip(texts, rows):
        enc = tok(text, truncation=True, max_length=max_len, return_tensors="pt")
        if enc["input_ids"].shape[1] < 2:
            continue
        with torch.no_grad():
            ppl = torch.exp(model(**enc, labels=enc["input_ids"]).loss).item()
        rel = abs(ppl - row["perplexity"]) / ppl
        worst = max(worst, rel)
        if rel > 1e-4:
            fail(f"{folder}: perplexity {row['perplexity']} vs transformers' {ppl} on {text[:60]!r}")
    print(f"ok {folder}: {NEW_TOKENS}-token greedy continuations equal, {len(texts)} perplexities within {worst:.2g}")


def check_classifier(bin_path, folder, texts, tmp):
    """pretrained_check.py's check: transformers' logits and labels (ham, spam) against ours."""
    pretrained_check.check(os.path.dirname(bin_path), folder, texts, tmp)


def check(bin_path, corpus, folders):
    texts = [t for t in mails(corpus, 17) if t.strip()]  # a text of no tokens is no input for transformers
    with tempfile.TemporaryDirectory() as tmp:
        for folder in folders:
            arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
            if arch.endswith("ForCausalLM") or arch.endswith("LMHeadModel"):
                check_lm(bin_path, folder, texts, tmp)
            else:
                check_classifier(bin_path, folder, texts, tmp)


def make(out_dir, corpus, kinds):
    import hf_folders
    hf_folders.make_decoders(out_dir, corpus, kinds)


KINDS = ["gpt2", "llama3", "qwen2", "llama2", "mistral"]


def main():
    if len(sys.argv) == 3:
        with tempfile.TemporaryDirectory() as tmp:
            make(tmp, sys.argv[2], KINDS)
            return check(sys.argv[1], sys.argv[2], [os.path.join(tmp, k) for k in KINDS])
    if sys.argv[1] == "make":
        kinds = sys.argv[sys.argv.index("--kinds") + 1].split(",") if "--kinds" in sys.argv else KINDS
        return make(sys.argv[2], sys.argv[3], kinds)
    if sys.argv[1] == "check":
        return check(sys.argv[2], sys.argv[3], sys.argv[4:])
    sys.exit(__doc__)


if __name__ == "__main__":
    main()

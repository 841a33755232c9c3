"""Test helpers: model folders in export.h's layout written from Python (random weights),
a tiny labelled corpus, and the validation split of common/format/shard.cc."""
import hashlib
import json
import os
import random
import struct

import torch

from nightshift.modules import GptLM, TransformerClassifier

WORDS = {"ham": "meeting lunch report project team schedule review budget agenda notes".split(),
         "spam": "cheap offer winner prize click free money pills casino deal".split()}
COMMON = "the a and to of you your for is in on with this that".split()


def corpus(n, seed=7):
    """n (text, label) pairs; each label has its own words plus common ones; some odd bytes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        label = "spam" if rng.random() < 0.5 else "ham"
        words = [rng.choice(WORDS[label] if rng.random() < 0.4 else COMMON) for _ in range(rng.randint(3, 40))]
        text = " ".join(words)
        if i % 7 == 0:
            text += "\tcaf\u00e9\nline two \u20ac"
        out.append((text, label))
    return out


def train_tokenizer(texts, path_prefix, vocab_size=64):
    import sentencepiece
    sentencepiece.SentencePieceTrainer.Train(
        sentence_iterator=iter(t.replace("\n", " ").replace("\t", " ") for t in texts), model_prefix=path_prefix,
        vocab_size=vocab_size, model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2)
    return path_prefix + ".model"


def write_checksums(folder, algorithm="sha256"):
    """checksums.json as the export writes it (sha256), or as folders before it held it (sha1)."""
    files = {}
    for name in sorted(os.listdir(folder)):
        if name == "checksums.json":
            continue
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        files[name] = {"bytes": len(data), algorithm: hashlib.new(algorithm, data).hexdigest()}
    with open(os.path.join(folder, "checksums.json"), "w") as f:
        json.dump({"algorithm": algorithm, "files": files}, f)


def write_folder(folder, arch, tokenizer_model, vocab_size, labels=None, seed=0, **sizes):
    """A model folder with random weights; returns config.json's dict."""
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    cfg = {"format": "nightshift-model", "version": 1, "arch": arch, "layers": 2, "d_model": 32, "heads": 4,
           "ffn": 64, "max_len": 24, "dropout": 0.1, "attention_dropout": 0.0, "vocab_size": vocab_size,
           "num_classes": len(labels or []), "labels": labels or [], "pad_id": 0, "bos_id": 2, "eos_id": 3,
           "job_id": "j-python", "step": 0, "metrics": {}}
    cfg.update(sizes)
    torch.manual_seed(seed)
    if arch == "transformer_classifier":
        module = TransformerClassifier(cfg)
        for p in module.parameters():  # LayerNorms away from 1/0, so a mix-up shows
            torch.nn.init.normal_(p, std=0.3)
        tensors = {k: v.contiguous() for k, v in module.state_dict().items()}
        cfg["tensor_names"] = "nightshift"
    else:
        module = GptLM(cfg)
        for p in module.parameters():
            torch.nn.init.normal_(p, std=0.3)
        sd = module.state_dict()
        tensors = {"transformer.wte.weight": sd["tok_emb.weight"], "transformer.wpe.weight": sd["pos_emb.weight"],
                   "transformer.ln_f.weight": sd["ln_f.weight"], "transformer.ln_f.bias": sd["ln_f.bias"]}
        names = {"ln1": "ln_1", "qkv": "attn.c_attn", "proj": "attn.c_proj", "ln2": "ln_2", "fc1": "mlp.c_fc",
                 "fc2": "mlp.c_proj"}
        for i in range(cfg["layers"]):
            for ours, theirs in names.items():
                w = sd[f"blocks.{i}.{ours}.weight"]
                tensors[f"transformer.h.{i}.{theirs}.weight"] = w if ours.startswith("ln") else w.t().contiguous()
                tensors[f"transformer.h.{i}.{theirs}.bias"] = sd[f"blocks.{i}.{ours}.bias"]
        cfg.update({"tensor_names": "gpt2", "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                    "n_embd": cfg["d_model"], "n_layer": cfg["layers"], "n_head": cfg["heads"], "n_inner": cfg["ffn"],
                    "n_positions": cfg["max_len"], "n_ctx": cfg["max_len"], "activation_function": "gelu_new",
                    "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                    "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0})
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(tokenizer_model, "rb") as src, open(os.path.join(folder, "tokenizer.model"), "wb") as dst:
        dst.write(src.read())
    write_checksums(folder)
    return cfg


def _fnv(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def in_validation_split(sample_id, seed, fraction):
    """common/format/shard.cc's InValidationSplit."""
    m = 0xFFFFFFFFFFFFFFFF
    h = _fnv(struct.pack("<Q", seed))
    h = _fnv(sample_id.encode(), h)
    h ^= h >> 30; h = (h * 0xbf58476d1ce4e5b9) & m
    h ^= h >> 27; h = (h * 0x94d049bb133111eb) & m
    h ^= h >> 31
    return (h >> 11) * (1.0 / 9007199254740992.0) < fraction

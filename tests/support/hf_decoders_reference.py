"""The reference numbers for hf_decoders_test.cc: tiny random Hugging Face decoders (GPT-2,
Llama with grouped-query attention, tied and untied, Mistral, Qwen2) built with transformers'
config classes and saved with save_pretrained (no hub download), as ...ForCausalLM and as
...ForSequenceClassification: their logits in evaluation mode, the gradients of one
training step, and greedy continuations, from transformers itself.

  hf_decoders_reference.py OUT_DIR

writes OUT_DIR/<case>_<task>/ (a model folder; task lm or cls) and OUT_DIR/reference.json:
  {"input_ids": [[...]], "attention_mask": [[...]], "labels": [...], "prompt": [...],
   "cases": {"<case>_<task>": {"arch", "task", "logits", "grads": {name: nested list},
                               "generated": [...] (lm only)}}}
Causal LM: logits [B, L, V] (compared where attention_mask is 1), gradients of the mean
next-token cross-entropy (labels = input_ids, -100 at padding: transformers shifts them).
Classification: logits [B, C], gradients of the mean cross-entropy against `labels`; the
padding id is 0 and the last token that is not 0 is read. Every dropout probability is 0
(set in the config). Fails (exit 1) if eager and SDPA attention disagree by more than 1e-5.
"""
import copy
import json
import os
import sys

import torch
from transformers import (AutoModelForCausalLM, AutoModelForSequenceClassification, GPT2Config, LlamaConfig,
                          MistralConfig, Qwen2Config)

VOCAB = 96
LENGTHS = [9, 6, 3]
TARGETS = [0, 2, 1]
LABELS = {0: "ham", 1: "spam", 2: "eggs"}
PROMPT = [1, 17, 42, 5, 77]
NEW_TOKENS = 12
PAD, BOS, EOS = 0, 1, 2


def configs():
    ids = dict(vocab_size=VOCAB, bos_token_id=BOS, eos_token_id=EOS, id2label=LABELS,
               label2id={v: k for k, v in LABELS.items()})
    llama = dict(hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, attention_dropout=0.0, **ids)
    return {
        "gpt2": GPT2Config(n_embd=32, n_layer=2, n_head=4, n_inner=48, n_positions=40, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0, **ids),
        "llama": LlamaConfig(rope_theta=500000.0, **llama),
        "llama_tied": LlamaConfig(tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
                                  **dict(llama, num_key_value_heads=4)),
        "mistral": MistralConfig(sliding_window=4096, head_dim=16, **llama),
        "qwen2": Qwen2Config(tie_word_embeddings=True, **llama),
    }


# Parameters whose gradients are compared.
GRADS = {
    "gpt2": ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.weight",
             "transformer.h.1.mlp.c_proj.bias", "transformer.ln_f.weight"],
    "llama": ["model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
              "model.layers.1.mlp.gate_proj.weight", "model.layers.1.post_attention_layernorm.weight", "model.norm.weight"],
}
HEAD_GRADS = {"lm": {"gpt2": [], "llama": ["lm_head.weight"], "llama_tied": [], "qwen2": [], "mistral": ["lm_head.weight"]},
              "cls": ["score.weight"]}
EXTRA_GRADS = {"llama_tied": ["model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.up_proj.bias"],
               "qwen2": ["model.layers.1.self_attn.q_proj.bias", "model.layers.0.self_attn.v_proj.bias"]}


def inputs():
    g = torch.Generator().manual_seed(7)
    ids = torch.full((len(LENGTHS), max(LENGTHS)), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        ids[row, :n] = torch.randint(3, VOCAB, (n,), generator=g)
        ids[row, 0] = BOS
        mask[row, :n] = 1
    return ids, mask


def randomize(model, seed):
    """Weights away from the init (every parameter moves the logits), small enough that the
    logits stay of order 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.2
            p.copy_(noise + 1 if ("ln" in name or "norm" in name) else noise)


def load(folder, task, impl):
    cls = AutoModelForCausalLM if task == "lm" else AutoModelForSequenceClassification
    return cls.from_pretrained(folder, attn_implementation=impl, dtype=torch.float32)


def reference(folder, case, task, ids, mask):
    out = {}
    for impl in ("eager", "sdpa"):
        m = load(folder, task, impl).eval()
        with torch.no_grad():
            out[impl] = m(input_ids=ids, attention_mask=mask).logits
    real = mask.bool() if task == "lm" else torch.ones(out["eager"].shape[0], dtype=torch.bool)
    diff = (out["eager"][real] - out["sdpa"][real]).abs().max().item()
    print(f"{folder}: |eager - sdpa| {diff:.2e}")
    if diff > 1e-5:
        sys.exit("FAIL: eager and sdpa attention disagree")
    m.train()  # the sdpa model; every dropout is 0
    if task == "lm":
        loss = m(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
    else:
        loss = torch.nn.functional.cross_entropy(m(input_ids=ids, attention_mask=mask).logits, torch.tensor(TARGETS))
    loss.backward()
    params = dict(m.named_parameters())
    arch = "gpt2" if case == "gpt2" else "llama"
    names = GRADS[arch] + (HEAD_GRADS["cls"] if task == "cls" else HEAD_GRADS["lm"][case]) + EXTRA_GRADS.get(case, [])
    result = {"arch": arch, "task": task, "logits": out["eager"].tolist(),
              "grads": {n: params[n].grad.tolist() for n in names}, "loss": loss.item()}
    if task == "lm":
        m.eval()
        with torch.no_grad():
            gen = m.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=EOS,
                             eos_token_id=EOS)
        result["generated"] = gen[0, len(PROMPT):].tolist()
    return result


def save_tokenizer(folder):
    """A word-level tokenizer of the folders' ids ("w3" is id 3), which a job's export copies
    (the trainer tests' shards are ids already)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>").save_pretrained(folder)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    ids, mask = inputs()
    cases = {}
    for seed, (case, config) in enumerate(configs().items()):
        for task in ("lm", "cls"):
            torch.manual_seed(seed)
            c = copy.deepcopy(config)
            if task == "cls":
                c.pad_token_id = PAD  # transformers needs one to batch; the last non-padding token is read
            model = (AutoModelForCausalLM if task == "lm" else AutoModelForSequenceClassification).from_config(c)
            randomize(model, 10 * seed + (task == "cls"))
            folder = os.path.join(out_dir, f"{case}_{task}")
            model.save_pretrained(folder, **({"max_shard_size": "20KB"} if case == "llama" and task == "lm" else {}))
            save_tokenizer(folder)
            cases[f"{case}_{task}"] = reference(folder, case, task, ids, mask)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump({"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "labels": TARGETS, "prompt": PROMPT,
                   "new_tokens": NEW_TOKENS, "eos": EOS, "cases": cases}, f)
    print("wrote", os.path.join(out_dir, "reference.json"))


if __name__ == "__main__":
    main()

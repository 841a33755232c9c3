"""The reference numbers for hf_models_test.cc: tiny random Hugging Face classifiers
(BERT, RoBERTa, DistilBERT) built with transformers' config classes and saved with
save_pretrained (no hub download), their logits in evaluation mode and the gradients of
one training step, from transformers itself.

  hf_models_reference.py OUT_DIR
  hf_models_reference.py --bert-base OUT_DIR   (a random BERT-base classifier in 100 MB
                                                shards, for the loading-memory check)

writes OUT_DIR/<case>/ (a model folder) for each case and OUT_DIR/reference.json:
  {"input_ids": [[...]], "attention_mask": [[...]], "labels": [...],
   "cases": {case: {"logits": [[...]], "grads": {param name: nested list}}}}
The gradients are those of the mean cross-entropy of the logits against `labels`, in
training mode with every dropout probability 0 (set in the config), from the folder as
saved (so fp16/bf16 cases are the rounded weights, upcast to fp32 on loading).
Fails (exit 1) if eager and SDPA attention disagree by more than 1e-5.
"""
import copy
import json
import os
import sys

import torch
from transformers import (AutoModelForSequenceClassification, BertConfig, BertModel, DistilBertConfig,
                          RobertaConfig)

VOCAB = 100
LABELS = {0: "ham", 1: "spam", 2: "eggs"}
# Three rows of lengths 9, 6 and 3, padding at the end; ids 3..99 are ordinary tokens.
LENGTHS = [9, 6, 3]
TARGETS = [0, 2, 1]

# Parameters whose gradients are compared, per architecture.
GRADS = {
    "bert": ["bert.embeddings.word_embeddings.weight", "bert.embeddings.LayerNorm.weight",
             "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.1.output.dense.weight",
             "bert.pooler.dense.weight", "classifier.weight", "classifier.bias"],
    "roberta": ["roberta.embeddings.word_embeddings.weight", "roberta.embeddings.position_embeddings.weight",
                "roberta.encoder.layer.0.attention.self.key.weight", "roberta.encoder.layer.1.intermediate.dense.bias",
                "classifier.dense.weight", "classifier.out_proj.weight"],
    "distilbert": ["distilbert.embeddings.word_embeddings.weight", "distilbert.embeddings.position_embeddings.weight",
                   "distilbert.transformer.layer.0.attention.q_lin.weight", "distilbert.transformer.layer.1.ffn.lin1.weight",
                   "distilbert.transformer.layer.1.output_layer_norm.bias", "pre_classifier.weight", "classifier.weight"],
}


def inputs(pad_id, first_id):
    g = torch.Generator().manual_seed(7)
    ids = torch.full((len(LENGTHS), max(LENGTHS)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(LENGTHS):
        ids[row, :n] = torch.randint(3, VOCAB, (n,), generator=g)
        ids[row, 0] = first_id
        mask[row, :n] = 1
    return ids, mask


def configs(vocab=VOCAB):
    common = dict(vocab_size=vocab, id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    bert = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=40, type_vocab_size=2, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, classifier_dropout=0.0, layer_norm_eps=1e-7, **common)
    return {
        "bert": BertConfig(pad_token_id=0, **bert),
        "roberta": RobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2, **bert),
        "distilbert": DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=40,
                                       dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0, pad_token_id=0,
                                       **common),
    }


def randomize(model, seed):
    """Weights far from the 0.02-normal init, so that every parameter moves the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.3
            p.copy_(noise + 1 if "LayerNorm" in name or "layer_norm" in name else noise)


def reference(folder, arch, ids, mask):
    out = {}
    for impl in ("eager", "sdpa"):
        m = AutoModelForSequenceClassification.from_pretrained(folder, attn_implementation=impl, dtype=torch.float32)
        m.eval()
        with torch.no_grad():
            out[impl] = m(input_ids=ids, attention_mask=mask).logits
    diff = (out["eager"] - out["sdpa"]).abs().max().item()
    print(f"{folder}: |eager - sdpa| {diff:.2e}")
    if diff > 1e-5:
        print("FAIL: eager and sdpa attention disagree")
        sys.exit(1)
    m.train()  # the sdpa model; every dropout is 0
    loss = torch.nn.functional.cross_entropy(m(input_ids=ids, attention_mask=mask).logits, torch.tensor(TARGETS))
    loss.backward()
    params = dict(m.named_parameters())
    grads = {name: params[name].grad.tolist() for name in GRADS[arch]}
    return {"arch": arch, "logits": out["eager"].tolist(), "grads": grads}


def bert_base(out_dir):
    """A randomly initialised BERT-base (110 million parameters) saved in shards."""
    torch.manual_seed(0)
    config = BertConfig(id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    AutoModelForSequenceClassification.from_config(config).save_pretrained(out_dir, max_shard_size="100MB")
    print("wrote", out_dir)


def main():
    if sys.argv[1] == "--bert-base":
        return bert_base(sys.argv[2])
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    cases = {}
    result = {"labels": TARGETS, "inputs": {}, "cases": cases}
    for seed, (arch, config) in enumerate(configs().items()):
        ids, mask = inputs(config.pad_token_id, 0 if arch == "roberta" else 2)
        result["inputs"][arch] = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                                  "pad_token_id": config.pad_token_id}
        model = AutoModelForSequenceClassification.from_config(config)
        randomize(model, seed)
        saves = {arch: {}}
        if arch == "bert":  # the other ways a folder holds its weights
            saves["bert_fp16"] = {"dtype": torch.float16}
            saves["bert_sharded"] = {"max_shard_size": "20KB"}
        if arch == "distilbert":
            saves["distilbert_bf16"] = {"dtype": torch.bfloat16}
        for case, how in saves.items():
            folder = os.path.join(out_dir, case)
            m = copy.deepcopy(model).to(how["dtype"]) if "dtype" in how else model  # .to() is in place
            m.save_pretrained(folder, **({"max_shard_size": how["max_shard_size"]} if "max_shard_size" in how else {}))
            cases[case] = reference(folder, arch, ids, mask)
    # A bare BertModel (no "bert." prefix, no classification head): loads with a new head.
    bare = BertModel(configs()["bert"], add_pooling_layer=True)
    randomize(bare, 9)
    bare.save_pretrained(os.path.join(out_dir, "bert_bare"))
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(result, f)
    print("wrote", os.path.join(out_dir, "reference.json"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Small Hugging Face model folders as transformers saves them, made here (no download):
a tokenizer trained on the given texts (WordPiece for bert and distilbert, byte-level BPE
for roberta) and a randomly initialised ...ForSequenceClassification of tiny sizes.

  hf_folders.py OUT_DIR CORPUS_DIR [--kinds bert,roberta,distilbert] [--vocab 1000]
                [--hidden 32] [--layers 2] [--heads 4] [--ffn 2*hidden] [--labels a,b]

--vocab is the tokenizer's target size and the model's vocab_size (at least the tokenizer's).

writes OUT_DIR/<kind>/ (config.json, model.safetensors, tokenizer.json, ...). CORPUS_DIR is
read like data.path text_dir (every file under it); the tokenizer trains on a tenth of it.
"""
import argparse
import os

import torch
from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer
from transformers import (AutoModelForSequenceClassification, BertConfig, BertTokenizerFast, DistilBertConfig,
                          DistilBertTokenizerFast, RobertaConfig, RobertaTokenizerFast)


def texts_of(corpus):
    paths = sorted(os.path.join(root, f) for root, _, files in os.walk(corpus) for f in files)
    return [open(p, "rb").read().decode("utf-8", errors="replace") for p in paths[::10]]


def tokenizer(kind, texts, vocab, tmp):
    os.makedirs(tmp, exist_ok=True)
    if kind == "roberta":
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(texts, vocab_size=vocab, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        bpe.save_model(tmp)
        return RobertaTokenizerFast(vocab=os.path.join(tmp, "vocab.json"), merges=os.path.join(tmp, "merges.txt"))
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(texts, vocab_size=vocab)
    wp.save_model(tmp)
    cls = DistilBertTokenizerFast if kind == "distilbert" else BertTokenizerFast
    return cls(vocab=os.path.join(tmp, "vocab.txt"))


def config(kind, tok, args, labels):
    ids = dict(vocab_size=max(len(tok), args.vocab), pad_token_id=tok.pad_token_id, id2label=dict(enumerate(labels)),
               label2id={n: i for i, n in enumerate(labels)})
    if kind == "distilbert":
        return DistilBertConfig(dim=args.hidden, n_layers=args.layers, n_heads=args.heads, hidden_dim=args.ffn,
                                max_position_embeddings=512, **ids)
    cls = RobertaConfig if kind == "roberta" else BertConfig
    positions = 514 if kind == "roberta" else 512  # roberta's start after the padding id
    return cls(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
               intermediate_size=args.ffn, max_position_embeddings=positions, **ids)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("corpus")
    p.add_argument("--kinds", default="bert,roberta,distilbert")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=0, help="feed-forward width (0: 2 x hidden)")
    p.add_argument("--labels", default="LABEL_0,LABEL_1")
    args = p.parse_args()
    args.ffn = args.ffn or 2 * args.hidden
    texts = texts_of(args.corpus)
    torch.manual_seed(0)
    for kind in args.kinds.split(","):
        folder = os.path.join(args.out, kind)
        tok = tokenizer(kind, texts, args.vocab, os.path.join(args.out, "vocab-" + kind))
        model = AutoModelForSequenceClassification.from_config(config(kind, tok, args, args.labels.split(",")))
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        print(folder)


if __name__ == "__main__":
    main()

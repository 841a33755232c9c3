#!/usr/bin/env python3
"""Small Hugging Face model folders as transformers saves them, made here (no download):
a tokenizer trained on the given texts (WordPiece for bert and distilbert, byte-level BPE
for roberta) and a randomly initialised ...ForSequenceClassification of tiny sizes.

  hf_folders.py OUT_DIR CORPUS_DIR [--kinds bert,roberta,distilbert] [--vocab 1000]
                [--hidden 32] [--layers 2] [--heads 4] [--ffn 2*hidden] [--labels a,b]
                [--kv-heads N]

Decoder kinds (gpt2, llama3, qwen2, llama2, mistral) are ...ForCausalLM folders with
decoder_tokenizer's tokenizer (see there).

--vocab is the tokenizer's target size and the model's vocab_size (at least the tokenizer's).

writes OUT_DIR/<kind>/ (config.json, model.safetensors, tokenizer.json, ...). CORPUS_DIR is
read like data.path text_dir (every file under it); the tokenizer trains on a tenth of it.

For decoder-only models, decoder_tokenizer(kind, texts, vocab, tmp) builds the tokenizer of
gpt2, llama3, qwen2, llama2 or mistral (the last two from a sentencepiece tokenizer.model) as
transformers 5.24 does, and save_decoder_tokenizer(tok, folder) writes it into a folder as
the Hub's are (tests/tokenizer/equality_test.py checks our ids on these).
"""
import argparse
import json
import os
import shutil

import torch
from tokenizers import (BertWordPieceTokenizer, ByteLevelBPETokenizer, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
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


# The pre-tokenizer expressions of Llama 3 (tiktoken's cl100k, digits in threes) and Qwen2
# (digits one by one), as their tokenizer.json files hold them.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_level_bpe(texts, vocab, pattern, normalizer=None, ignore_merges=False):
    """A byte-level BPE trained on `texts` with `pattern` split before a ByteLevel without
    regex (Llama 3's and Qwen2's pipeline); its special tokens are added after, above the
    trained vocabulary, as in the real files."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return tok


def _sentencepiece(texts, vocab, tmp, **flags):
    """A sentencepiece BPE model with Llama 2's training flags (byte_fallback, digits split,
    no normalization, <unk> <s> </s> at 0 1 2), trained on `texts`: tmp/tokenizer.model."""
    import sentencepiece as spm  # only this kind needs it
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_prefix=os.path.join(tmp, "tokenizer"), vocab_size=vocab, model_type="bpe",
        byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=1 << 20, minloglevel=2, num_threads=1, **flags)
    return os.path.join(tmp, "tokenizer.model")


def decoder_tokenizer(kind, texts, vocab, tmp):
    """The tokenizer of a decoder-only model, trained on `texts` (a vocabulary of about
    `vocab`), as transformers 5.24 builds it for such a folder:

      gpt2    GPT2TokenizerFast: byte-level BPE, GPT-2's ByteLevel regex, <|endoftext|>, no
              special token added to a text
      llama3  PreTrainedTokenizerFast around Llama 3's tokenizer.json: Split(Llama 3's
              expression) + ByteLevel(use_regex false), BPE ignore_merges, <|begin_of_text|>
              put in front by a TemplateProcessing, Llama 3's special tokens
      qwen2   Qwen2Tokenizer: NFC, Split(Qwen2's expression) + ByteLevel, <|endoftext|>
              (unk, eos, pad), <|im_start|>, <|im_end|>, nothing added
      llama2  LlamaTokenizer from a sentencepiece model (tokenizer.model, kept in the
              folder as the Hub's Llama 2 folders keep it): <s> in front, legacy false
      mistral as llama2, legacy true (a space before the text after each special token)

    Returns the tokenizer object; its save_pretrained(folder) writes the folder (for
    llama2 and mistral, also copy tok.nightshift_model there: see save_decoder_tokenizer)."""
    from transformers import GPT2TokenizerFast, LlamaTokenizer, PreTrainedTokenizerFast, Qwen2Tokenizer
    os.makedirs(tmp, exist_ok=True)
    if kind == "gpt2":
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(texts, vocab_size=vocab, special_tokens=["<|endoftext|>"], show_progress=False)
        bpe.save_model(tmp)
        return GPT2TokenizerFast(vocab=os.path.join(tmp, "vocab.json"), merges=os.path.join(tmp, "merges.txt"))
    if kind == "llama3":
        tok = _byte_level_bpe(texts, vocab, LLAMA3_PATTERN, ignore_merges=True)
        tok.add_special_tokens(LLAMA3_SPECIALS)
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
                                       model_input_names=["input_ids", "attention_mask"], model_max_length=131072)
    if kind == "qwen2":
        tok = _byte_level_bpe(texts, vocab, QWEN2_PATTERN, normalizer=normalizers.NFC())
        model = json.loads(tok.to_str())["model"]
        vocab_map = dict(model["vocab"])
        for special in QWEN2_SPECIALS:  # above the trained vocabulary
            vocab_map.setdefault(special, len(vocab_map))
        merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
        return Qwen2Tokenizer(vocab=vocab_map, merges=merges, additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    if kind in ("llama2", "mistral"):
        model = _sentencepiece(texts, vocab, tmp)
        # As the Hub's folders: tokenizer.model and a tokenizer_config.json naming the class.
        with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                       "legacy": kind == "mistral", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                       "clean_up_tokenization_spaces": False, "model_max_length": 4096}, f)
        tok = LlamaTokenizer.from_pretrained(tmp)
        tok.nightshift_model = model
        return tok
    raise ValueError(f"unknown decoder tokenizer kind {kind!r}")


def save_decoder_tokenizer(tok, folder, tokenizer_json=True):
    """tok.save_pretrained(folder); for a sentencepiece kind also its tokenizer.model and
    the settings the Hub's Llama 2 and Mistral tokenizer_config.json files hold (legacy,
    add_bos_token, add_eos_token), which 5.24 saves in tokenizer.json only. transformers
    5.24 reads legacy from tokenizer_config.json, and the ids around a text from
    tokenizer.json when there is one (tokenizer_json=False deletes it: then from
    add_bos_token / add_eos_token)."""
    tok.save_pretrained(folder)
    model = getattr(tok, "nightshift_model", None)
    if model:
        shutil.copy(model, os.path.join(folder, "tokenizer.model"))
        path = os.path.join(folder, "tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        with open(os.path.join(os.path.dirname(model), "tokenizer_config.json")) as f:
            hub = json.load(f)
        config.update({k: hub[k] for k in ("legacy", "add_bos_token", "add_eos_token")})
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
        if not tokenizer_json:
            os.remove(os.path.join(folder, "tokenizer.json"))


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


DECODER_KINDS = ("gpt2", "llama3", "qwen2", "llama2", "mistral")


def decoder_config(kind, tok, args):
    """A tiny ...ForCausalLM config of `kind` for tokenizer `tok` (its special ids)."""
    from transformers import GPT2Config, LlamaConfig, MistralConfig, Qwen2Config
    ids = dict(vocab_size=max(len(tok), args.vocab), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    if kind == "gpt2":
        return GPT2Config(n_embd=args.hidden, n_layer=args.layers, n_head=args.heads, n_inner=args.ffn, n_positions=512,
                          **ids)
    sizes = dict(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                 num_key_value_heads=args.kv_heads or args.heads, intermediate_size=args.ffn,
                 max_position_embeddings=1024, **ids)
    if kind == "qwen2":
        return Qwen2Config(tie_word_embeddings=True, rope_theta=1000000.0, **sizes)
    if kind == "mistral":
        return MistralConfig(sliding_window=4096, **sizes)
    return LlamaConfig(rope_theta=500000.0 if kind == "llama3" else 10000.0, **sizes)


def make_decoders(out, corpus, kinds, args=None):
    """OUT/<kind>/ for each decoder kind: its tokenizer trained on the corpus and a randomly
    initialised ...ForCausalLM (a job fine-tunes it as a causal LM, or as a classifier with
    a new score head)."""
    from transformers import AutoModelForCausalLM
    args = args or argparse.Namespace(vocab=1000, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64)
    texts = texts_of(corpus)
    torch.manual_seed(0)
    for kind in kinds:
        folder = os.path.join(out, kind)
        tok = decoder_tokenizer(kind, texts, args.vocab, os.path.join(out, "vocab-" + kind))
        AutoModelForCausalLM.from_config(decoder_config(kind, tok, args)).save_pretrained(folder)
        save_decoder_tokenizer(tok, folder)
        print(folder)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("corpus")
    p.add_argument("--kinds", default="bert,roberta,distilbert")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0, help="decoders: key/value heads (0: --heads)")
    p.add_argument("--ffn", type=int, default=0, help="feed-forward width (0: 2 x hidden)")
    p.add_argument("--labels", default="LABEL_0,LABEL_1")
    args = p.parse_args()
    args.ffn = args.ffn or 2 * args.hidden
    kinds = args.kinds.split(",")
    decoders = [k for k in kinds if k in DECODER_KINDS]
    if decoders:
        make_decoders(args.out, args.corpus, decoders, args)
    texts = texts_of(args.corpus)
    torch.manual_seed(0)
    for kind in (k for k in kinds if k not in DECODER_KINDS):
        folder = os.path.join(args.out, kind)
        tok = tokenizer(kind, texts, args.vocab, os.path.join(args.out, "vocab-" + kind))
        model = AutoModelForSequenceClassification.from_config(config(kind, tok, args, args.labels.split(",")))
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        print(folder)


if __name__ == "__main__":
    main()

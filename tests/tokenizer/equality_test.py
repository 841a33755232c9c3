#!/usr/bin/env python3
"""Our tokenizers give the ids Hugging Face `tokenizers` gives, text for text.

usage: equality_test.py BIN_DIR CORPUS_DIR

Builds tokenizer folders as transformers saves them (no download: vocabularies are trained
here on the corpus): BERT uncased and cased and DistilBERT (WordPiece) and RoBERTa (byte-level
BPE, with its <mask> taking the space on its left as roberta-base's does); GPT-2, Llama 3 and
Qwen2 (byte-level BPE, each with its own pre-tokenizer expression and special tokens) and
Llama 2 and Mistral (a sentencepiece tokenizer.model, read by nightshift-tokenize with the
sentencepiece library: Llama 2's with tokenizer.json beside it, legacy false; Mistral's
without, legacy true), built by tests/support/hf_folders.py decoder_tokenizer, and the Llama 2 one
as transformers 5.24 saves it (tokenizer.json only: Metaspace, BPE with byte_fallback,
read by our own pipeline). Then every mail of
the corpus and every hard text below goes through AutoTokenizer(text, truncation=...,
max_length=...) and through bin/nightshift-tokenize, without a limit (every mail) and at
max_len 64 (every tenth mail, every hard text; DistilBERT only so, as its pipeline
differs from BERT uncased's only in its post-processor); any
difference fails the test, naming the folder, the text and the first differing position.
A mail is read as transformers' user reads a file: bytes decoded as UTF-8 with U+FFFD for
ill-formed sequences; nightshift-tokenize gets the raw bytes and must do the same.

Decoding: for every folder, the reference ids of the max_len 64 pass (every tenth mail,
every hard text), the whole ids of every thirtieth mail (every tenth would cost ~12 s more
of CI's CPU), and id lists that no text gives (generated ids can be anything: random ids
of the vocabulary, specials among them; every prefix and suffix of the ids of multi-byte
characters, which cuts a character; byte tokens alone and in runs; special tokens inside
a text; ids no token has) go through nightshift-tokenize --decode and AutoTokenizer's
tok.decode(ids, skip_special_tokens=True), and the non-text lists also with
skip_special_tokens=False (--keep-special). Three folders are checked for decoding only,
for settings the others lack: BERT uncased with clean_up_tokenization_spaces true, and
Llama 2 (tokenizer.json only) and Mistral (tokenizer.model only) with add_prefix_space
false (no leading space stripped). Any difference fails the test, naming the folder, the
ids and the first differing character.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer
from transformers import AutoTokenizer, BertTokenizerFast, DistilBertTokenizerFast, RobertaTokenizerFast

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
import hf_folders  # noqa: E402  (tests/support/hf_folders.py)

HARD = [
    b"", b" ", b"\n\n\n", b"   leading and trailing   ", b"runs   of\t\tspaces\n\n\nand\r\nnewlines",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u00dcber STRASSE stra\u00dfe".encode(),
    "combining: e\u0301 a\u0308 n\u0303 \u1e9b\u0323 \u0645\u064e".encode(),
    "decomposed vs composed: \u00e9 e\u0301 \u212b \u00c5 \ufb01 \u2460 \uff21\uff22".encode(),
    "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \U00020000\U0002a6d6".encode(),
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f flags \U0001f1eb\U0001f1f7".encode(),
    "zero\u200bwidth\u200cjoin\u200dnon\ufeffbreaking\u00a0space\u2003em\u3000ideographic".encode(),
    b"controls \x00 \x01 \x07 \x1b[31m \x7f end", "c1 \u0085 \u009c soft\u00adhyphen".encode(),
    "\ufffd replacement \U0010ffff private \ue000".encode(),
    b"invalid \xff\xfe utf-8 \xc3\x28 \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98 truncated",
    b"x" * 120 + b" " + b"antidisestablishmentarianism" * 8,
    b"Don't you'll we've I'M THEY'RE it's 'quoted' \"double\"",
    "\u0130stanbul \u0049 \u1e9e \u03a3\u03c3\u03c2 \u039f\u0394\u03a5\u03a3\u03a3\u0395\u03a5\u03a3".encode(),
    b"numbers 3.14159 1,000,000 0x1F 2026-12-02 12:00:00 +1 (555) 123-4567",
    b"punct !!! ??? ... --- ___ *** ### $$$ %%% ^^^ &&& ~~~ `code` <tag> {json: [1, 2]}",
    b"urls https://example.com/a?b=c&d=e#f mailto:foo.bar+baz@example.org",
    b"[CLS] literal [SEP] specials [MASK] in [PAD] text [UNK]",
    b"<s> roberta <mask> specials</s><pad> <unk>  <mask>  x<mask>y",
    "<|begin_of_text|>llama<|end_of_text|> <|eot_id|>x <|endoftext|>qwen<|im_start|>user\n<|im_end|>".encode(),
    b" leading space", b"  two leading", "\u2581 literal metaspace \u2581x\u2581\u2581y <s>x</s> <unk>".encode(),
    b"digits 1 12 123 1234 12345 1234567890 3.14e-10", b"I'M 'S 'll 'LL we'RE \r\n\r\n  \n\t\n x",
    "mixed \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u05e2\u05d1\u05e8\u05d9\u05ea \u0e44\u0e17\u0e22 \u0939\u093f\u0928\u094d\u0926\u0940".encode(),
]


def mails(corpus):
    paths = [os.path.join(root, f) for root, _, files in os.walk(corpus) for f in files]
    if len(paths) < 1000:
        sys.exit(f"equality_test: {corpus} holds {len(paths)} files; run scripts/fetch-data.sh")
    return [open(p, "rb").read() for p in sorted(paths)]


def build_folders(tmp, texts):
    """Tokenizer folders as transformers saves them, vocabularies trained on `texts`."""
    folders = {}
    for cased in (False, True):
        wp = BertWordPieceTokenizer(lowercase=not cased)
        wp.train_from_iterator(texts, vocab_size=6000)
        vocab_dir = os.path.join(tmp, "wp-cased" if cased else "wp")
        os.makedirs(vocab_dir)
        wp.save_model(vocab_dir)
        vocab = os.path.join(vocab_dir, "vocab.txt")
        name = "bert-cased" if cased else "bert-uncased"
        BertTokenizerFast(vocab=vocab, do_lower_case=not cased).save_pretrained(os.path.join(tmp, name))
        folders[name] = os.path.join(tmp, name)
    DistilBertTokenizerFast(vocab=os.path.join(tmp, "wp", "vocab.txt")).save_pretrained(os.path.join(tmp, "distilbert"))
    folders["distilbert"] = os.path.join(tmp, "distilbert")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=6000, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(tmp)
    roberta = os.path.join(tmp, "roberta")
    RobertaTokenizerFast(vocab=os.path.join(tmp, "vocab.json"), merges=os.path.join(tmp, "merges.txt")).save_pretrained(roberta)
    # roberta-base's <mask> takes the space on its left (lstrip): so does ours.
    path = os.path.join(roberta, "tokenizer.json")
    doc = json.load(open(path))
    for t in doc["added_tokens"]:
        if t["content"] == "<mask>":
            t["lstrip"] = True
    json.dump(doc, open(path, "w"))
    folders["roberta"] = roberta
    return folders


# Decoder tokenizers: smaller vocabularies trained on fewer texts (the comparison still
# covers every text), to keep the test fast.
DECODERS = ("gpt2", "llama3", "qwen2", "llama2", "mistral")


def build_decoder_folders(tmp, texts):
    folders = {}
    for kind in DECODERS:
        folder = os.path.join(tmp, kind)
        tok = hf_folders.decoder_tokenizer(kind, texts, 3000, os.path.join(tmp, "vocab-" + kind))
        hf_folders.save_decoder_tokenizer(tok, folder, tokenizer_json=kind != "mistral")
        folders[kind] = folder
        if kind == "llama2":  # as transformers 5.24 saves it: tokenizer.json (Metaspace) only
            tok.save_pretrained(os.path.join(tmp, "llama2-json"))
            folders["llama2-json"] = os.path.join(tmp, "llama2-json")
    return folders


def with_config(tmp, folders, base, name, **settings):
    """A copy of folder `base` whose tokenizer_config.json has `settings` (decoding only)."""
    folder = os.path.join(tmp, name)
    shutil.copytree(folders[base], folder)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(settings)
    with open(path, "w") as f:
        json.dump(config, f)
    return folder


# Decoding only: settings none of the folders above has (see the docstring).
DECODE_ONLY = {"bert-cleanup": ("bert-uncased", {"clean_up_tokenization_spaces": True}),
               "llama2-json-noprefix": ("llama2-json", {"add_prefix_space": False}),
               "mistral-noprefix": ("mistral", {"add_prefix_space": False})}

# Texts whose ids hold multi-byte characters (several byte tokens, or byte-fallback ones).
CUT_TEXTS = ["\u4e2d\u6587 \U0001f600\U0001f44d\U0001f3fd caf\u00e9 \u05e2\u05d1", "\U0002a6d6\U0010ffff \ufffd"]


def odd_id_lists(tok, rng):
    """Id lists no text gives, as a model may generate them (see the docstring)."""
    size = len(tok)  # the vocabulary and the added tokens
    lists = [[rng.randrange(size) for _ in range(rng.randrange(1, 48))] for _ in range(200)]
    for text in CUT_TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        lists += [ids[:k] for k in range(1, len(ids))] + [ids[k:] for k in range(1, len(ids))]
    vocab = tok.get_vocab()
    # Byte tokens: byte-fallback <0xHH> and GPT-2's byte characters, alone and in runs that
    # are and are not UTF-8 (E5 8F AB is one character; C3 alone, FF, 80 never are).
    for spell in (lambda b: f"<0x{b:02X}>", lambda b: gpt2_byte_char(b)):
        for run in ([0xE5, 0x8F, 0xAB], [0xE5, 0x8F], [0xC3], [0xFF], [0x80, 0x41], [0x41, 0xE5, 0x8F, 0xAB, 0x8F],
                    [0x0A], [0x20, 0x20]):
            ids = [vocab.get(spell(b)) for b in run]
            if None not in ids:
                lists.append(ids)
    specials = tok.all_special_ids
    words = tok("x. y , don't", add_special_tokens=False)["input_ids"]
    lists += [[s] + words + [s] + words for s in specials] + [specials + words + specials]
    lists += [[size, size + 1000] + words + [size + 7]]  # ids no token has: skipped
    return lists


def gpt2_byte_char(b):
    """The character GPT-2's byte table writes for byte `b` (bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + [c for c in range(256) if c not in printable].index(b))


def check_decoding(bin_dir, tmp, name, folder, tok, id_lists, keep_special):
    """nightshift-tokenize --decode against tok.decode on `id_lists`; the number of
    differences (each printed: folder, ids, first differing character)."""
    in_path = os.path.join(tmp, f"{name}-{keep_special}.idlists")
    out_path = in_path + ".out"
    with open(in_path, "w") as f:
        f.writelines(json.dumps(ids) + "\n" for ids in id_lists)
    cmd = [os.path.join(bin_dir, "nightshift-tokenize"), folder, "--decode"] + (["--keep-special"] if keep_special else [])
    process = subprocess.Popen(cmd, stdin=open(in_path), stdout=open(out_path, "w"))
    want = [tok.decode(ids, skip_special_tokens=not keep_special) for ids in id_lists]
    if process.wait() != 0:
        sys.exit(f"equality_test: nightshift-tokenize --decode exited with {process.returncode} on {name}")
    with open(out_path, encoding="utf-8", newline="") as f:
        got = [json.loads(line) for line in f.read().split("\n")[:-1]]  # not splitlines: U+2028 is text
    assert len(got) == len(id_lists), f"{name}: {len(got)} decoded for {len(id_lists)} id lists"
    bad = [i for i in range(len(id_lists)) if want[i] != got[i]]
    for i in bad[:5]:
        at = next((k for k, (a, b) in enumerate(zip(want[i], got[i])) if a != b), min(len(want[i]), len(got[i])))
        print(f"  {name} decode(skip_special_tokens={not keep_special}) of {id_lists[i]}: first difference at "
              f"character {at}: want {want[i][at:at + 20]!r} got {got[i][at:at + 20]!r} "
              f"(lengths {len(want[i])}, {len(got[i])})")
    return len(bad)


def start_ours(bin_dir, folder, hex_path, max_len, out_path):
    """nightshift-tokenize over the texts, started now and awaited later (it runs beside the
    reference, on the other core)."""
    cmd = [os.path.join(bin_dir, "nightshift-tokenize"), folder]
    if max_len:
        cmd += ["--max-len", str(max_len)]
    return subprocess.Popen(cmd, stdin=open(hex_path), stdout=open(out_path, "w"))


def ours(process, out_path):
    if process.wait() != 0:
        sys.exit(f"equality_test: nightshift-tokenize exited with {process.returncode}")
    return [json.loads(line) for line in open(out_path)]


def reference(folder, texts, max_len):
    tok = AutoTokenizer.from_pretrained(folder)
    decoded = [t.decode("utf-8", errors="replace") for t in texts]
    if max_len:
        return tok(decoded, truncation=True, max_length=max_len)["input_ids"]
    tok.model_max_length = 10**9  # no limit, no warning
    return tok(decoded)["input_ids"]


def main():
    bin_dir, corpus = sys.argv[1], sys.argv[2]
    all_texts = mails(corpus) + HARD
    failures = 0
    decode_ids = {}  # folder name -> reference ids to decode
    with tempfile.TemporaryDirectory() as tmp:
        start = time.time()
        folders = build_folders(tmp, [t.decode("utf-8", errors="replace") for t in all_texts[::3]])
        folders.update(build_decoder_folders(tmp, [t.decode("utf-8", errors="replace") for t in all_texts[::10]]))
        print(f"folders built in {time.time() - start:.1f} s")
        # Truncation is checked on every tenth mail and every hard text; the rest of the
        # pipeline on everything, but for DistilBERT, whose pipeline is BERT uncased's but
        # for its post-processor: its every tenth mail is checked (with truncation), which
        # keeps CI's time (each folder costs ~20 s of CPU).
        for max_len, texts in ((0, all_texts), (64, all_texts[::10] + HARD)):
            hex_path = os.path.join(tmp, f"texts-{max_len}.hex")
            with open(hex_path, "w") as f:
                f.writelines(t.hex() + "\n" for t in texts)
            for name, folder in folders.items():
                if max_len == 0 and name == "distilbert":
                    continue
                start = time.time()
                out_path = os.path.join(tmp, f"{name}-{max_len}.ids")
                process = start_ours(bin_dir, folder, hex_path, max_len, out_path)
                want = reference(folder, texts, max_len)
                got = ours(process, out_path)
                assert len(got) == len(texts), f"{name}: {len(got)} results for {len(texts)} texts"
                bad = [i for i in range(len(texts)) if want[i] != got[i]]
                print(f"{name} max_len={max_len}: {len(texts) - len(bad)}/{len(texts)} texts equal "
                      f"({time.time() - start:.1f} s)")
                for i in bad[:5]:
                    at = next((k for k, (a, b) in enumerate(zip(want[i], got[i])) if a != b), min(len(want[i]), len(got[i])))
                    print(f"  text {i} ({texts[i][:80]!r}...): first difference at {at}: "
                          f"want {want[i][at:at + 8]} got {got[i][at:at + 8]} (lengths {len(want[i])}, {len(got[i])})")
                failures += len(bad)
                # Decoded below: the ids of the max_len 64 pass, and every thirtieth mail's whole.
                decode_ids.setdefault(name, []).extend(want if max_len else want[:-len(HARD):30])
        failures += check_all_decoding(bin_dir, tmp, folders, decode_ids)
    sys.exit(1 if failures else 0)


def check_all_decoding(bin_dir, tmp, folders, decode_ids):
    """Decoding (see the docstring), for every folder and the DECODE_ONLY ones; the number
    of differences."""
    start = time.time()
    failures = 0
    rng = random.Random(20261203)
    all_folders = dict(folders)
    for name, (base, settings) in DECODE_ONLY.items():
        all_folders[name] = with_config(tmp, folders, base, name, **settings)
        decode_ids[name] = decode_ids[base]  # the same vocabulary
    for name, folder in all_folders.items():
        tok = AutoTokenizer.from_pretrained(folder)
        odd = odd_id_lists(tok, rng)
        bad = check_decoding(bin_dir, tmp, name, folder, tok, decode_ids[name] + odd, keep_special=False)
        bad += check_decoding(bin_dir, tmp, name, folder, tok, odd, keep_special=True)
        print(f"{name} decode: {len(decode_ids[name]) + 2 * len(odd) - bad}/{len(decode_ids[name]) + 2 * len(odd)} "
              "id lists equal")
        failures += bad
    print(f"decoding checked in {time.time() - start:.1f} s")
    return failures


if __name__ == "__main__":
    main()

"""Hugging Face classifier folders through nightshift-predict, against transformers.

  hf_folder_test.py make OUT_DIR
      writes OUT_DIR/{bert,roberta,distilbert}: tiny random classifiers (labels ham, spam,
      eggs) with tokenizers trained here on a small corpus, saved by transformers
      (save_pretrained of the model and of the tokenizer; no download).
  hf_folder_test.py check PREDICT_BIN DIR...
      for each folder: transformers loads it (AutoModelForSequenceClassification and
      AutoTokenizer), its labels are config.json's "labels" when the folder has them (our
      export), nightshift-predict's logits on TEXTS equal transformers' within 1e-4 with the
      same labels, and its --tokens are AutoTokenizer's ids. Exit 1 naming what differs.
  hf_folder_test.py PREDICT_BIN
      the unit tests below: folders saved by transformers itself (not by us) run as above;
      a sha1 checksums.json still verifies and a file that does not match it fails; a
      folder without tokenizer.json, or of an unsupported model_type, fails naming it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "support"))

import hf_models_reference as ref  # noqa: E402  (configs, randomize)

CORPUS = [
    "The meeting is moved to Tuesday; bring the budget report.",
    "WIN a FREE prize now!!! Click here: http://example.com/offer?id=42",
    "Caf\u00e9 au lait, na\u00efve r\u00e9sum\u00e9s and \u00dcber-stra\u00dfe.",
    "\u4e2d\u6587 text, emoji \U0001f600 and tabs\tand\nnewlines.",
    "lunch with the team, then the project review and the schedule",
    "cheap pills, casino deals, money money money",
] * 20
TEXTS = [
    "The budget meeting is on Tuesday.",
    "FREE money!!! click now",
    "",
    "Na\u00efve caf\u00e9 \u00e9t\u00e9 \U0001f600 \u4e2d\u6587",
    "runs   of\tspaces\n\nand newlines",
    " ".join(["the project review and the lunch schedule"] * 20),  # longer than max_len: truncated
]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def save_tokenizer(arch, tmp, folder):
    """A tokenizer of the architecture's kind, trained on CORPUS, saved into `folder`."""
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer
    from transformers import BertTokenizerFast, DistilBertTokenizerFast, RobertaTokenizerFast
    if arch == "roberta":
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(CORPUS, vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        bpe.save_model(tmp)
        tok = RobertaTokenizerFast(vocab=os.path.join(tmp, "vocab.json"), merges=os.path.join(tmp, "merges.txt"))
    else:
        wp = BertWordPieceTokenizer(lowercase=True)  # [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4
        wp.train_from_iterator(CORPUS, vocab_size=300)
        wp.save_model(tmp)
        cls = DistilBertTokenizerFast if arch == "distilbert" else BertTokenizerFast
        tok = cls(vocab=os.path.join(tmp, "vocab.txt"))
    tok.save_pretrained(folder)
    return len(tok)


def make(out_dir):
    from transformers import AutoModelForSequenceClassification
    for seed, arch in enumerate(("bert", "roberta", "distilbert")):
        folder = os.path.join(out_dir, arch)
        with tempfile.TemporaryDirectory() as tmp:
            vocab = save_tokenizer(arch, tmp, folder)
        model = AutoModelForSequenceClassification.from_config(ref.configs(vocab)[arch])
        ref.randomize(model, seed)
        model.save_pretrained(folder)
        print("wrote", folder)


def max_len(folder):
    """nightshift-predict's rule (predict.h): our max_len, else the position table's rows
    (RoBERTa: less its offset) or tokenizer_config.json's model_max_length when fewer."""
    config = read_json(os.path.join(folder, "config.json"))
    if "max_len" in config:
        return config["max_len"]
    rows = config["max_position_embeddings"]
    if config["model_type"] == "roberta":
        rows -= config.get("pad_token_id", 1) + 1
    tok_config = read_json(os.path.join(folder, "tokenizer_config.json"))
    return int(min(rows, tok_config.get("model_max_length", rows)))


def predict(binary, folder, texts, *extra):
    """nightshift-predict on `texts` (JSON lines on stdin): its output lines, parsed."""
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    p = subprocess.run([binary, "--model", folder, "--jsonl", "--device", "cpu", *extra], input=lines,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{binary} --model {folder} exit {p.returncode}: {p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines()]


def check(binary, folder):
    """Returns "" or what differs between nightshift-predict and transformers on `folder`."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = read_json(os.path.join(folder, "config.json"))
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if "labels" in config and labels != config["labels"]:
        return f"{folder}: transformers' labels {labels}, the export's {config['labels']}"
    n = max_len(folder)
    ids = [tokenizer(t, truncation=True, max_length=n)["input_ids"] for t in TEXTS]
    ours = [r["ids"] for r in predict(binary, folder, TEXTS, "--tokens")]
    for text, want, got in zip(TEXTS, ids, ours):
        if want != got:
            return f"{folder}: --tokens of {text!r}: {got}, AutoTokenizer's {want}"
    batch = tokenizer(TEXTS, truncation=True, max_length=n, padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(**batch).logits
    rows = predict(binary, folder, TEXTS, "-o", "json", "--logits")
    logits = torch.tensor([r["logits"] for r in rows])
    diff = (logits - reference).abs().max().item()
    print(f"{folder}: max |nightshift-predict - transformers| logit difference {diff:.2e} over {len(TEXTS)} texts")
    if diff > 1e-4:
        return f"{folder}: logits differ by {diff}"
    want_labels = [labels[i] for i in reference.argmax(-1).tolist()]
    if [r["label"] for r in rows] != want_labels:
        return f"{folder}: labels {[r['label'] for r in rows]}, transformers' {want_labels}"
    return ""


def write_sha1_checksums(folder):
    """checksums.json as folders written before SHA-256 hold it."""
    import hashlib
    files = {}
    for name in sorted(os.listdir(folder)):
        if name != "checksums.json":
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            files[name] = {"bytes": len(data), "sha1": hashlib.sha1(data).hexdigest()}
    write_json(os.path.join(folder, "checksums.json"), {"algorithm": "sha1", "files": files})


class HfFolderTest(unittest.TestCase):
    BINARY = ""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="nightshift-hf-folder-")
        make(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def folder(self, arch, copy_as=None):
        src = os.path.join(self.tmp.name, arch)
        if copy_as is None:
            return src
        dst = os.path.join(self.tmp.name, copy_as)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        return dst

    def error_of(self, folder):
        p = subprocess.run([self.BINARY, "--model", folder, "--device", "cpu", "-"], input="some text\n",
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        return p.stderr

    def test_folders_saved_by_transformers_run_with_its_logits_and_ids(self):
        for arch in ("bert", "roberta", "distilbert"):
            self.assertEqual(check(self.BINARY, self.folder(arch)), "")

    def test_an_adapter_runs_on_its_base_with_pefts_logits(self):
        # PEFT's LoRA (B non-zero, the head trained whole) on the bert and gpt-less folders,
        # saved by PEFT: nightshift-predict --adapter gives PeftModel's logits.
        import torch
        from peft import LoraConfig, PeftModel, TaskType, get_peft_model
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        for arch in ("bert", "distilbert"):
            base = self.folder(arch)
            adapter = os.path.join(self.tmp.name, arch + "-adapter")
            torch.manual_seed(3)
            targets = ["q_lin", "v_lin"] if arch == "distilbert" else None
            peft = get_peft_model(AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32),
                                  LoraConfig(task_type=TaskType.SEQ_CLS, r=4, lora_alpha=8, target_modules=targets,
                                             init_lora_weights=False))
            with torch.no_grad():
                for name, p in peft.named_parameters():
                    if "classifier" in name:
                        p.normal_(0, 0.5)  # a head of its own, not the base's
            peft.save_pretrained(adapter)
            model = PeftModel.from_pretrained(AutoModelForSequenceClassification.from_pretrained(base), adapter).eval()
            tokenizer = AutoTokenizer.from_pretrained(base)
            batch = tokenizer(TEXTS, truncation=True, max_length=max_len(base), padding=True, return_tensors="pt")
            with torch.no_grad():
                reference = model(**batch).logits
            rows = predict(self.BINARY, base, TEXTS, "-o", "json", "--logits", "--adapter", adapter)
            diff = (torch.tensor([r["logits"] for r in rows]) - reference).abs().max().item()
            print(f"{arch} + adapter: max |nightshift-predict - PEFT| logit difference {diff:.2e}")
            self.assertLess(diff, 1e-4)
            # nightshift.load(base, adapter=...) runs the same through PEFT.
            sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
            import nightshift
            loaded = nightshift.load(base, adapter=adapter)
            self.assertLess((loaded.logits(TEXTS) - reference).abs().max().item(), 1e-4)
            without = predict(self.BINARY, base, TEXTS, "-o", "json", "--logits")
            self.assertGreater((torch.tensor([r["logits"] for r in without]) - reference).abs().max().item(), 1e-2)

    def test_labels_are_the_folders_id2label(self):
        rows = predict(self.BINARY, self.folder("bert"), TEXTS[:2], "-o", "json")
        self.assertEqual(set(rows[0]["probabilities"]), {"ham", "spam", "eggs"})

    def test_sha1_checksums_still_verify_and_a_changed_file_fails(self):
        folder = self.folder("distilbert", "distilbert-sha1")
        write_sha1_checksums(folder)
        self.assertEqual(check(self.BINARY, folder), "")
        path = os.path.join(folder, "tokenizer.json")
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:  # the same size, other bytes
            f.write(data.replace(b'"version"', b'"VERSION"', 1))
        self.assertIn("tokenizer.json does not match its sha1", self.error_of(folder))

    def test_missing_tokenizer_json_is_named(self):
        folder = self.folder("bert", "bert-no-tokenizer")
        os.remove(os.path.join(folder, "tokenizer.json"))
        self.assertIn("tokenizer.json", self.error_of(folder))

    def test_unsupported_model_type_is_named(self):
        folder = self.folder("bert", "bert-as-gpt-neo")
        path = os.path.join(folder, "config.json")
        config = read_json(path)
        config["model_type"] = "gpt_neo"
        write_json(path, config)
        err = self.error_of(folder)
        self.assertIn("model_type", err)
        self.assertIn("gpt_neo", err)


def main():
    if sys.argv[1] == "make":
        return make(sys.argv[2])
    if sys.argv[1] == "check":
        for folder in sys.argv[3:]:
            if err := check(sys.argv[2], folder):
                fail(err)
        print("ok:", len(sys.argv) - 3, "folders")
        return
    HfFolderTest.BINARY = sys.argv.pop(1)
    unittest.main()


if __name__ == "__main__":
    main()

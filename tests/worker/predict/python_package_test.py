"""The nightshift Python package on folders written here (no trainer needed): it installs
with pip, verifies checksums, applies data_prep's text rules, batches without changing
results, and a gpt_lm folder is a GPT-2 that transformers loads with equal logits.

Usage: python_package_test.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../.."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


class PythonPackageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="nightshift-pypkg-")
        site = os.path.join(cls.tmp.name, "site")
        # The package installs from the tree with pip, offline (the venv's setuptools).
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--target", site, os.path.join(SOURCE_DIR, "python")], check=True,
                       env=dict(os.environ, PIP_NO_INDEX="1"))
        sys.path.insert(0, site)
        import nightshift  # noqa: F401  (from site)
        import folder_util
        cls.nightshift, cls.fu = nightshift, folder_util
        assert nightshift.__file__.startswith(site), nightshift.__file__
        cls.texts = [t for t, _ in folder_util.corpus(60)]
        cls.tok = folder_util.train_tokenizer(cls.texts, os.path.join(cls.tmp.name, "tok"))
        cls.cls_dir = os.path.join(cls.tmp.name, "classifier")
        folder_util.write_folder(cls.cls_dir, "transformer_classifier", cls.tok, 64, labels=["ham", "spam"])
        cls.lm_dir = os.path.join(cls.tmp.name, "lm")
        folder_util.write_folder(cls.lm_dir, "gpt_lm", cls.tok, 64)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_text_rules_are_data_preps(self):
        from nightshift.text import clean_text, sanitize_utf8
        self.assertEqual(sanitize_utf8(b"a\tb\nc\rd"), b"a b c d")
        self.assertEqual(sanitize_utf8(b"ok\xff\x00x"), b"ok??x")
        self.assertEqual(sanitize_utf8("caf\u00e9".encode()), "caf\u00e9".encode())
        self.assertEqual(sanitize_utf8(b"\xe2\x82"), b"??")  # a cut 3-byte character
        self.assertEqual(len(clean_text("x" * 1000, max_len=4)), 64)  # max_len x 16 bytes

    def test_classifier_tokens_start_with_bos_and_stop_at_max_len(self):
        m = self.nightshift.load(self.cls_dir)
        ids = m.encode(["the " * 200, ""])
        self.assertEqual(ids[0][0], 2)
        self.assertEqual(len(ids[0]), 24)
        self.assertEqual(ids[1], [2])
        self.assertNotIn(3, ids[0])  # no eos for classifiers

    def test_predict_gives_labels_and_probabilities_and_batching_changes_nothing(self):
        import torch
        m = self.nightshift.load(self.cls_dir)
        out = m.predict(self.texts[:5])
        self.assertEqual(len(out), 5)
        for p in out:
            self.assertIn(p["label"], ["ham", "spam"])
            self.assertAlmostEqual(sum(p["probabilities"].values()), 1.0, places=5)
            self.assertEqual(p["label"], max(p["probabilities"], key=p["probabilities"].get))
        big = m.logits(self.texts)
        small = m.logits(self.texts, max_tokens=30)  # many batches, other padding
        one = torch.stack([m.logits([t])[0] for t in self.texts[:8]])
        torch.testing.assert_close(big, small, atol=1e-5, rtol=0)
        torch.testing.assert_close(big[:8], one, atol=1e-5, rtol=0)
        self.assertEqual(m.predict("one text")[0]["label"] in ("ham", "spam"), True)

    def test_pooling_on_the_last_block_equals_the_full_forward(self):
        import torch
        m = self.nightshift.load(self.cls_dir)
        tokens, pad = self.nightshift.collate(m.encode(self.texts[:6]), m.max_len, m.pad_id)
        mod = m.module
        with torch.no_grad():
            x = mod.embed(tokens)
            bias = self.nightshift.modules.key_padding_bias(pad, x.dtype)
            for b in mod.blocks:
                x = b(x, bias)
            full = mod.head(mod.ln_f(x[:, 0]))
            torch.testing.assert_close(mod(tokens, pad), full, atol=1e-5, rtol=0)

    def test_a_changed_or_missing_file_is_refused(self):
        import shutil
        bad = os.path.join(self.tmp.name, "bad")
        shutil.copytree(self.cls_dir, bad)
        with open(os.path.join(bad, "model.safetensors"), "r+b") as f:
            f.seek(200)
            f.write(b"\x01\x02\x03")
        with self.assertRaisesRegex(self.nightshift.ModelFolderError, "model.safetensors: does not match"):
            self.nightshift.load(bad)
        shutil.copy(os.path.join(self.cls_dir, "model.safetensors"), bad)
        self.nightshift.load(bad)  # whole again
        os.remove(os.path.join(bad, "tokenizer.model"))
        with self.assertRaisesRegex(self.nightshift.ModelFolderError, "tokenizer.model"):
            self.nightshift.load(bad)
        with self.assertRaisesRegex(OSError, "config.json"):
            self.nightshift.load(self.tmp.name)

    def test_a_sha1_folder_still_loads(self):
        import shutil
        old = os.path.join(self.tmp.name, "sha1")
        shutil.copytree(self.cls_dir, old)
        self.fu.write_checksums(old, "sha1")
        self.nightshift.load(old)
        with open(os.path.join(old, "config.json"), "a") as f:
            f.write(" ")
        with self.assertRaisesRegex(self.nightshift.ModelFolderError, "config.json: does not match.*sha1"):
            self.nightshift.load(old)

    def test_a_hugging_face_folder_loads_through_transformers(self):
        import shutil
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        import hf_folder_test
        root = os.path.join(self.tmp.name, "hf")
        hf_folder_test.make(root)
        texts = hf_folder_test.TEXTS
        for arch in ("bert", "roberta", "distilbert"):
            folder = os.path.join(root, arch)
            m = self.nightshift.load(folder)
            self.assertIsInstance(m, self.nightshift.HfModel)
            self.assertEqual(m.labels, ["ham", "spam", "eggs"])
            self.assertEqual(m.max_len, hf_folder_test.max_len(folder))
            tok = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
            batch = tok(texts, truncation=True, max_length=m.max_len, padding=True, return_tensors="pt")
            with torch.no_grad():
                want = model(**batch).logits
            torch.testing.assert_close(m.logits(texts), want, atol=1e-5, rtol=0)
            torch.testing.assert_close(m.logits(texts, max_tokens=40), want, atol=1e-5, rtol=0)  # other batches
            self.assertEqual([p["label"] for p in m.predict(texts)], [m.labels[i] for i in want.argmax(-1).tolist()])
        # With a checksums.json (our export has one), it is verified.
        folder = os.path.join(root, "bert-checked")
        shutil.copytree(os.path.join(root, "bert"), folder)
        self.fu.write_checksums(folder)
        self.nightshift.load(folder)
        with open(os.path.join(folder, "tokenizer.json"), "a") as f:
            f.write(" ")
        with self.assertRaisesRegex(self.nightshift.ModelFolderError, "tokenizer.json: does not match.*sha256"):
            self.nightshift.load(folder)

    def test_gpt_lm_folder_loads_in_transformers_with_equal_logits(self):
        import torch
        try:
            from transformers import GPT2LMHeadModel
        except ImportError:
            self.skipTest("transformers is not installed (scripts/requirements.txt pins it)")
        m = self.nightshift.load(self.lm_dir)
        hf = GPT2LMHeadModel.from_pretrained(self.lm_dir).eval()
        ids = torch.tensor([m.encode([self.texts[3]])[0][:20], m.encode([self.texts[4]])[0][:20]])
        with torch.no_grad():
            ours, theirs = m.module(ids), hf(ids).logits
        torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)

    def test_gpt_lm_scores_and_generates(self):
        import math
        m = self.nightshift.load(self.lm_dir)
        ppl = m.perplexity(self.texts[:3])
        self.assertTrue(all(math.isfinite(p) and p > 1 for p in ppl), ppl)
        a = m.generate("the", 5, temperature=0.8, top_k=5, seed=3)
        self.assertEqual(a, m.generate("the", 5, temperature=0.8, top_k=5, seed=3))
        self.assertIsInstance(m.generate("the", 5, temperature=0), str)
        with self.assertRaises(ValueError):
            m.predict(["x"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

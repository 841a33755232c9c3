"""nightshift-predict (C++) against the Python package on the same texts: equal labels,
logits within 1e-4.

  cpp_python_equality_test.py synthetic PREDICT_BIN SOURCE_DIR
      a classifier folder written here with random weights (no trainer needed);
  cpp_python_equality_test.py trained BIN_DIR SOURCE_DIR
      a tiny corpus through nightshift-prepare and nightshift-trainer, the job's exported
      folder: C++ and Python agree on the validation texts, their accuracy over the
      validation split equals the job's val_accuracy; and a tiny gpt_lm job's folder loads
      in transformers (GPT2LMHeadModel.from_pretrained) with logits equal to ours.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run_predict(binary, folder, texts, tmp, extra=()):
    path = os.path.join(tmp, "inputs.jsonl")
    with open(path, "w") as f:
        for t in texts:
            f.write(json.dumps({"body": t}) + "\n")
    p = subprocess.run([binary, "--model", folder, "--jsonl", "--text-field", "body", path, "-o", "json", "--logits",
                        "--device", "cpu", *extra], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{binary} exit {p.returncode}: {p.stderr}")
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    if len(rows) != len(texts):
        fail(f"{len(rows)} output lines for {len(texts)} inputs")
    return rows


def compare(nightshift, binary, folder, texts, tmp):
    """C++ and Python on `texts`; returns Python's labels."""
    import torch
    m = nightshift.load(folder)
    ours = m.logits(texts)
    for extra in ((), ("--max-tokens", "40")):  # one batching and a very different one
        rows = run_predict(binary, folder, texts, tmp, extra)
        cpp = torch.tensor([r["logits"] for r in rows])
        diff = (cpp - ours).abs().max().item()
        print(f"max |C++ - Python| logit difference {diff:.2e} over {len(texts)} texts {extra}")
        if diff > 1e-4:
            fail(f"logits differ by {diff}")
        py_labels = [m.labels[i] for i in ours.argmax(-1).tolist()]
        cpp_labels = [r["label"] for r in rows]
        if py_labels != cpp_labels:
            fail(f"labels differ: {sum(a != b for a, b in zip(py_labels, cpp_labels))} of {len(texts)}")
        for r in rows:
            if abs(sum(r["probabilities"].values()) - 1) > 1e-5 or set(r["probabilities"]) != set(m.labels):
                fail(f"bad probabilities {r}")
    # Text output and stdin: one line per input, the same labels.
    p = subprocess.run([binary, "--model", folder, "-", "--device", "cpu"], input="\n".join(
        t.replace("\n", " ") for t in texts[:5]) + "\n", capture_output=True, text=True)
    lines = p.stdout.splitlines()
    if p.returncode != 0 or len(lines) != 5:
        fail(f"stdin text mode: exit {p.returncode}, {len(lines)} lines: {p.stderr}")
    return py_labels


def synthetic(binary, source_dir):
    import folder_util
    import nightshift
    with tempfile.TemporaryDirectory(prefix="nightshift-eq-") as tmp:
        texts = [t for t, _ in folder_util.corpus(80, seed=11)] + ["", "x" * 3000, "\u00e9\u20ac\U0001F600 odd"]
        tok = folder_util.train_tokenizer(texts, os.path.join(tmp, "tok"))
        folder = os.path.join(tmp, "classifier")
        folder_util.write_folder(folder, "transformer_classifier", tok, 64, labels=["ham", "spam", "third"], max_len=32)
        compare(nightshift, binary, folder, texts, tmp)
        mean = os.path.join(tmp, "classifier-mean")  # model.pooling mean
        folder_util.write_folder(mean, "transformer_classifier", tok, 64, labels=["ham", "spam"], max_len=32,
                                 pooling="mean")
        compare(nightshift, binary, mean, texts, tmp)
        # A corrupted folder is refused.
        with open(os.path.join(folder, "model.safetensors"), "ab") as f:
            f.write(b"x")
        p = subprocess.run([binary, "--model", folder, "-"], input="a\n", capture_output=True, text=True)
        if p.returncode == 0 or "checksums.json" not in p.stderr:
            fail(f"a corrupted folder ran: exit {p.returncode}: {p.stderr}")
    print("PASS")


def run_job(bin_dir, tmp, name, corpus_path, arch, classifier):
    data_dir = os.path.join(tmp, name + "-data")
    subprocess.run([os.path.join(bin_dir, "nightshift-prepare"), "--path", corpus_path, "--format", "jsonl",
                    "--text-field", "body", "--label-field", "label", "--vocab-size", "80", "--max-len", "32",
                    "--validation-fraction", "0.25", "--seed", "1234",
                    "--classifier", "1" if classifier else "0", "--output-dir", data_dir, "--threads", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    meta = json.load(open(os.path.join(data_dir, "meta.json")))
    spec = {"name": name,
            "model": {"arch": arch, "layers": 2, "d_model": 32, "heads": 4, "ffn": 64, "dropout": 0.1,
                      "attention_dropout": 0.0, "max_len": 32},
            "train": {"epochs": 4, "optimizer": "adamw", "lr": 3e-3, "weight_decay": 0.01, "warmup_steps": 5,
                      "seed": "1234", "batching": {"batch_size": 16, "max_tokens": "", "prefetch": 2},
                      "precision": "fp32", "grad_clip": 1.0, "activation_checkpointing": "none",
                      "max_steps": "0", "threads": 1},
            "data": {"path": corpus_path},
            "resources": {"world_size": 1, "device": "cpu"},
            "checkpoint": {"every_steps": 0, "every_seconds": 0, "keep_last": 1}}
    data = dict(meta, train_shard=os.path.join(data_dir, "train.shard"), val_shard=os.path.join(data_dir, "val.shard"),
                tokenizer_model=os.path.join(data_dir, "tokenizer.model"))
    ckpt = os.path.join(tmp, name + "-ckpt")
    cfg_path = os.path.join(tmp, name + ".json")
    json.dump({"job_id": name, "attempt": 0, "spec": spec, "data": data, "checkpoint_dir": ckpt}, open(cfg_path, "w"))
    p = subprocess.run([os.path.join(bin_dir, "nightshift-trainer"), "--config", cfg_path], capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail(f"trainer exit {p.returncode}: {p.stderr[-2000:]}")
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    val_acc = [e["val_accuracy"] for e in events if isinstance(e.get("val_accuracy"), (int, float))]
    folders = [os.path.dirname(c) for c in glob.glob(os.path.join(ckpt, "**", "config.json"), recursive=True)
               if json.load(open(c)).get("format") == "nightshift-model"]
    if not folders:
        fail(f"the job exported no model folder under {ckpt}")
    return folders[0], (val_acc[-1] if val_acc else None)


def trained(bin_dir, source_dir):
    import folder_util
    import nightshift
    import torch
    with tempfile.TemporaryDirectory(prefix="nightshift-eq-trained-") as tmp:
        samples = folder_util.corpus(240, seed=5)
        corpus_path = os.path.join(tmp, "mail.jsonl")
        with open(corpus_path, "w") as f:
            for text, label in samples:
                f.write(json.dumps({"body": text, "label": label}) + "\n")
        folder, job_acc = run_job(bin_dir, tmp, "j-eq-cls", corpus_path, "transformer_classifier", True)
        cfg = json.load(open(os.path.join(folder, "config.json")))
        job_acc = cfg.get("metrics", {}).get("val_accuracy", job_acc)
        # The validation split: sample ids "<file name>:<line>" (data_prep.cc).
        val = [(t, l) for n, (t, l) in enumerate(samples, 1)
               if folder_util.in_validation_split(f"mail.jsonl:{n}", 1234, 0.25)]
        labels = compare(nightshift, os.path.join(bin_dir, "nightshift-predict"), folder, [t for t, _ in val], tmp)
        acc = sum(p == l for p, (_, l) in zip(labels, val)) / len(val)
        print(f"accuracy over {len(val)} validation texts {acc:.6f}, the job's val_accuracy {job_acc}")
        if job_acc is None or abs(acc - job_acc) > 1e-6:
            fail("accuracy differs from the job's val_accuracy")

        # gpt_lm: the folder is a GPT-2 for transformers; C++ --score equals Python's perplexity.
        from transformers import GPT2LMHeadModel
        lm_folder, _ = run_job(bin_dir, tmp, "j-eq-lm", corpus_path, "gpt_lm", False)
        m = nightshift.load(lm_folder)
        hf = GPT2LMHeadModel.from_pretrained(lm_folder).eval()
        ids = torch.tensor([m.encode([samples[0][0] + " " + samples[1][0]])[0][:32]])
        with torch.no_grad():
            diff = (hf(ids).logits - m.module(ids)).abs().max().item()
        print(f"max |transformers - ours| logit difference {diff:.2e}")
        if diff > 1e-4:
            fail(f"transformers' logits differ by {diff}")
        texts = [t for t, _ in samples[:20]]
        p = subprocess.run([os.path.join(bin_dir, "nightshift-predict"), "--model", lm_folder, "--score", "--jsonl",
                            "--text-field", "body", "-o", "json", "--device", "cpu", corpus_path],
                           capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"--score: {p.stderr}")
        cpp = [json.loads(line)["perplexity"] for line in p.stdout.splitlines()][:20]
        py = m.perplexity(texts)
        worst = max(abs(a - b) / b for a, b in zip(cpp, py))
        print(f"perplexity: largest relative C++/Python difference {worst:.2e}")
        if worst > 1e-4:
            fail("perplexities differ")
    print("PASS")


if __name__ == "__main__":
    mode, arg, source = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, os.path.join(source, "python"))
    synthetic(arg, source) if mode == "synthetic" else trained(arg, source)

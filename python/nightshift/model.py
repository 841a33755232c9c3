"""An exported model folder in plain PyTorch: nightshift.load and what it returns.

The folder's layout is worker/trainer/checkpoint/export.h's: model.safetensors, config.json,
tokenizer.model and checksums.json (SHA-256 of every other file, or SHA-1 in folders
written before; verified on load).

A Hugging Face classifier folder (BERT, RoBERTa, DistilBERT: a model.pretrained job's
export, or any such folder) loads through transformers instead (HfModel):
AutoModelForSequenceClassification and AutoTokenizer, with nightshift-predict's max_len.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from nightshift.modules import build_module
from nightshift.text import Text, Tokenizer

MODEL_FORMAT, MODEL_FORMAT_VERSION = "nightshift-model", 1


class ModelFolderError(ValueError):
    """The folder is not a whole, readable nightshift model (the message says what)."""


# checksums.json's algorithms: what we write, and what folders written before it hold.
DIGESTS = {"sha256": hashlib.sha256, "sha1": hashlib.sha1}


def file_digest(path: str, algorithm: str) -> Tuple[int, str]:
    """(bytes, hex digest under `algorithm`, a key of DIGESTS) of the file at `path`."""
    h, size = DIGESTS[algorithm](), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def verify_folder(path: str) -> None:
    """Checks path/checksums.json against the files; raises ModelFolderError naming a mismatch."""
    sums_path = os.path.join(path, "checksums.json")
    try:
        with open(sums_path, "rb") as f:
            sums = json.load(f)
    except (OSError, ValueError) as e:
        raise ModelFolderError(f"{sums_path}: cannot read ({e}); is {path} a nightshift model folder?") from e
    algorithm = sums.get("algorithm")
    if algorithm not in DIGESTS or not isinstance(sums.get("files"), dict):
        raise ModelFolderError(f"{sums_path}: expected {{'algorithm': 'sha256' (or 'sha1'), 'files': {{...}}}}")
    for name, want in sums["files"].items():
        file = os.path.join(path, name)
        try:
            size, digest = file_digest(file, algorithm)
        except OSError as e:
            raise ModelFolderError(f"{file}: listed in checksums.json but cannot be read ({e})") from e
        if size != int(want.get("bytes", -1)) or digest != want.get(algorithm):
            raise ModelFolderError(f"{file}: does not match checksums.json ({size} bytes, {algorithm} {digest}; "
                                   f"expected {want.get('bytes')} bytes, {algorithm} {want.get(algorithm)}): "
                                   "download it again")


def plan_eval(lengths: Sequence[int], max_tokens: int) -> List[List[int]]:
    """worker/trainer/data/batching.cc's PlanEval: length order (stable), cut to a padded-token budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    plan: List[List[int]] = []
    batch: List[int] = []
    for i in order:
        if batch and (len(batch) + 1) * max(lengths[i], 1) > max_tokens:
            plan.append(batch)
            batch = []
        batch.append(i)
    if batch:
        plan.append(batch)
    return plan


def collate(rows: Sequence[Sequence[int]], max_len: int, pad_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Padded tokens [B, L] (int64) and pad_mask [B, L] (true at padding), as Collate does."""
    l = max([1] + [min(len(r), max_len) for r in rows])
    tokens = torch.full((len(rows), l), pad_id, dtype=torch.long)
    pad = torch.ones((len(rows), l), dtype=torch.bool)
    for i, r in enumerate(rows):
        n = min(len(r), max_len)
        tokens[i, :n] = torch.tensor(list(r[:n]), dtype=torch.long)
        pad[i, :n] = False
        pad[i, 0] = False  # never a whole row of padding
    return tokens, pad


class Model:
    """A loaded model folder: `config` (config.json), `module` (torch.nn.Module, eval mode),
    `tokenizer`, `labels` (class names in index order; classifiers)."""

    def __init__(self, path: str, config: Dict[str, Any], module: torch.nn.Module, tokenizer: Optional[Tokenizer],
                 device: torch.device):
        self.path, self.config, self.module, self.tokenizer, self.device = path, config, module, tokenizer, device
        self.arch = config["arch"]
        self.labels: List[str] = list(config.get("labels") or [])
        self.max_len = int(config["max_len"])
        self.pad_id = int(config.get("pad_id", 0))

    def __repr__(self) -> str:
        return f"nightshift.Model({self.path!r}, arch={self.arch}, job={self.config.get('job_id')})"

    # -- token ids -----------------------------------------------------------------------
    def encode(self, texts: Sequence[Text]) -> List[List[int]]:
        """Each text's token ids, as the job's data preparation makes them."""
        if self.tokenizer is None:
            raise ModelFolderError(f"{self.path} has no tokenizer.model: pass token ids to logits_from_ids")
        return [self.tokenizer.encode(t) for t in texts]

    @torch.inference_mode()
    def logits_from_ids(self, ids: Sequence[Sequence[int]], max_tokens: int = 8192) -> List[torch.Tensor]:
        """Logits of each row in input order, batched like evaluation: [C] per row for a
        classifier, [L, V] for a language model (rows cut to max_len)."""
        lengths = [min(len(r), self.max_len) for r in ids]
        out: List[Optional[torch.Tensor]] = [None] * len(ids)
        for batch in plan_eval(lengths, max_tokens):
            tokens, pad = collate([ids[i] for i in batch], self.max_len, self.pad_id)
            logits = self.module(tokens.to(self.device), pad.to(self.device)).float().cpu()
            for row, i in enumerate(batch):
                out[i] = logits[row] if logits.dim() == 2 else logits[row, : max(lengths[i], 1)]
        return out  # type: ignore[return-value]

    def logits(self, texts: Sequence[Text], max_tokens: int = 8192) -> torch.Tensor:
        """Classifier logits [N, C] in input order."""
        self._need_classifier()
        return torch.stack(self.logits_from_ids(self.encode(texts), max_tokens)) if texts else torch.empty(0)

    # -- classifiers ---------------------------------------------------------------------
    def predict(self, texts: Sequence[Text], max_tokens: int = 8192) -> List[Dict[str, Any]]:
        """One {'label': name, 'probabilities': {name: p}} per text, in input order."""
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        self._need_classifier()
        result = []
        for row in self.logits(texts, max_tokens).softmax(-1) if texts else []:
            names = self.labels or [str(i) for i in range(row.numel())]
            result.append({"label": names[int(row.argmax())],
                           "probabilities": {n: float(p) for n, p in zip(names, row)}})
        return result

    # -- language models -----------------------------------------------------------------
    def perplexity(self, texts: Sequence[Text], max_tokens: int = 8192) -> List[float]:
        """exp(mean next-token cross-entropy) of each text (bos ... eos, cut to max_len)."""
        self._need_lm()
        ids = [r[: self.max_len] for r in self.encode(texts)]
        result = []
        for row, logits in zip(ids, self.logits_from_ids(ids, max_tokens)):
            if len(row) < 2:
                result.append(float("nan"))
                continue
            nll = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(row[1:]), reduction="mean")
            result.append(math.exp(float(nll)))
        return result

    @torch.inference_mode()
    def generate(self, prompt: Text, max_new_tokens: int, temperature: float = 1.0, top_k: int = 0,
                 seed: Optional[int] = None) -> str:
        """Prompt and continuation as one text: bos + pieces(prompt) continued by up to
        max_new_tokens tokens; temperature 0 is greedy. Stops at eos."""
        self._need_lm()
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        ids = [self.tokenizer.bos_id] + self.tokenizer.pieces(prompt)  # type: ignore[union-attr]
        for _ in range(max_new_tokens):
            window = ids[-self.max_len:]
            tokens = torch.tensor([window], device=self.device)
            logits = self.module(tokens, None)[0, -1].float().cpu()
            if temperature <= 0:
                nxt = int(logits.argmax())
            else:
                logits = logits / temperature
                if 0 < top_k < logits.numel():
                    kth = torch.topk(logits, top_k).values[-1]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = int(torch.multinomial(logits.softmax(-1), 1, generator=gen))
            if nxt == self.tokenizer.eos_id:  # type: ignore[union-attr]
                break
            ids.append(nxt)
        return self.tokenizer.decode(ids[1:])  # type: ignore[union-attr]

    def _need_classifier(self) -> None:
        if self.arch != "transformer_classifier":
            raise ValueError(f"{self.path} is a {self.arch}, not a classifier: use perplexity or generate")

    def _need_lm(self) -> None:
        if self.arch != "gpt_lm" or self.tokenizer is None:
            raise ValueError(f"{self.path} is a {self.arch}, not a gpt_lm with a tokenizer")


class HfModel:
    """A Hugging Face classifier folder through transformers: `module`
    (AutoModelForSequenceClassification, eval mode), `tokenizer` (AutoTokenizer), `labels`
    (id2label in index order), `max_len` (nightshift-predict's: our export's max_len, else
    the position table's rows or tokenizer_config.json's model_max_length when fewer)."""

    def __init__(self, path: str, config: Dict[str, Any], device: torch.device, adapter: Optional[str] = None):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        self.path, self.config, self.device = path, config, device
        self.arch = "pretrained"
        module = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
        if adapter is not None:  # a PEFT LoRA adapter folder on this base (needs peft installed)
            from peft import PeftModel
            module = PeftModel.from_pretrained(module, adapter)
        self.module = module.to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.labels: List[str] = [self.module.config.id2label[i] for i in range(self.module.config.num_labels)]
        self.max_len = int(config.get("max_len") or min(_position_rows(config), self.tokenizer.model_max_length))

    def __repr__(self) -> str:
        return f"nightshift.HfModel({self.path!r}, model_type={self.config.get('model_type')})"

    def encode(self, texts: Sequence[Text]) -> List[List[int]]:
        """The ids nightshift-predict gives: the raw text (at most max_len * 64 bytes, bytes
        decoded with U+FFFD for ill-formed ones), special tokens, cut to max_len."""
        return [self.tokenizer(_raw_text(t, self.max_len * 64), truncation=True, max_length=self.max_len)["input_ids"]
                for t in texts]

    @torch.inference_mode()
    def logits(self, texts: Sequence[Text], max_tokens: int = 8192) -> torch.Tensor:
        """Logits [N, C] in input order, batched like evaluation (padding is masked)."""
        ids = self.encode(texts)
        out: List[Optional[torch.Tensor]] = [None] * len(ids)
        pad_id = self.tokenizer.pad_token_id or 0
        for batch in plan_eval([len(r) for r in ids], max_tokens):
            tokens, pad = collate([ids[i] for i in batch], self.max_len, pad_id)
            logits = self.module(input_ids=tokens.to(self.device), attention_mask=(~pad).long().to(self.device))
            for row, i in enumerate(batch):
                out[i] = logits.logits[row].float().cpu()
        return torch.stack(out) if out else torch.empty(0)  # type: ignore[arg-type]

    def predict(self, texts: Sequence[Text], max_tokens: int = 8192) -> List[Dict[str, Any]]:
        """One {'label': name, 'probabilities': {name: p}} per text, in input order."""
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        return [{"label": self.labels[int(row.argmax())],
                 "probabilities": {n: float(p) for n, p in zip(self.labels, row)}}
                for row in (self.logits(texts, max_tokens).softmax(-1) if texts else [])]


def _position_rows(config: Dict[str, Any]) -> int:
    """Tokens the position table takes (RoBERTa's positions start after its padding id)."""
    rows = int(config["max_position_embeddings"])
    if config.get("model_type") == "roberta":
        rows -= int(config.get("pad_token_id", 1)) + 1
    return rows


def _raw_text(text: Text, max_bytes: int) -> str:
    raw = text.encode() if isinstance(text, str) else bytes(text)
    return raw[:max_bytes].decode("utf-8", errors="replace")


def load(path: Union[str, "os.PathLike[str]"], device: str = "cpu", verify: bool = True,
         adapter: Optional[Union[str, "os.PathLike[str]"]] = None) -> Union[Model, HfModel]:
    """Loads a model folder: ours (a Model) or a Hugging Face classifier folder (an HfModel,
    through transformers). checksums.json is verified unless verify=False: always there in
    our native folders, checked in a Hugging Face folder when it has one. adapter: a PEFT
    LoRA adapter folder (a job's export with model.adapter) run on the Hugging Face folder
    `path`, through PEFT (which must be installed)."""
    path = os.fspath(path)
    with open(os.path.join(path, "config.json"), "rb") as f:
        config = json.load(f)
    native = config.get("format") == MODEL_FORMAT and config.get("arch") != "pretrained"
    if verify and (native or os.path.exists(os.path.join(path, "checksums.json"))):
        verify_folder(path)
    if adapter is not None:
        adapter = os.fspath(adapter)
        if native:
            raise ValueError(f"adapter: only on a Hugging Face model folder; {path} is a native one")
        if verify and os.path.exists(os.path.join(adapter, "checksums.json")):
            verify_folder(adapter)
    if not native:
        return HfModel(path, config, torch.device(device), adapter)
    return _load_native(path, config, torch.device(device))


def _load_native(path: str, config: Dict[str, Any], dev: torch.device) -> Model:
    from safetensors.torch import load_file

    if int(config.get("version", 0)) > MODEL_FORMAT_VERSION:
        raise ModelFolderError(f"{path}/config.json: format {config.get('format')!r} version "
                               f"{config.get('version')} is not {MODEL_FORMAT} <= {MODEL_FORMAT_VERSION}")
    tensors = load_file(os.path.join(path, "model.safetensors"))
    module = build_module(config, tensors).to(dev)
    tok_path = os.path.join(path, "tokenizer.model")
    tokenizer = None
    if os.path.exists(tok_path):
        tokenizer = Tokenizer(tok_path, int(config.get("bos_id", 2)), int(config.get("eos_id", 3)),
                              int(config["max_len"]), classifier=config["arch"] == "transformer_classifier")
    return Model(path, config, module, tokenizer, dev)

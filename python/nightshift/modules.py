"""Plain-PyTorch copies of the trainer's models (worker/trainer/models/model.h, model.cc).

Same parameters under the same names (so a transformer_classifier's model.safetensors
loads with load_state_dict as it is), the same arithmetic, evaluation only (no dropout):

- a pre-LN block: x = x + proj(attn(ln1(x))); x = x + fc2(gelu(fc1(ln2(x)))), with one
  fused qkv projection whose output is laid out [B, L, 3, H, Dh];
- attention: softmax(q k^T / sqrt(Dh) + bias) v, where the bias is -inf at padding keys
  (padding sits at the end of a row) and, for gpt_lm, above the diagonal;
- transformer_classifier: token + learned position embeddings, the blocks, a final
  LayerNorm on position 0 (the bos/CLS token), then the head: logits [B, C];
- gpt_lm: the same trunk with causal blocks, the final LayerNorm at every position and a
  head tied to the token embedding: logits [B, L, V] (GPT-2's architecture).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, cast

import torch
import torch.nn.functional as F
from torch import nn


def key_padding_bias(pad_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, L] bool (true at padding) -> [B, 1, 1, L]: 0 for tokens, -inf for padding."""
    bias = torch.zeros(pad_mask.shape, dtype=dtype, device=pad_mask.device)
    bias.masked_fill_(pad_mask, float("-inf"))
    return bias.view(pad_mask.shape[0], 1, 1, pad_mask.shape[1])


class TransformerBlock(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: int, causal: bool, gelu: str = "none",
                 eps: float = 1e-5):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.heads, self.causal, self.gelu = heads, causal, gelu
        self.ln1 = nn.LayerNorm(d_model, eps=eps)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model, eps=eps)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)

    def _attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   bias: Optional[torch.Tensor]) -> torch.Tensor:
        if self.causal:  # padding is at the end: a real query never reaches a padded key
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    def _residuals(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b, lq, d = x.shape
        h: torch.Tensor = x + self.proj(y.transpose(1, 2).reshape(b, lq, d))
        out: torch.Tensor = h + self.fc2(F.gelu(self.fc1(self.ln2(h)), approximate=self.gelu))
        return out

    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """The block on x [B, L, D]; bias: the additive key-padding mask (None: none, or causal)."""
        b, l, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, l, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return self._residuals(x, self._attention(qkv[0], qkv[1], qkv[2], bias))

    def forward_first(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """forward(x, bias)[:, :1]: keys and values for every position, the rest for position 0."""
        b, l, d = x.shape
        dh = d // self.heads
        n = self.ln1(x)
        w, bb = self.qkv.weight, self.qkv.bias
        q = F.linear(n[:, :1], w[:d], bb[:d]).view(b, 1, self.heads, dh).transpose(1, 2)
        kv = F.linear(n, w[d:], bb[d:]).view(b, l, 2, self.heads, dh).permute(2, 0, 3, 1, 4)
        return self._residuals(x[:, :1], self._attention(q, kv[0], kv[1], bias))


class _Trunk(nn.Module):
    def __init__(self, cfg: Dict[str, Any], causal: bool, gelu: str):
        super().__init__()
        d = int(cfg["d_model"])
        self.max_len = int(cfg["max_len"])
        eps = float(cfg.get("layer_norm_epsilon", 1e-5))
        self.tok_emb = nn.Embedding(int(cfg["vocab_size"]), d, padding_idx=int(cfg.get("pad_id", 0)))
        self.pos_emb = nn.Embedding(self.max_len, d)
        ffn = int(cfg.get("ffn") or 4 * d)
        self.blocks = nn.ModuleList(
            TransformerBlock(d, int(cfg["heads"]), ffn, causal, gelu, eps) for _ in range(int(cfg["layers"])))
        self.ln_f = nn.LayerNorm(d, eps=eps)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"batch length {tokens.shape[1]} exceeds max_len {self.max_len}")
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x: torch.Tensor = self.tok_emb(tokens) + self.pos_emb(pos).unsqueeze(0)
        return x


class TransformerClassifier(_Trunk):
    """model.arch transformer_classifier: logits [B, C] from tokens [B, L] and pad_mask [B, L]."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__(cfg, causal=False, gelu=_gelu_kind(cfg, "gelu"))
        self.head = nn.Linear(int(cfg["d_model"]), int(cfg["num_classes"]))
        self.mean_pooling = cfg.get("pooling", "cls") == "mean"  # older folders: cls

    def forward(self, tokens: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        """Logits [B, C] of tokens [B, L] (pad_mask: true at padding)."""
        x = self.embed(tokens)
        bias = key_padding_bias(pad_mask, x.dtype)
        last = len(self.blocks) - 1
        for i, module in enumerate(self.blocks):
            block = cast(TransformerBlock, module)
            x = block.forward_first(x, bias) if i == last and not self.mean_pooling else block(x, bias)
        if not self.mean_pooling:
            logits: torch.Tensor = self.head(self.ln_f(x[:, 0]))
            return logits
        real = (~pad_mask).unsqueeze(-1).to(x.dtype)  # the mean over each row's real tokens
        logits = self.head((self.ln_f(x) * real).sum(1) / real.sum(1).clamp_min(1))
        return logits


class GptLM(_Trunk):
    """model.arch gpt_lm: logits [B, L, V]; position t predicts token t + 1."""

    def __init__(self, cfg: Dict[str, Any]):
        super().__init__(cfg, causal=True, gelu=_gelu_kind(cfg, "gelu_new"))

    def forward(self, tokens: torch.Tensor, pad_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits [B, L, V] of tokens [B, L] (padding is at the end and never attended to by real tokens)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, None)
        return F.linear(self.ln_f(x), self.tok_emb.weight)  # the head is tied to tok_emb


def _gelu_kind(cfg: Dict[str, Any], default: str) -> str:
    """config.json's activation_function -> F.gelu's approximate argument."""
    name = cfg.get("activation_function", default)
    if name in ("gelu_new", "gelu_pytorch_tanh", "tanh"):
        return "tanh"
    if name == "gelu":
        return "none"
    raise ValueError(f"config.json: activation_function {name!r} is not supported (gelu, gelu_new)")


def gpt2_to_nightshift(tensors: Dict[str, torch.Tensor], layers: int) -> Dict[str, torch.Tensor]:
    """GPT-2 tensor names and Conv1D [in, out] weights -> this module's names and [out, in]."""
    out = {"tok_emb.weight": tensors["transformer.wte.weight"],
           "pos_emb.weight": tensors["transformer.wpe.weight"],
           "ln_f.weight": tensors["transformer.ln_f.weight"],
           "ln_f.bias": tensors["transformer.ln_f.bias"]}
    names = {"ln_1": "ln1", "attn.c_attn": "qkv", "attn.c_proj": "proj", "ln_2": "ln2",
             "mlp.c_fc": "fc1", "mlp.c_proj": "fc2"}
    for i in range(layers):
        for theirs, ours in names.items():
            w = tensors[f"transformer.h.{i}.{theirs}.weight"]
            out[f"blocks.{i}.{ours}.weight"] = w if theirs.startswith("ln_") else w.t().contiguous()
            out[f"blocks.{i}.{ours}.bias"] = tensors[f"transformer.h.{i}.{theirs}.bias"]
    return out


def build_module(cfg: Dict[str, Any], tensors: Dict[str, torch.Tensor]) -> nn.Module:
    """The module for config.json `cfg` with the weights of model.safetensors loaded (strict)."""
    arch = cfg.get("arch")
    if arch == "transformer_classifier":
        module: nn.Module = TransformerClassifier(cfg)
    elif arch == "gpt_lm":
        module = GptLM(cfg)
        if cfg.get("tensor_names", "gpt2") == "gpt2":
            tensors = gpt2_to_nightshift(tensors, int(cfg["layers"]))
    else:
        raise ValueError(f"config.json: arch {arch!r} is not supported here (transformer_classifier, gpt_lm)")
    missing, unexpected = module.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise ValueError(f"model.safetensors does not fit config.json: missing {missing}, unexpected {unexpected}")
    return module.eval()


__all__ = ["TransformerBlock", "TransformerClassifier", "GptLM", "build_module", "gpt2_to_nightshift",
           "key_padding_bias"]

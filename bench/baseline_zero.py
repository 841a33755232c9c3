#!/usr/bin/env python3
"""One rank of PyTorch's own data parallelism on the 210M Llama (bench/sharding_bench.py
starts two, with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set): transformers'
LlamaForCausalLM (float32, SDPA attention) in DistributedDataParallel over Gloo, AdamW
fused (transformers' Trainer default), either whole on each rank (--zero off) or sharded
with torch.distributed.optim.ZeroRedundancyOptimizer (--zero on: each rank keeps and
updates the moments of its share of the parameters, then broadcasts them: ZeRO stage 1,
PyTorch's documented way to shard the optimizer under DDP), or fully sharded (--zero
fsdp2: torch.distributed.fsdp.fully_shard on every decoder layer and then the model,
FSDP2's documented use; with --ac every layer activation-checkpointed through
transformers' gradient_checkpointing_enable, as our sharding full always is). With --bf16:
DDP's forward under torch.autocast to bfloat16 (PyTorch's AMP), FSDP2 with
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) (FSDP2's documented mixed
precision: every parameter gathered and computed in bf16, gradients reduced in float32).
The packed rows of
bench/baseline_transformers_lm.py, rank r taking every WORLD_SIZE-th batch from the r-th,
grad_clip 1.0 as our runs. Prints this rank's JSON line.
"""
import argparse
import json
import os
import random
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_pytorch import read_shard  # noqa: E402
from baseline_transformers_lm import collate, lm_loss, pack_rows  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--budget", type=int, default=1024, help="tokens per rank and step")
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--skip-steps", type=int, default=2)
    ap.add_argument("--zero", default="off", choices=("off", "on", "fsdp2"))
    ap.add_argument("--ac", action="store_true")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    samples, prompts, _, _ = read_shard(os.path.join(a.data, "train.shard"))
    samples = [t[:a.max_len] for t in samples]
    pad_id = json.load(open(os.path.join(a.data, "meta.json")))["pad_id"]
    model = AutoModelForCausalLM.from_pretrained(a.model, attn_implementation="sdpa", dtype=torch.float32)
    model.config.use_cache = False
    model.train()  # from_pretrained returns it in eval mode, where transformers skips checkpointing
    if a.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if a.zero == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh("cpu", (world,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if a.bf16 else MixedPrecisionPolicy()
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        ddp = model
    else:
        ddp = DistributedDataParallel(model)
    kw = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, fused=True)
    opt = (ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **kw) if a.zero == "on"
           else torch.optim.AdamW(model.parameters(), **kw))
    rng = random.Random(1234)
    order = list(range(len(samples)))
    rng.shuffle(order)
    rows = pack_rows(order, [len(t) for t in samples], a.max_len)
    per = max(1, a.budget // a.max_len)
    batches = [rows[i:i + per] for i in range(0, len(rows), per)]
    rng.shuffle(batches)
    mine = batches[rank::world][:a.max_steps]
    tokens, t0 = 0, time.perf_counter()
    for step, batch in enumerate(mine):
        if step == a.skip_steps:
            tokens, t0 = 0, time.perf_counter()
        ids, pos, labels, n = collate(batch, samples, prompts, pad_id)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16 and a.zero != "fsdp2"):
            logits = ddp(input_ids=ids, position_ids=pos, use_cache=False).logits
        loss = lm_loss(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += n
    seconds = time.perf_counter() - t0
    state = 0
    local = opt.optim if a.zero == "on" else opt
    for s in local.state.values():
        state += sum((v.to_local() if hasattr(v, "to_local") else v).numel() * v.element_size()
                     for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    who = {"off": "pytorch-ddp", "on": "pytorch-ddp+zero", "fsdp2": "pytorch-fsdp2"}[a.zero] + ("+ac" if a.ac else "") + ("+bf16" if a.bf16 else "")
    print(json.dumps({"who": who, "rank": rank, "world": world,
                      "steps": len(mine) - a.skip_steps, "seconds": round(seconds, 2),
                      "tokens_per_second": round(tokens / seconds, 1), "loss": float(loss.detach()),
                      "optimizer_state_bytes": state}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

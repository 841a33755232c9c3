#!/usr/bin/env python3
"""One AdamW step over the parameters of decoder_bench.py's Llama-layout model (4 layers,
512 wide, 2/8 heads, feed-forward 1536, vocabulary 32,000 untied: 44.8 M float32
parameters), random gradients, 2 threads: PyTorch's single-tensor AdamW (its CPU default,
foreach and fused off; torch::optim::AdamW's arithmetic) against fused=True (ATen's
_fused_adamw_, which nightshift's FusedAdamW calls). Milliseconds per step, the mean of 5
steps after 2, alternating, --repeats times.

  bench/adamw_bench.py [--repeats 2]
"""
import argparse
import time

import torch

SHAPES = [(32000, 512), (32000, 512)] + [(512, 512), (128, 512), (128, 512), (512, 512), (1536, 512),
                                         (1536, 512), (512, 1536), (512,), (512,)] * 4


def ms_per_step(fused):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape)
    opt = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.01, foreach=False, fused=fused)
    for _ in range(2):
        opt.step()
    t0 = time.perf_counter()
    for _ in range(5):
        opt.step()
    return (time.perf_counter() - t0) / 5 * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(2)
    print(f"{sum(torch.Size(s).numel() for s in SHAPES) / 1e6:.1f} M parameters, torch {torch.__version__}")
    for _ in range(a.repeats):
        single, fused = ms_per_step(False), ms_per_step(True)
        print(f"single-tensor {single:.1f} ms, fused {fused:.1f} ms: {single / fused:.1f}x")


if __name__ == "__main__":
    main()

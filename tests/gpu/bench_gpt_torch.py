"""PyTorch's side of tests/gpu/run.sh step 8: GPT training throughput in
bf16, the tree's reference GPT (tests/fixtures/gpt_ref.py) with its
attention through F.scaled_dot_product_attention (flash attention on a
GPU, PyTorch 2.x), torch.compile, bf16 autocast (fp32 master weights, like
cdl's --precision bf16), fused AdamW, random tokens.

Usage: bench_gpt_torch.py [--n-layer L --n-head H --n-embd C --block T
  --vocab V --batch B] [--steps N] [--no-compile] [--device cuda|cpu]
The last lines are "tokens_per_sec X" and "flops_per_token F" (nanoGPT's
estimate: 6 N + 12 L C T, N the parameters without the position
embedding); exit 1 without a GPU (--device cpu only checks the script)."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import gpt_ref  # noqa: E402  (the one reference GPT of the tests)


def sdpa_forward(self, x):
    """gpt_ref's attention, the same parameters, through PyTorch's fused
    kernel (flash attention where the GPU and dtype allow)."""
    B, T, C = x.shape
    q, k, v = self.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpt_torch: no CUDA GPU visible to PyTorch", file=sys.stderr)
        sys.exit(1)
    if not hasattr(F, "scaled_dot_product_attention"):
        print(f"bench_gpt_torch: PyTorch {torch.__version__} has no scaled_dot_product_attention "
              "(needs 2.x)", file=sys.stderr)
        sys.exit(1)
    gpt_ref.CausalSelfAttention.forward = sdpa_forward
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    cfg = gpt_ref.GPTConfig(n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd,
                            block_size=a.block, vocab_size=a.vocab, bias=True, dropout=0.0)
    model = gpt_ref.GPT(cfg).to(dev)
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    flops_per_token = 6 * n + 12 * a.n_layer * a.n_embd * a.block
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1,
                            **({"fused": True} if a.device == "cuda" else {}))
    step_model = model if a.no_compile else torch.compile(model)
    x = torch.randint(0, a.vocab, (a.batch, a.block), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.block), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16):
            logits, _ = step_model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):   # compile, autotune, warm up
        loss0 = step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    dt = time.perf_counter() - t0
    tps = a.steps * a.batch * a.block / dt
    mode = "eager" if a.no_compile else "torch.compile"
    print(f"torch {torch.__version__} {mode} + sdpa, bf16 autocast: GPT {n / 1e6:.1f}M, "
          f"batch {a.batch} x {a.block}: {tps:.0f} tokens/s ({a.steps} steps in {dt:.2f} s), "
          f"loss {loss0.item():.4f} -> {loss.item():.4f}")
    print(f"tokens_per_sec {tps:.1f}")
    print(f"flops_per_token {flops_per_token}")


if __name__ == "__main__":
    main()

"""What PyTorch reaches on this GPU for prefill 8,192's pieces (issue 15).

The Llama-3-8B shape's prefill GEMMs at 8,192 tokens through torch.matmul
(cuBLAS/cuBLASLt as PyTorch picks them) and causal attention through
scaled_dot_product_attention's flash backend, each timed between CUDA events
(median of 20 runs after 5 warm-ups), next to a device-to-device copy. The
figures say how far our kernel table (bench/RESULTS.md) is from what a
well-kept library gets on the same machine, not a forward.

Usage (GPU machine): python3 bench/peer_torch_peaks.py
"""
import statistics

import torch
import torch.nn.functional as F


def timed(fn, runs=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main():
    dev = torch.device("cuda:0")
    print("device:", torch.cuda.get_device_name(dev), "torch", torch.__version__)
    M, D, F_, KV = 8192, 4096, 14336, 1024
    x = torch.randn(M, D, device=dev, dtype=torch.bfloat16)
    act = torch.randn(M, F_, device=dev, dtype=torch.bfloat16)
    shapes = [("q / o", x, D), ("k / v", x, KV), ("gate / up", x, F_), ("down", act, D)]
    print("| GEMM [M,K]x[K,N] | ms | TFLOP/s |")
    print("| --- | ---: | ---: |")
    for name, a, n in shapes:
        w = torch.randn(n, a.shape[1], device=dev, dtype=torch.bfloat16)
        ms = timed(lambda: torch.matmul(a, w.t()))
        fl = 2 * a.shape[0] * a.shape[1] * n
        print(f"| {name} [{a.shape[0]},{a.shape[1]}]x[{a.shape[1]},{n}] | {ms:.3f} | {fl / ms / 1e9:.0f} |")
    w2 = torch.randn(2 * F_, D, device=dev, dtype=torch.bfloat16)
    ms = timed(lambda: torch.matmul(x, w2.t()))
    print(f"| gate+up merged [{M},{D}]x[{D},{2 * F_}] | {ms:.3f} | {2 * M * D * 2 * F_ / ms / 1e9:.0f} |")

    # The forward's GEMM sequence, 32 layers back to back (q, k, v, o,
    # gate, up, down at 8,192 tokens, every output bf16, where ours adds o
    # and down into the F32 residual stream), as one sustained run: what the
    # GPU keeps up over ~150 ms rather than over one product.
    ws = {n: torch.randn(n_out, n_in, device=dev, dtype=torch.bfloat16)
          for n, n_out, n_in in [("q", D, D), ("k", KV, D), ("v", KV, D), ("o", D, D), ("g", F_, D), ("u", F_, D), ("d", D, F_)]}

    def layers():
        for _ in range(32):
            torch.matmul(x, ws["q"].t()); torch.matmul(x, ws["k"].t()); torch.matmul(x, ws["v"].t())
            torch.matmul(x, ws["o"].t()); torch.matmul(x, ws["g"].t()); torch.matmul(x, ws["u"].t())
            torch.matmul(act, ws["d"].t())

    ms = timed(layers, runs=5, warm=1)
    fl = 32 * 2 * M * (2 * D * D + 2 * KV * D + 3 * F_ * D)
    print(f"32 layers' GEMMs back to back (q, k, v, o, gate, up, down): {ms:.1f} ms, {fl / ms / 1e9:.0f} TFLOP/s")

    H, d = 32, 128
    q = torch.randn(1, H, M, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, H, M, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, H, M, d, device=dev, dtype=torch.bfloat16)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    fl = 4 * M * M * d * H / 2
    print(f"attention (SDPA flash, causal, {H} heads x {M} x {d}): {ms:.3f} ms a layer, {fl / ms / 1e9:.0f} TFLOP/s, x32 layers {32 * ms:.1f} ms")

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    print(f"device-to-device copy 1 GiB: {ms:.3f} ms, {n / ms / 1e9:.2f} TB/s (bytes copied)")


if __name__ == "__main__":
    main()

"""The fused head (``optim.fused_head``): a training forward's memory and time
with a large vocabulary, log-probs from the logits vs from the hidden states in
chunks (``trainer.head``).

    python bench/head_bench.py [--vocab 151936] [--hidden 896] [--layers 2]
                               [--batch 8x256] [--repeats 3] [--threads 2]
                               [--device cpu] [--dtype float32] [--frozen-head]

The model is a Llama of Qwen2.5-0.5B's widths (896 hidden, 14 heads of 64, 2
key/value heads, a 4,864-wide MLP, a 151,936-entry vocabulary, an untied head)
with ``--layers`` decoder layers (24 in Qwen2.5-0.5B; fewer keep a CPU run
short, and make the head's share larger than there). Each variant runs in a
fresh process, the two interleaved (A B, B A, ...): one ``Policy.token_stats``
with entropy over ``--batch`` rows x tokens (random ids, every position
scored), a loss of the log-probs and the entropy, its backward; the first
iteration warms up, the median of the next three is timed. Reported per run:
``saved_mib`` (the distinct storages autograd saved for the backward,
parameters left out), ``vocab_wide_mib`` (those of them a vocabulary wide),
``peak_rss_mib`` (the process's peak resident memory; on CUDA the allocator's
peak above the weights), ``forward_s``, ``backward_s``, and the log-probs'
sum and a gradient norm (the same numbers both ways, to rounding). The loss has
an entropy bonus (its gradient too) unless ``--frozen-head``, which also freezes
the head as LoRA does. Medians and
the fused / logits ratios are printed last.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("logits", "fused")


def child(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.policy import Policy
    from trainer.tokenizer import build_word_tokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config)
    # The tokenizer is only the policy's renderer's; ids are drawn over the model's
    # whole vocabulary (a model's embedding may be wider than its tokenizer).
    policy = Policy(model, build_word_tokenizer(["a", "b"]))
    policy = policy.to(device=device, dtype=dtype)
    policy.fused_head = args.variant == "fused"
    if args.frozen_head:  # LoRA's: the head is not trained
        model.lm_head.weight.requires_grad_(False)
    rows, width = (int(x) for x in args.batch.split("x"))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (rows, width), generator=g).to(device)
    mask = torch.ones_like(ids)
    weights = torch.randn(rows, width - 1, generator=g).to(device)
    params = {p.untyped_storage().data_ptr() for p in policy.parameters()}
    seen: set[int] = set()
    saved = {"all": 0, "wide": 0}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            saved["all"] += t.untyped_storage().nbytes()
            if t.dim() and t.shape[-1] == args.vocab:
                saved["wide"] += t.untyped_storage().nbytes()
        return t

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    fwd, bwd = [], []
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    for i in range(4):
        policy.zero_grad(set_to_none=True)
        seen.clear()
        saved.update(all=0, wide=0)
        sync()
        t0 = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            st = policy.token_stats(
                ids, mask, with_entropy=True, entropy_grad=not args.frozen_head
            )
            loss = (st.logprobs * weights).sum()
            if not args.frozen_head:
                loss = loss + 0.01 * st.entropy.sum()
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        if i:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    grad = torch.cat(
        [p.grad.float().flatten() for p in policy.parameters() if p.grad is not None]
    )
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return {
        "variant": args.variant,
        "saved_mib": round(saved["all"] / 2**20, 1),
        "vocab_wide_mib": round(saved["wide"] / 2**20, 1),
        "peak_rss_mib": round(peak, 1),
        "forward_s": round(statistics.median(fwd), 4),
        "backward_s": round(statistics.median(bwd), 4),
        "logprob_sum": round(float(st.logprobs.sum()), 3),
        "grad_norm": round(float(grad.norm()), 6),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--intermediate", type=int, default=4864)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", default="8x256", help="rows x tokens")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument(
        "--frozen-head",
        action="store_true",
        help="the head not trained and no entropy bonus (LoRA's case: the fused "
        "head takes the hidden states' gradient in the forward)",
    )
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:
        print(json.dumps(child(args)))
        return
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    flags = [a for a in sys.argv[1:]]
    for r in range(args.repeats):
        for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, *flags, "--variant", v],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            runs[v].append(row)
            print(json.dumps(row), flush=True)
    keys = ("saved_mib", "vocab_wide_mib", "peak_rss_mib", "forward_s", "backward_s")
    med = {v: {k: statistics.median(x[k] for x in runs[v]) for k in keys} for v in runs}
    ratio = {
        k: round(med["fused"][k] / med["logits"][k], 3)
        for k in keys
        if med["logits"][k]
    }
    print(json.dumps({"median": med, "fused_over_logits": ratio, "args": vars(args)}))


if __name__ == "__main__":
    main()

"""What the scorers' weight fingerprint (oar.method.weight_fingerprint) costs per scoring call: two
fingerprints and their comparison, timed at a shipped testbed policy's shape or Qwen2.5's (weights left
uninitialised: the values do not change the cost).

    .venv/bin/python perf/weight_fingerprint_cost.py --shape chain_f1
    .venv/bin/python perf/weight_fingerprint_cost.py --shape 1.5b
    .venv/bin/python perf/weight_fingerprint_cost.py --shape 1.5b --digest   # the exact digest of a whole entry
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from oar.method.weight_fingerprint import digests, first_change, first_digest_change, fingerprints


def main() -> None:
    parser = argparse.ArgumentParser(description="time a weight fingerprint (taken and compared) at a model's shape")
    parser.add_argument("--shape", default="chain_f1",
                        help="a shipped testbed policy (chain_f1, chain_d8), or 1.5b or 7b (Qwen2.5's shapes)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--digest", action="store_true",
                        help="time the exact digest the benchmark takes around each entry (every parameter's and "
                             "buffer's sha256) instead of the per-call fingerprint")
    args = parser.parse_args()
    if args.shape not in ("1.5b", "7b"):
        from oar.models.frozen import policy_dir

        model = AutoModelForCausalLM.from_pretrained(policy_dir(args.shape)).to(args.device)
    else:
        dims = {"1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                             num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
                "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                           num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False)}[args.shape]
        config = AutoConfig.for_model("qwen2", **dims)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model = model.to_empty(device=args.device)  # the values do not matter to the cost: no init
        model.tie_weights()
    count = sum(1 for _ in model.parameters())
    weights = sum(p.numel() for p in model.parameters())
    take, compare = (digests, first_digest_change) if args.digest else (fingerprints, first_change)
    what = "per entry (two exact digests and a comparison)" if args.digest else \
        "per scoring call (two fingerprints and a comparison)"
    before = take({"the policy": model})
    compare(before, {"the policy": model})  # warm-up
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    sync()
    started = time.perf_counter()
    for _ in range(args.repeats):
        before = take({"the policy": model})
        assert compare(before, {"the policy": model}) is None
    sync()
    each = (time.perf_counter() - started) / args.repeats
    print(f"{args.shape} on {args.device}: {count} parameters, {weights / 1e6:.1f} M weights: "
          f"{each * 1e3:.2f} ms {what}")


if __name__ == "__main__":
    main()

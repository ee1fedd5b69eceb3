"""stream_generate.py: greedy generation of a Llama larger than its VRAM
budget, the way a user writes it, by one of four methods:

  vram         the whole model on the GPU (the speed to match)
  stream       gpumem.torch.stream(model, budget=...): weights in gpu-memd
               buffers, streamed block by block (a gpu-memd must be running:
               $GPU_MEMD_SOCKET, else the default socket)
  dispatch     accelerate's infer_auto_device_map + dispatch_model with
               max_memory={0: budget, "cpu": ...}: the layers past the
               budget stay on the CPU and are copied in at each forward
  cpu_offload  accelerate.cpu_offload: every weight on the CPU

    python3 examples/stream_generate.py --method stream --batch 16

The model is built from a transformers LlamaConfig (hidden 2048, 5632, 16
heads, 8 KV heads, vocabulary 32000, 17 layers: 1.87 GB in bf16) with
random weights from a fixed seed, on the CPU, so every method generates
from the same weights. Prints the tokens a second of the first
generate() (cold) and the median of --runs more, and a hash of the
tokens, which is the same for every method. Nothing else is set up:
no CPU pinning, no environment variables, the daemon as it runs.

Needs a GPU, PyTorch and transformers (accelerate for dispatch and
cpu_offload); bench/torch/bench_stream_plain.py runs each method in a
process of its own against a gpu-memd with its default configuration.
--result adds one line "RESULT {json}" with what was measured.
"""
import argparse
import hashlib
import json
import os
import statistics
import sys
import time

GB = 10 ** 9


def build_model(layers, seed):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=2048, intermediate_size=5632,
                         num_hidden_layers=layers, num_attention_heads=16,
                         num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=2048)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def place(model, method, budget):
    """Put `model` where `method` runs it; returns what is worth saying
    about it (a dict)."""
    import torch
    if method == "vram":
        model.to("cuda")
        return {}
    if method == "stream":
        import gpumem.torch
        streamer = gpumem.torch.stream(model, budget=budget)
        return {"streamer": streamer}
    if method == "dispatch":
        from accelerate import dispatch_model, infer_auto_device_map
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        device_map = infer_auto_device_map(
            model, max_memory={0: budget, "cpu": ram // 2},
            no_split_module_classes=model._no_split_modules)
        dispatch_model(model, device_map=device_map)
        return {"device_map": device_map}
    if method == "cpu_offload":
        from accelerate import cpu_offload
        cpu_offload(model, execution_device=torch.device("cuda:0"))
        return {}
    raise ValueError(method)


def stream_pool(s):
    """The streamer's VRAM pool in its daemon's status."""
    device = s.ops.daemon_device(s.device_index)
    return next(p for p in s.client.status("pools").pools
                if p.tier == "vram" and p.device == device)


def mark_copies(placed):
    """Before the first generate(): the daemon's copy counters of the
    streamer's pool, which count since the daemon started (other
    processes' copies too), so that details() says this process's."""
    s = placed.get("streamer")
    if s is not None:
        pool = stream_pool(s)
        placed["copies_before"] = (pool.bytes_in, pool.copy_us_in,
                                   pool.bytes_out)


def details(model, method, placed):
    """Figures that explain a speed: the streamer's plan and counters and
    what the daemon copied for this process's generate() calls (from
    mark_copies on); where accelerate put the layers."""
    out = {}
    s = placed.get("streamer")
    if s is not None:
        from gpumem import lead
        device = s.ops.daemon_device(s.device_index)
        pool = stream_pool(s)
        bytes_in, us_in, bytes_out = placed.get("copies_before", (0, 0, 0))
        out.update(
            blocks=len(s.blocks),
            resident_blocks=sum(b.resident for b in s.blocks),
            streamed_bytes_per_pass=sum(b.nbytes for b in s.blocks
                                        if not b.resident),
            resident_bytes=s.rest.nbytes + sum(b.nbytes for b in s.blocks
                                               if b.resident),
            lead=s.lead, plan=s.plan, stats=dict(s.stats),
            link_bytes_per_s_in=lead.link_in(s.client, device),
            daemon_device=device, pool_capacity=pool.capacity,
            pool_bytes_in=pool.bytes_in - bytes_in,
            pool_copy_us_in=pool.copy_us_in - us_in,
            pool_bytes_out=pool.bytes_out - bytes_out,
            arena_size=pool.arena_size)
    if "device_map" in placed:
        m = placed["device_map"]
        out["device_map"] = {str(k): str(v) for k, v in m.items()}
        out["gpu_modules"] = sum(1 for v in m.values() if v in (0, "cuda:0"))
        out["cpu_modules"] = sum(1 for v in m.values() if v == "cpu")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", required=True,
                    choices=("vram", "stream", "dispatch", "cpu_offload"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--budget", default="0.95G",
                    help="bytes of weights on the GPU for stream and "
                    "dispatch (K, M, G: powers of 1024; default 0.95G)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=32,
                    help="prompt tokens per sequence (default 32)")
    ap.add_argument("--layers", type=int, default=17)
    ap.add_argument("--runs", type=int, default=3,
                    help="timed generate() calls after the first (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result", action="store_true",
                    help="also print one line RESULT {json}")
    args = ap.parse_args()

    import torch
    budget = parse_budget(args.budget)
    t0 = time.perf_counter()
    model = build_model(args.layers, args.seed)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    built_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    placed = place(model, args.method, budget)
    placed_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, 32000, (args.batch, args.prompt), generator=g)
    prompt = prompt.to("cuda:0")
    mark_copies(placed)
    kwargs = dict(max_new_tokens=args.new_tokens,
                  min_new_tokens=args.new_tokens, do_sample=False,
                  pad_token_id=0)

    def timed():
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, **kwargs)
        torch.cuda.synchronize()
        return out, args.batch * args.new_tokens / (time.perf_counter() - start)

    tokens, cold = timed()
    rates, same = [], True
    for _ in range(args.runs):
        again, rate = timed()
        rates.append(rate)
        same = same and torch.equal(again, tokens)
    warm = statistics.median(rates) if rates else cold
    digest = hashlib.sha256(json.dumps(tokens.tolist()).encode()).hexdigest()
    print(f"{args.method}: batch {args.batch}, {args.new_tokens} new tokens: "
          f"{warm:.2f} tok/s ({cold:.2f} the first time); "
          f"tokens {digest[:16]}")
    if args.result:
        result = {"method": args.method, "batch": args.batch,
                  "budget": budget, "weight_bytes": weight_bytes,
                  "layers": args.layers, "new_tokens": args.new_tokens,
                  "tokens_per_s": warm, "cold_tokens_per_s": cold,
                  "rates": rates, "tokens_sha256": digest,
                  "runs_identical": same, "built_s": built_s,
                  "placed_s": placed_s,
                  "max_allocated": torch.cuda.max_memory_allocated(),
                  "cpus": sorted(os.sched_getaffinity(0)),
                  "env": {k: os.environ[k] for k in (
                      "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                      "CUDA_DEVICE_MAX_CONNECTIONS", "GPU_MEMD_SOCKET",
                      "PYTORCH_CUDA_ALLOC_CONF") if k in os.environ},
                  **details(model, args.method, placed)}
        print("RESULT " + json.dumps(result), flush=True)
    return 0


def parse_budget(text):
    """Bytes from "0.95G", "900M", "1073741824" (K, M, G, T: powers of 1024)."""
    text = text.strip().upper().rstrip("B").rstrip("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(float(text))


if __name__ == "__main__":
    sys.exit(main())

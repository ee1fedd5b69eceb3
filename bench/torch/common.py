"""common.py — what bench_torch.py, bench_offload.py and profile_llama.py
use in their child processes: the same deterministic PyTorch set-up, the
Llama generation bench_torch.py and profile_llama.py both run, and the
readers of gpu-memd's figures (the shim's counters, the VRAM pool's bytes
moved).

Not a script: each bench puts its own folder first on sys.path and imports
it, so it is found whatever the current directory.
"""

import os


def setup_determinism():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.manual_seed(1234)
    torch.cuda.manual_seed_all(1234)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    return torch


def llama_generation():
    """The Llama both torch benches generate with (bench_torch.py's llama
    workload, profile_llama.py): 8 layers of 1024, bf16, eager attention,
    random weights, on the GPU; its prompt, 32 x 64 tokens from a seeded
    generator; and generate()'s keyword arguments, 128 new tokens, greedy,
    logits returned. After setup_determinism(). (model, prompt, kwargs)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=2048,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    g = torch.Generator(device="cpu").manual_seed(7)
    prompt = torch.randint(0, config.vocab_size, (32, 64), generator=g).cuda()
    kwargs = dict(max_new_tokens=128, min_new_tokens=128, do_sample=False,
                  return_dict_in_generate=True, output_logits=True,
                  pad_token_id=0)
    return model, prompt, kwargs


def shim_stats():
    """The shim's counters when it is preloaded, else None."""
    try:
        with open("/proc/self/maps") as f:
            if "libgpumem_torch.so" not in f.read():
                return None
    except OSError:
        return None
    import gpumem.torch as gt
    if gt._lib is None:
        gt._load(None, None)
    return gt.stats()


def pool_moves(client):
    p = next(p for p in client.status("pools").pools
             if p.tier == "vram" and p.device == 0)
    return {"bytes_out": p.bytes_out, "bytes_in": p.bytes_in,
            "copy_us_out": p.copy_us_out, "copy_us_in": p.copy_us_in}

"""train.py: a tiny PyTorch training loop that knows nothing of gpu-memd.

    gpumem-run python3 examples/train.py

runs it with every CUDA allocation on gpu-memd; `import gpumem.torch;
gpumem.torch.enable()` at the top of a script does the same. Without a GPU,
or with a CPU-only PyTorch, it trains on the CPU and gpumem-run says in one
line that nothing goes through gpu-memd.
"""
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(1024, 64, device=device)
y = x.sum(dim=1, keepdim=True)                  # learn to add 64 numbers

for step in range(301):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step}: loss {loss.item():.4f}")

if device == "cuda":
    print(f"trained on {torch.cuda.get_device_name()}; PyTorch holds "
          f"{torch.cuda.memory_reserved() >> 20} MiB (gpu-memctl shows it)")
else:
    print("trained on the CPU: no GPU memory was used")

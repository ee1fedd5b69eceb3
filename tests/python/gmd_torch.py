"""gmd_torch — what the sim backend's torch tests (test_offload.py,
test_spill.py) share: torch itself, None where it is not installed (each
test file then prints its own SKIP: line and its classes skip), their
daemon's config, the small models they run, the comparisons of their
results, and Spy, which records the calls made on gpumem.Buffer.

Imported from the tests' folder, which ctest runs them in
(tests/python/CMakeLists.txt), as gmd_daemon.py is.
"""
import gpumem

try:
    import torch
    import gpumem.torch as gt
except ImportError:
    torch = gt = None

# 256 MiB of sim VRAM, room for every model here; 64 KiB granules
CONFIG = "[sim]\nvram = 256M\ngranularity = 64K\n"


def grads(model):
    return [p.grad.clone() for p in model.parameters()]


def assert_same(test, a, b, what):
    test.assertEqual(len(a), len(b), what)
    for i, (x, y) in enumerate(zip(a, b)):
        test.assertTrue(torch.equal(x, y), f"{what} {i} differs")


class Spy:
    """Record acquire/acquire_start/acquire_finish/prefetch/pageout/
    release_after calls on gpumem.Buffer by id (`calls`), and which of them
    were made with wait=False (`nowait`)."""

    def __init__(self, test):
        self.calls = []
        self.nowait = []
        for name in ("acquire", "acquire_start", "acquire_finish",
                     "prefetch", "pageout", "release_after"):
            original = getattr(gpumem.Buffer, name)
            setattr(gpumem.Buffer, name, self._wrap(name, original))
            test.addCleanup(setattr, gpumem.Buffer, name, original)

    def _wrap(self, name, original):
        calls, nowait = self.calls, self.nowait

        def method(buf, *args, **kwargs):
            calls.append((name, buf.id))
            if kwargs.get("wait", True) is False:
                nowait.append((name, buf.id))
            return original(buf, *args, **kwargs)
        return method

    def ids(self, name):
        return [i for n, i in self.calls if n == name]


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 128))


def mlp_with_reference():
    """(x, ref, model): an input whose mlp() activations are 1 MiB each,
    an mlp() through whose loss on it backward has run (the gradients to
    compare with), and a fresh mlp() with the same weights."""
    torch.manual_seed(1)
    x = torch.randn(512, 128)
    ref = mlp()
    ref(x).square().mean().backward()
    return x, ref, mlp()


class Residual(torch.nn.Module if torch else object):
    """A block as transformers writes them: the residual inside, keyword
    arguments, a tuple out."""

    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(128, 256),
                                       torch.nn.GELU(),
                                       torch.nn.Linear(256, 128))

    def forward(self, hidden, scale=None):
        return (hidden + self.mlp(hidden) * scale, None)


class Layers(torch.nn.Module if torch else object):
    """An embedding, four blocks in a ModuleList, a head; `order` says in
    which order forward runs the blocks; `hf`: Residual blocks."""

    def __init__(self, order=(0, 1, 2, 3), hf=False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 128)
        self.hf = hf
        self.layers = torch.nn.ModuleList(
            Residual() if hf else
            torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 128))
            for _ in range(4))
        self.head = torch.nn.Linear(128, 64)
        self.order = order

    def forward(self, tokens):
        h = self.embed(tokens)
        for i in self.order:
            if self.hf:
                h = self.layers[i](h, scale=0.5)[0]
            else:
                h = h + self.layers[i](h)
        return self.head(h)


def layers_with_expected():
    """(tokens, ref, expected): a batch of 16 x 32 tokens, a plain Layers()
    and its output on them, to compare a placed or streamed copy's with."""
    torch.manual_seed(3)
    tokens = torch.randint(0, 64, (16, 32))
    ref = Layers()
    with torch.no_grad():
        expected = ref(tokens)
    return tokens, ref, expected


def stream_every_block(s):
    """Make each of a Streamer's resident blocks stream: released now,
    acquired by its pre-hook at each pass."""
    for b in s.blocks:
        if b.resident:
            b.resident = False
            s._release(b)

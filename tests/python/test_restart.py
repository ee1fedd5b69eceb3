"""test_restart — PyTorch training on gpu-memd rides through daemon kills
(sim backend, CPU tensors over sim buffers).

An MLP trains for a few steps with its activations offloaded to gpu-memd
buffers (gpumem.torch.offload_activations: packed into buffers, paged out
after the forward pass, acquired back for the backward pass). At some
steps gpu-memd is killed with SIGKILL right after the forward pass —
while the activations are paged out or on their way — and started again
at once, its state kept by a keeper process. The losses and gradients of
every step must equal a run without gpu-memd, bit for bit, and the
restarted daemon must say it took the state over.
"""
import signal
import unittest

from gmd_daemon import Daemon, MiB, skip_line
from gmd_torch import CONFIG, assert_same, grads, gt, mlp, torch

import gpumem

if torch is None:
    skip_line("test_restart", "torch not installed (Debian: python3-torch): "
              "training through a restart not tested")

STEPS = 6
KILL_AT = (1, 3, 4)


@unittest.skipIf(torch is None, "torch not installed")
class Restart(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon(config=CONFIG + "[pools]\nhost_limit = 256M\n"
                             "[restart]\nkeep = keeper\nhold_s = 30\n"
                             "claim_timeout_s = 30\n")
        self.daemon.start()
        self.client = gpumem.Client(socket=self.daemon.socket, name="restart")

    def tearDown(self):
        self.client.close()
        if self.daemon.proc and self.daemon.proc.poll() is None:
            # SIGINT stops for good: the keeper lets go of what it held.
            self.daemon.kill(signal.SIGINT)
        self.daemon.cleanup()

    def train(self, offload, kill_at=()):
        torch.manual_seed(1)
        x = torch.randn(512, 128)
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses, all_grads = [], []
        for step in range(STEPS):
            opt.zero_grad()
            if offload:
                with gt.offload_activations(client=self.client, min_bytes=MiB,
                                            slab_bytes=0):
                    loss = model(x).square().mean()
                if step in kill_at:
                    self.daemon.kill()
                    self.daemon.start()
            else:
                loss = model(x).square().mean()
            loss.backward()
            losses.append(loss.detach().clone())
            all_grads.append(grads(model))
            opt.step()
        return losses, all_grads

    def test_training_rides_through_kills(self):
        ref_losses, ref_grads = self.train(offload=False)
        losses, got_grads = self.train(offload=True, kill_at=KILL_AT)
        for step in range(STEPS):
            self.assertTrue(torch.equal(losses[step], ref_losses[step]),
                            f"step {step}: loss differs")
            assert_same(self, got_grads[step], ref_grads[step],
                        f"step {step}: gradient")
        log = self.daemon.log()
        self.assertEqual(log.count("restart: took over the state"),
                         len(KILL_AT), log[-3000:])
        self.assertNotIn(" lost", log.replace(", 0 lost", ""), log[-3000:])
        status = self.client.status()
        self.assertEqual(status.restores, 1)


if __name__ == "__main__":
    unittest.main()

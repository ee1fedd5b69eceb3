"""test_killed — processes that die mid-call and a daemon that goes away.

A client process SIGKILLed while it waits in alloc (and one killed while
its buffer is being paged out) leaves nothing behind: the daemon frees what
it held, its waiting request is gone from the queue, and the room goes to
the next client. A daemon that stops (SIGTERM) or dies (SIGKILL) under a
client turns its calls, including one waiting in another thread, into
Disconnected carrying the reason; a flush owed an answer the dead daemon
never sent raises Disconnected too (restart recovery off:
GPU_MEMD_RECONNECT_S=0, else the client waits for the daemon to return).
"""
import os
import signal
import threading
import unittest

import gpumem
from gmd_daemon import MiB, Daemon, DaemonTest, reap, spawn_python, wait_until

HOLD_THEN_WAIT = """
import gpumem, sys
c = gpumem.Client(name="victim")
held = c.alloc(32 << 20)
print("holding", held.id, flush=True)
c.alloc(8 << 20, timeout=None)        # no room: waits until killed
print("allocated: should not happen", flush=True)
"""

PAGEOUT_THEN_WAIT = """
import gpumem
c = gpumem.Client(name="mover")
b = c.alloc(16 << 20)
b.as_memoryview()[:] = b"x" * (16 << 20)
b.release()
b.pageout()
print("moving", flush=True)
b.wait()
"""


class KilledClient(DaemonTest):
    def victim(self, child):
        return [c for c in self.client.status("clients").clients
                if c.pid == child.pid]

    def test_killed_while_waiting_in_alloc(self):
        mine = self.client.alloc(32 * MiB)
        child = spawn_python(self.daemon, HOLD_THEN_WAIT)
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().split()[0], "holding")
        wait_until(lambda: self.victim(child) and
                   self.victim(child)[0].waiting == 1,
                   what="the child waiting in alloc")
        st = self.client.status()
        self.assertEqual(st.total_used, 64 * MiB)
        self.assertEqual(self.victim(child)[0].bytes, 32 * MiB)

        child.send_signal(signal.SIGKILL)
        self.assertEqual(child.wait(5), -signal.SIGKILL)
        wait_until(lambda: not self.victim(child),
                   what="the daemon dropping the killed client")
        st = self.client.status()
        self.assertEqual(st.total_used, 32 * MiB)
        self.assertEqual([b.pid for b in st.buffers], [os.getpid()])
        self.assertEqual([c.waiting for c in st.clients], [0])
        self.daemon.wait_log(f"pid {child.pid}, uid")
        self.assertIn("freed 1 buffers (33554432 bytes)", self.daemon.log())
        # The room it held is free now, and no dead waiter takes it.
        more = self.client.alloc(32 * MiB, timeout=0)
        self.assertEqual(self.client.status().total_used, 64 * MiB)
        more.free()
        mine.free()


class KilledMidMove(DaemonTest):
    CONFIG = "[sim]\nvram = 64M\ncopy_rate = 8M\n"

    def test_killed_during_pageout(self):
        child = spawn_python(self.daemon, PAGEOUT_THEN_WAIT)
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().strip(), "moving")
        st = self.client.status()
        self.assertEqual(st.pools[0].queued_out, 1)     # 2 s at 8 MiB/s
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        wait_until(lambda: self.client.status().total_used == 0 and
                   all(p.used == 0 and p.queued_out == 0
                       for p in self.client.status().pools),
                   timeout=10, what="the killed client's bytes freed")
        self.assertEqual(self.client.status().total_clients, 1)
        big = self.client.alloc(64 * MiB, timeout=0)
        big.free()


class DaemonGone(unittest.TestCase):
    def setUp(self):
        # A daemon killed may come back: libgpumem would wait for it
        # (restart recovery); these tests are of the client that does not.
        old = os.environ.get("GPU_MEMD_RECONNECT_S")
        os.environ["GPU_MEMD_RECONNECT_S"] = "0"
        self.addCleanup(lambda: os.environ.pop("GPU_MEMD_RECONNECT_S") if old
                        is None else os.environ.__setitem__(
                            "GPU_MEMD_RECONNECT_S", old))
        self.daemon = Daemon("[sim]\nvram = 16M\n")
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        self.client = gpumem.Client(self.daemon.socket, name="left")
        self.addCleanup(self.client.close)

    def waiter(self):
        """A thread waiting in alloc for room that never comes; returns
        (thread, list that gets its exception)."""
        got = []

        def run():
            try:
                self.client.alloc(8 * MiB, timeout=None)
            except gpumem.GpumemError as e:
                got.append(e)
        t = threading.Thread(target=run)
        t.start()
        wait_until(lambda: self.client.status("clients").clients[0].waiting,
                   what="the thread waiting in alloc")
        return t, got

    def test_daemon_stops(self):
        buf = self.client.alloc(16 * MiB)
        t, got = self.waiter()
        self.daemon.stop()
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertIsInstance(got[0], gpumem.Disconnected)
        with self.assertRaises(gpumem.Disconnected) as cm:
            buf.release()
        self.assertIn("gpu-memd is stopping", str(cm.exception))
        with self.assertRaises(gpumem.Disconnected):
            self.client.status()
        self.client.close()
        self.assertTrue(buf.freed)

    def test_daemon_killed(self):
        buf = self.client.alloc(16 * MiB)
        t, got = self.waiter()
        self.assertEqual(self.daemon.kill(signal.SIGKILL), -signal.SIGKILL)
        t.join(5)
        self.assertFalse(t.is_alive())
        self.assertIsInstance(got[0], gpumem.Disconnected)
        self.assertTrue(str(got[0]))
        for call in (buf.release, lambda: self.client.alloc(2 * MiB),
                     self.client.pageout):
            with self.assertRaises(gpumem.Disconnected):
                call()
        with self.assertRaises(gpumem.ConnectFailed):
            gpumem.Client(self.daemon.socket)

    def test_flush_after_daemon_killed(self):
        buf = self.client.alloc(4 * MiB)
        buf.release()
        self.daemon.proc.send_signal(signal.SIGSTOP)
        buf.pageout(wait=False)                 # sent, never answered
        self.assertEqual(self.daemon.kill(signal.SIGKILL), -signal.SIGKILL)
        with self.assertRaises(gpumem.Disconnected):
            self.client.flush()
        with self.assertRaises(gpumem.Disconnected):
            self.client.flush(timeout=0)
        for call in (lambda: buf.release_after(wait=False),
                     lambda: buf.pageout(wait=False),
                     lambda: self.client.prefetch(wait=False)):
            with self.assertRaises(gpumem.Disconnected):
                call()


if __name__ == "__main__":
    unittest.main()

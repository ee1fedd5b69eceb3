"""test_client — every call of the gpumem package against the real sim
daemon: connect and its properties, alloc with flags/device/timeout, the
buffer's fields, acquire/release/release_after/held, pageout/prefetch/wait
of one, several and all buffers (the tier seen from Python and in the
daemon's status), the same with wait=False and flush (refusals raised by
the flush with the call and buffer named, once; a host pool too small;
a stopped daemon), status as Python data (the link: the sim's copy rate),
the cache (free parks, trim returns), the default client and use_client,
admin calls (as root), and that `import gpumem` needs neither torch nor
the library.
"""
import os
import time
import signal
import subprocess
import sys
import unittest

import gpumem
from gmd_daemon import MiB, DaemonTest, reap, spawn_python, wait_until


class Connect(DaemonTest):
    def test_properties(self):
        c = self.client
        self.assertEqual(c.backend, "sim")
        self.assertEqual(c.device_count, 1)
        self.assertGreaterEqual(c.protocol_version, 1)
        self.assertEqual(c.socket, self.daemon.socket)
        self.assertFalse(c.closed)
        names = [x.name for x in self.mine()]
        self.assertEqual(names, ["pytest"])

    def test_close_is_idempotent_and_frees(self):
        other = gpumem.Client(self.daemon.socket, name="other")
        buf = other.alloc(4 * MiB)
        self.assertEqual(len(self.mine()), 2)
        other.close()
        other.close()
        self.assertTrue(other.closed)
        self.assertTrue(buf.freed)
        self.wait_gone("other")
        self.assertEqual(self.mine()[0].name, "pytest")
        self.assertEqual(len(self.mine()), 1)
        self.assertEqual(self.client.status().total_used, 0)

    def test_context_manager(self):
        with gpumem.Client(self.daemon.socket, name="scoped") as c:
            c.alloc(2 * MiB)
            self.assertIn("scoped", [x.name for x in self.mine()])
        self.assertTrue(c.closed)
        self.wait_gone("scoped")

    def wait_gone(self, name):
        """The daemon learns of a close when it reads the hang-up and
        lists a leaving client until it is released (a few loop
        iterations): wait up to 2 s for `name` to leave the list."""
        deadline = time.monotonic() + 2
        while name in [x.name for x in self.mine()]:
            self.assertLess(time.monotonic(), deadline,
                            f"{name} still listed 2 s after its close")
            time.sleep(0.005)


class Alloc(DaemonTest):
    CONFIG = "[sim]\nvram = 64M\ndevices = 2\n"

    def test_fields(self):
        buf = self.client.alloc(3 * MiB + 1)     # rounded to 2 MiB steps
        self.assertEqual(buf.size, 4 * MiB)
        self.assertNotEqual(buf.ptr, 0)
        self.assertEqual(buf.ptr % (2 * MiB), 0)
        self.assertEqual(buf.device, 0)
        self.assertEqual(buf.tier, "vram")
        self.assertIs(buf.client, self.client)
        self.assertEqual(self.client.buffers, [buf])
        st = self.client.status()
        self.assertEqual([(b.buffer_id, b.size, b.acquired, b.tier, b.state)
                          for b in st.buffers],
                         [(buf.id, 4 * MiB, True, "vram", "resident")])

    def test_size_strings_device_flags(self):
        a = self.client.alloc("4M", device=1, flags=gpumem.PIN_VRAM)
        b = self.client.alloc(2 * MiB, flags=gpumem.SPILLABLE, timeout=0)
        st = self.client.status()
        flags = {x.buffer_id: (x.device, x.flags) for x in st.buffers}
        self.assertEqual(flags[a.id], (1, gpumem.PIN_VRAM))
        self.assertEqual(flags[b.id], (0, gpumem.SPILLABLE))
        self.assertEqual(a.size, 4 * MiB)
        self.assertEqual(gpumem.parse_size("1.5G"), 3 << 29)
        self.assertEqual(gpumem.format_size(3 << 29), "1.5 GiB")

    def test_free_and_context_manager(self):
        with self.client.alloc(2 * MiB) as buf:
            self.assertEqual(self.mine()[0].buffers, 1)
        self.assertTrue(buf.freed)
        buf.free()                              # twice: nothing
        self.assertEqual(self.client.buffers, [])

    def test_garbage_collected_buffer_is_freed(self):
        os.environ["GPU_MEMD_CACHE"] = "0"
        try:
            c = gpumem.Client(self.daemon.socket, name="nocache")
        finally:
            del os.environ["GPU_MEMD_CACHE"]
        self.addCleanup(c.close)
        buf = c.alloc(8 * MiB)
        self.assertEqual(self.client.status().total_used, 8 * MiB)
        del buf
        self.assertEqual(self.client.status().total_used, 0)

    def test_freed_buffer_is_parked_then_trimmed(self):
        buf = self.client.alloc(4 * MiB)
        ptr = buf.ptr
        buf.free()
        me = self.mine()[0]
        self.assertEqual((me.parked_bytes, me.buffers), (4 * MiB, 1))
        again = self.client.alloc(4 * MiB)       # from the cache
        self.assertEqual(again.ptr, ptr)
        again.free()
        self.assertEqual(self.client.trim_cache(), 1)
        wait_until(lambda: self.client.status().total_used == 0,
                   what="trimmed bytes back")


class FakeStream:
    """What release_after reads of a torch.cuda.Stream (CPU-only here)."""
    cuda_stream = 0


class Tiering(DaemonTest):
    def test_release_pageout_wait_acquire(self):
        buf = self.client.alloc(4 * MiB)
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        self.assertEqual(buf.tier, "host")
        st = self.client.status()
        self.assertEqual(st.buffers[0].tier, "host")
        self.assertFalse(st.buffers[0].acquired)
        self.assertEqual(self.mine(st)[0].host_bytes, 4 * MiB)
        buf.acquire(timeout=5)
        self.assertEqual(buf.tier, "vram")
        self.assertTrue(self.client.status().buffers[0].acquired)

    def test_read_only_lease_pageout_copies_nothing(self):
        def out():
            return next(p.bytes_out for p in self.client.status("pools").pools
                        if p.tier == "vram")
        buf = self.client.alloc(4 * MiB)
        buf.as_memoryview()[:4] = b"abcd"
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        self.assertEqual(out(), 4 * MiB)
        buf.acquire(timeout=5, read_only=True)
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        self.assertEqual(buf.tier, "host")
        self.assertEqual(out(), 4 * MiB)        # clean: nothing copied
        buf.acquire(timeout=5)                  # read-write: copy dropped
        self.assertEqual(bytes(buf.as_memoryview()[:4]), b"abcd")
        buf.as_memoryview()[:4] = b"efgh"
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        self.assertEqual(out(), 8 * MiB)
        buf.acquire(timeout=5, read_only=True)
        self.assertEqual(bytes(buf.as_memoryview()[:4]), b"efgh")

    def test_acquire_in_two_halves(self):
        buf = self.client.alloc(4 * MiB)
        buf.as_memoryview()[:4] = b"abcd"
        buf.release()
        buf.pageout()
        buf.wait(timeout=5)
        buf.acquire_start(timeout=5, read_only=True)
        with self.assertRaises(gpumem.Busy) as e:
            buf.acquire(timeout=0)
        self.assertIn("gmd_acquire_finish", str(e.exception))
        with self.assertRaises(gpumem.Busy):
            buf.release()
        buf.acquire_finish()
        self.assertEqual(buf.tier, "vram")
        self.assertTrue(self.client.status().buffers[0].acquired)
        self.assertEqual(bytes(buf.as_memoryview()[:4]), b"abcd")
        with self.assertRaises(gpumem.GpumemError) as e:
            buf.acquire_finish()                # nothing started
        self.assertIn("gmd_acquire_start", str(e.exception))
        buf.release()

    def test_prefetch_named_and_all(self):
        bufs = [self.client.alloc(2 * MiB) for _ in range(3)]
        for b in bufs:
            b.release()
        self.client.pageout(bufs[0], bufs[1])
        self.client.wait(bufs[0], bufs[1], timeout=5)
        self.assertEqual([b.tier for b in bufs], ["host", "host", "vram"])
        bufs[0].prefetch()
        bufs[0].wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["vram", "host", "vram"])
        self.client.pageout()                    # all
        self.client.wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["host"] * 3)
        self.client.prefetch()
        self.client.wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["vram"] * 3)

    def test_release_after_and_held(self):
        buf = self.client.alloc(2 * MiB)
        buf.release_after(None)                 # sim: release
        self.assertFalse(self.client.status().buffers[0].acquired)
        with buf.held(timeout=5):
            self.assertTrue(self.client.status().buffers[0].acquired)
        self.assertFalse(self.client.status().buffers[0].acquired)
        buf.acquire()
        buf.release_after(0)                    # an int handle: default
        with buf.held(stream=0):
            pass
        self.assertFalse(self.client.status().buffers[0].acquired)
        buf.acquire()
        buf.release_after(FakeStream())         # like torch.cuda.Stream
        self.assertFalse(self.client.status().buffers[0].acquired)
        with self.assertRaises(TypeError):
            buf.release_after("stream")


class NoWait(DaemonTest):
    """release_after, pageout and prefetch with wait=False, and flush."""

    def test_in_order_then_acquire(self):
        buf = self.client.alloc(4 * MiB)
        view = buf.as_memoryview()
        view[:4] = b"abcd"
        del view
        buf.release_after(None, wait=False)
        self.assertFalse(self.client.status().buffers[0].acquired)
        buf.pageout(wait=False)
        buf.wait(timeout=5)                     # after both, in order
        self.assertEqual(buf.tier, "host")
        buf.prefetch(wait=False)
        buf.acquire(timeout=5)
        self.assertEqual(buf.tier, "vram")
        self.assertEqual(bytes(buf.as_memoryview()[:4]), b"abcd")
        self.assertIsNone(self.client.flush())
        self.assertIsNone(self.client.flush(timeout=0))

    def test_client_calls_of_several_and_all(self):
        bufs = [self.client.alloc(2 * MiB) for _ in range(3)]
        for b in bufs:
            b.release_after(wait=False)
        self.client.pageout(bufs[0], bufs[1], wait=False)
        self.client.wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["host", "host", "vram"])
        self.client.pageout(wait=False)          # all
        self.client.wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["host"] * 3)
        self.client.prefetch(wait=False)
        self.client.wait(timeout=5)
        self.assertEqual([b.tier for b in bufs], ["vram"] * 3)
        self.client.flush(timeout=5)

    def test_flush_raises_the_refusal_once(self):
        buf = self.client.alloc(2 * MiB)        # acquired: no pageout
        buf.pageout(wait=False)                 # sent; no answer awaited
        with self.assertRaises(gpumem.Busy) as cm:
            self.client.flush(timeout=5)
        self.assertEqual(cm.exception.code, -16)
        self.assertIn("gmd_pageout_nowait", cm.exception.message)
        self.assertIn(f"buffer {buf.id}", cm.exception.message)
        self.assertIn("acquired", cm.exception.message)
        self.client.flush()                     # told once
        buf.release()
        buf.release_after(wait=False)
        with self.assertRaises(gpumem.Busy) as cm:
            self.client.flush()
        self.assertIn("gmd_release_after_nowait", str(cm.exception))

    def test_flush_times_out_while_the_daemon_stops(self):
        buf = self.client.alloc(2 * MiB)
        buf.release()
        os.kill(self.daemon.proc.pid, signal.SIGSTOP)
        try:
            buf.pageout(wait=False)
            with self.assertRaises(gpumem.TimedOut) as cm:
                self.client.flush(timeout=0.1)
            self.assertIn("unanswered", str(cm.exception))
        finally:
            os.kill(self.daemon.proc.pid, signal.SIGCONT)
        self.client.flush(timeout=5)
        buf.wait(timeout=5)
        self.assertEqual(buf.tier, "host")

    def test_freed_buffer_and_closed_client(self):
        buf = self.client.alloc(2 * MiB)
        buf.free()
        for call in (lambda: buf.release_after(wait=False),
                     lambda: buf.pageout(wait=False),
                     lambda: buf.prefetch(wait=False)):
            with self.assertRaises(gpumem.NoSuchBuffer):
                call()
        other = gpumem.Client(self.daemon.socket, name="other")
        keep = other.alloc(2 * MiB)
        keep.release()
        for _ in range(50):
            keep.prefetch(wait=False)           # answers owed at close
        other.close()
        with self.assertRaises(gpumem.Disconnected):
            other.flush()


class HostFull(DaemonTest):
    CONFIG = "[sim]\nvram = 64M\n[pools]\nhost_limit = 2M\nhost_stock = 0\n"

    def test_refused_pageout_is_out_of_memory(self):
        a, b = self.client.alloc(2 * MiB), self.client.alloc(2 * MiB)
        a.release()
        b.release()
        a.pageout(wait=False)
        b.pageout(wait=False)
        with self.assertRaises(gpumem.OutOfMemory) as cm:
            self.client.flush()
        self.assertIn("gmd_pageout_nowait", str(cm.exception))
        self.assertIn("host_limit", str(cm.exception))
        self.client.wait(timeout=5)
        self.assertEqual(sorted([a.tier, b.tier]), ["host", "vram"])


class Status(DaemonTest):
    def test_status_as_data(self):
        self.client.alloc(4 * MiB)
        st = self.client.status()
        self.assertIsInstance(st, gpumem.Status)
        self.assertEqual(st.backend, "sim")
        self.assertTrue(st.daemon_version)
        self.assertEqual(st.total_used, 4 * MiB)
        self.assertEqual(st.total_buffers, 1)
        vram = [p for p in st.pools if p.tier == "vram"]
        self.assertEqual((vram[0].capacity, vram[0].used),
                         (64 * MiB, 4 * MiB))
        # The driver's view (sim: nothing outside gpu-memd), and the
        # fields after the pools read right (the C struct's layout).
        self.assertEqual((vram[0].device_free, vram[0].unaccounted),
                         (60 * MiB, 0))
        # Unthrottled sim copies: the link is not known.
        self.assertEqual((vram[0].link_bytes_per_s_in,
                          vram[0].link_bytes_per_s_out), (0, 0))
        self.assertEqual(vram[0].preempt_step, 4 * MiB)
        # The last fields of the struct: who the device is.
        self.assertEqual(vram[0].uuid,
                         "GPU-5140dd00-0000-4000-8000-000000000000")
        self.assertEqual(vram[0].pci_bus_id, "0000:80:00.0")
        self.assertEqual([p.uuid for p in st.pools if p.tier == "host"],
                         [""])
        self.assertEqual(st.gpu_processes, [])
        # One link: nothing measured together (the struct's last fields).
        self.assertEqual((st.host_bytes_per_s_out, st.host_bytes_per_s_in),
                         (0, 0))
        d = st.to_dict()
        self.assertEqual(d["pools"][0]["device"], 0)
        self.assertEqual(d["clients"][0]["name"], "pytest")
        self.assertEqual(len(self.client.status("pools").clients), 0)
        self.assertEqual(len(self.client.status("clients").buffers), 0)
        self.assertEqual(len(self.client.status("buffers", pid=1).buffers),
                         0)


class Link(DaemonTest):
    CONFIG = "[sim]\nvram = 64M\ncopy_rate = 12M\n"

    def test_link_is_the_sim_copy_rate(self):
        pools = self.client.status("pools").pools
        vram = [p for p in pools if p.tier == "vram"]
        self.assertEqual((vram[0].link_bytes_per_s_in,
                          vram[0].link_bytes_per_s_out),
                         (12 * MiB, 12 * MiB))
        host = [p for p in pools if p.tier == "host"]
        self.assertEqual(host[0].link_bytes_per_s_in, 0)


class HostLinks(DaemonTest):
    """Two links the host feeds less than their sum (the sim's
    GMD_SIM_HOST_RATE): Status has what they carry together."""
    CONFIG = "[sim]\nvram = 64M\ndevices = 2\ncopy_rate = 12M\n"
    ENV = {"GMD_SIM_HOST_RATE": "16M"}

    def test_host_links_together(self):
        st = self.client.status("pools")
        self.assertEqual((st.host_bytes_per_s_out, st.host_bytes_per_s_in),
                         (16 * MiB, 16 * MiB))
        self.assertEqual(st.to_dict()["host_bytes_per_s_in"], 16 * MiB)
        vram = [p for p in st.pools if p.tier == "vram"]
        self.assertEqual([p.link_bytes_per_s_in for p in vram],
                         [12 * MiB, 12 * MiB])


class Devices(DaemonTest):
    """The daemon's devices by identity, and a CUDA device of this process
    found among them: on sim, CUDA's CUDA_VISIBLE_DEVICES rule over the
    daemon's two devices."""
    CONFIG = "[sim]\nvram = 64M\ndevices = 2\n"
    UUID = "GPU-5140dd00-0000-4000-8000-00000000000%d"

    def setUp(self):
        super().setUp()
        self.saved = os.environ.pop("CUDA_VISIBLE_DEVICES", None)

    def tearDown(self):
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        if self.saved is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.saved
        super().tearDown()

    def test_devices(self):
        self.assertEqual(self.client.devices, [
            gpumem.Device(0, self.UUID % 0, "0000:80:00.0"),
            gpumem.Device(1, self.UUID % 1, "0000:81:00.0")])

    def test_device_from_cuda(self):
        c = self.client
        self.assertEqual([c.device_from_cuda(i) for i in (0, 1)], [0, 1])
        for visible, want in (("1", [1]), ("1,0", [1, 0]),
                              (self.UUID % 1, [1]), ("GPU-5140dd00", None),
                              ("0,7,1", [0])):
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
            if want is None:    # a prefix both devices have: invalid
                with self.assertRaises(gpumem.NoSuchDevice):
                    c.device_from_cuda(0)
                continue
            self.assertEqual([c.device_from_cuda(i)
                              for i in range(len(want))], want, visible)
            with self.assertRaises(gpumem.NoSuchDevice) as e:
                c.device_from_cuda(len(want))
            self.assertIn("CUDA_VISIBLE_DEVICES=" + visible, str(e.exception))
        # What a job under CUDA_VISIBLE_DEVICES=1 allocates lands on the
        # daemon's device 1.
        os.environ["CUDA_VISIBLE_DEVICES"] = "1"
        buf = c.alloc(2 * MiB, device=c.device_from_cuda(0))
        self.assertEqual(buf.device, 1)
        mine = [b for b in c.status().buffers if b.buffer_id == buf.id]
        self.assertEqual(mine[0].device, 1)
        buf.free()


class Default(DaemonTest):
    def test_default_and_use_client(self):
        os.environ["GPU_MEMD_SOCKET"] = self.daemon.socket
        try:
            d = gpumem.default_client()
        finally:
            del os.environ["GPU_MEMD_SOCKET"]
        self.addCleanup(d.close)
        self.assertIs(gpumem.default_client(), d)
        self.assertIs(gpumem.current_client(), d)
        buf = gpumem.alloc(2 * MiB)
        self.assertIs(buf.client, d)
        with gpumem.use_client(self.client):
            self.assertIs(gpumem.current_client(), self.client)
            inner = gpumem.alloc(2 * MiB)
            self.assertIs(inner.client, self.client)
            self.assertEqual(gpumem.status().total_buffers, 2)
        self.assertIs(gpumem.current_client(), d)


class Lend(DaemonTest):
    """YIELD and acquire(lend=True): a process that waits lends what it
    holds to another process's request, and has it back, bytes intact,
    when its call returns (here: when it times out)."""
    CHILD = ("import gpumem, sys\n"
             "c = gpumem.Client(name='lender')\n"
             "held = c.alloc(40 << 20)\n"
             "held.as_memoryview()[:4] = b'lent'\n"
             "out = c.alloc(16 << 20); out.release(); out.pageout()\n"
             "out.wait(timeout=5)\n"
             "print('ready', flush=True); sys.stdin.readline()\n"
             "try:\n    out.acquire(timeout=1.5, lend=True)\n"
             "except gpumem.TimedOut:\n    print('timed out', flush=True)\n"
             "print(held.tier, bytes(held.as_memoryview()[:4]).decode(),\n"
             "      flush=True)\n")

    def test_acquire_lends_to_another_process(self):
        child = spawn_python(self.daemon, self.CHILD)
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().strip(), "ready")
        rest = self.client.alloc(24 << 20)      # the pool is full
        self.addCleanup(rest.free)
        child.stdin.write("\n")
        child.stdin.flush()
        # Waits for room only the child's lent buffer can make.
        buf = self.client.alloc(16 << 20, timeout=5)
        buf.free()
        self.assertEqual(child.stdout.readline().strip(), "timed out")
        self.assertEqual(child.stdout.readline().split(), ["vram", "lent"])
        self.assertEqual(child.wait(10), 0)

    def test_flags_are_known(self):
        self.assertEqual(gpumem.YIELD, 1 << 4)
        buf = self.client.alloc(4 * MiB, flags=gpumem.YIELD, timeout=0)
        buf.release()
        buf.acquire(timeout=1, lend=True)
        self.assertEqual(buf.tier, "vram")


@unittest.skipUnless(os.geteuid() == 0, "admin calls need root")
class Admin(DaemonTest):
    CHILD = ("import gpumem, sys\n"
             "c = gpumem.Client(name='victim')\n"
             "b = c.alloc(4 << 20); b.release()\n"
             "print('ready', flush=True); sys.stdin.readline()\n"
             "try:\n    b.acquire(timeout=5)\n"
             "except gpumem.GpumemError as e:\n"
             "    print(type(e).__name__, e, flush=True)\n")

    def test_priority_evict_drain(self):
        child = spawn_python(self.daemon, self.CHILD)
        self.addCleanup(reap, child)
        self.assertEqual(child.stdout.readline().strip(), "ready")
        self.client.admin_set_priority(child.pid, 7)
        st = self.client.status()
        victim = [c for c in st.clients if c.pid == child.pid][0]
        self.assertEqual(victim.priority, 7)
        self.client.admin_evict(child.pid)
        wait_until(lambda: [b for b in self.client.status().buffers
                            if b.pid == child.pid][0].tier == "host",
                   what="evicted to host")
        self.client.admin_drain(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        out = child.stdout.readline()
        self.assertRegex(out, r"^(Revoked|Disconnected) ")
        child.wait(5)
        with self.assertRaises(gpumem.NoSuchBuffer):
            self.client.admin_evict(child.pid)


class Import(unittest.TestCase):
    def run_python(self, code, **env):
        full = dict(os.environ, **env)
        return subprocess.run([sys.executable, "-c", code], env=full,
                              capture_output=True, text=True, timeout=60)

    def test_import_needs_no_torch_nor_numpy(self):
        r = self.run_python(
            "import sys; sys.modules['torch'] = None; "
            "sys.modules['numpy'] = None; import gpumem; "
            "print(sorted(m for m in ('torch', 'numpy') "
            "if sys.modules.get(m)))")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "[]"),
                         r.stderr)

    def test_library_not_found_says_what_to_do(self):
        r = self.run_python(
            "import gpumem\n"
            "try:\n    gpumem.Client()\n"
            "except gpumem.LibraryNotFound as e:\n    print(e)\n",
            GPUMEM_LIBRARY="/nonexistent/libgpumem.so")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("GPUMEM_LIBRARY=/nonexistent/libgpumem.so cannot be "
                      "loaded", r.stdout)
        self.assertIn("build/client/libgpumem.so", r.stdout)


if __name__ == "__main__":
    unittest.main()

"""test_passed_fds — gpu-memd started the way systemd starts it: the
listening socket as fd 3 ($LISTEN_FDS, $LISTEN_FDNAMES, $LISTEN_PID), the
fd store's fds after it, $NOTIFY_SOCKET for its messages.

A stored fd that no state record names (a run killed between a move's end
and its drop) is closed by the restore. libsystemd's reading of the passed
fds checks every one of them, so a reading after that close failed with
EBADF and the daemon did not start ("cannot listen: Bad file descriptor").
The daemon must take its socket first and come up serving it.
"""

import array
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest


def recv_stored(notify):
    """The fds gpu-memd put in the store, by name, from its datagrams
    until READY=1."""
    stored = {}
    while True:
        msg, anc, _, _ = notify.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(array.array("i", data[:len(data) - len(data) % 4]))
        text = msg.decode()
        for line in text.split("\n"):
            if line.startswith("FDNAME=") and fds:
                stored[line[7:]] = fds[0]
        if "READY=1" in text:
            return stored


def start(daemon, tmp, path, passed, names):
    """gpu-memd as systemd starts it, `passed` at fds 3 and up."""
    def as_systemd():
        high = [os.dup(fd) for fd in passed]
        for i, fd in enumerate(high):
            os.dup2(fd, 3 + i)
            os.close(fd)

    env = dict(os.environ, LISTEN_FDS=str(len(passed)),
               LISTEN_FDNAMES=":".join(names),
               NOTIFY_SOCKET=os.path.join(tmp, "notify"))
    return subprocess.Popen(
        ["sh", "-c", 'LISTEN_PID=$$ exec "$0" "$@"', daemon,
         "--backend", "sim", "--socket", path],
        env=env, preexec_fn=as_systemd,
        pass_fds=tuple(range(3, 3 + len(passed))),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class PassedFds(unittest.TestCase):
    def test_stray_stored_fd(self):
        daemon = os.environ["GMD_DAEMON"]
        tmp = tempfile.mkdtemp(prefix="gmd-passed-")
        path = os.path.join(tmp, "sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(path)
        listener.listen(8)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(os.path.join(tmp, "notify"))
        notify.settimeout(20)

        # A first run leaves its record in the "store" (this test), then
        # dies as a SIGKILL leaves it.
        first = start(daemon, tmp, path, [listener.fileno()],
                      ["gpu-memd.socket"])
        stored = recv_stored(notify)
        first.kill()
        first.communicate(timeout=20)
        self.assertIn("keep.state", stored)

        stray = os.memfd_create("stray", 0)
        os.ftruncate(stray, 2 << 20)
        names = ["gpu-memd.socket"] + list(stored) + ["keep.m999"]
        passed = [listener.fileno()] + list(stored.values()) + [stray]
        proc = start(daemon, tmp, path, passed, names)
        try:
            ready = False
            try:
                ready = "READY=1" in notify.recv(4096).decode(errors="replace")
                while not ready:
                    ready = b"READY=1" in notify.recv(4096)
            except socket.timeout:
                pass
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=20)
            listener.close()
            notify.close()
            for fd in passed[1:]:
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertIn("took over the state", out)
        self.assertIn("dropping kept m999", out)
        self.assertTrue(ready, "gpu-memd did not start on the passed "
                        "socket:\n" + out)
        self.assertIn("serving the socket systemd passed", out)


if __name__ == "__main__":
    unittest.main()

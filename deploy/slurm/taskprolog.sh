#!/bin/sh
# taskprolog.sh — Slurm TaskProlog for GPU nodes (slurm.conf:
# TaskProlog=/etc/slurm/taskprolog.sh). It runs as the job's user before
# each task; lines it prints as "export NAME=VALUE" are set in the task's
# environment, "print TEXT" lines go to the task's output.
#
# Points the task at the node's gpu-memd (GPU_MEMD_SOCKET) when the socket
# is there. It does not connect: a task prolog runs once per task, and
# thousands of tasks should not each open a connection; the node Prolog
# (prolog.sh) checks the daemon once per job. Jobs that set GPU_MEMD_SOCKET
# themselves keep theirs.
socket=${GPU_MEMD_NODE_SOCKET:-/run/gpu-memd/gpu-memd.sock}

if [ -n "${GPU_MEMD_SOCKET:-}" ]; then
        exit 0
fi
if [ -S "$socket" ]; then
        echo "export GPU_MEMD_SOCKET=$socket"
else
        echo "print gpu-memd: no socket at $socket on $(hostname); GPU memory is not shared on this node"
fi
exit 0

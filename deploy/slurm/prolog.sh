#!/bin/sh
# prolog.sh — Slurm Prolog for GPU nodes (slurm.conf:
# Prolog=/etc/slurm/prolog.sh; slurmd runs it as root once per job on each
# allocated node, before the job starts). Makes sure gpu-memd answers on
# the node. If it cannot be made to answer, the prolog fails, and Slurm
# drains the node and requeues the job, so no job lands on a node whose
# jobs cannot get GPU memory.
#
# Only for jobs that asked for GPUs: SLURM_JOB_GPUS is set in the prolog's
# environment for jobs with a GPU gres. Set GPU_MEMD_PROLOG_ALL=1 to check
# for every job.
socket=${GPU_MEMD_NODE_SOCKET:-/run/gpu-memd/gpu-memd.sock}

if [ -z "${SLURM_JOB_GPUS:-}" ] && [ "${GPU_MEMD_PROLOG_ALL:-0}" != 1 ]; then
        exit 0
fi

check() {
        timeout 10 gpu-memctl --socket "$socket" status >/dev/null 2>&1
}

check && exit 0
# Not answering: start it (the socket unit starts the service on the first
# connection; starting the service also starts the socket), then once more.
systemctl start gpu-memd.service >/dev/null 2>&1
sleep 2
check && exit 0

logger -t slurm-prolog "gpu-memd does not answer on $socket; job ${SLURM_JOB_ID:-?} not started here"
exit 1

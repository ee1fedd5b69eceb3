/*
 * gpumem.h — libgpumem, the client library of gpu-memd.
 *
 * gpu-memd owns a machine's GPU memory and a pinned host-memory pool and
 * hands buffers to client processes over a Unix socket. A buffer has a
 * stable address in the client: it never changes while the buffer lives,
 * even when the daemon moves the memory behind it between tiers.
 *
 * Conventions (a contract: kept stable across releases)
 *   - Every function that can fail returns 0 or a negative errno-style code
 *     (GMD_E* below are the ones with a meaning of their own). Output
 *     parameters come last, are named ret_*, and are untouched on failure.
 *   - After a failure, gmd_last_error() gives a sentence for people, often
 *     the daemon's own words ("pool on device 0 has 12 MiB free of ...").
 *     It is kept per thread, like errno.
 *   - A gmd_client is thread-safe: any thread may call any function on it.
 *     A background thread of the library reads the socket and answers the
 *     daemon's notifications (remap, revoke) while the application runs.
 *   - The library never prints and never exits.
 *
 * The socket: gmd_connect(NULL, ...) uses $GPU_MEMD_SOCKET, else
 * GMD_DEFAULT_SOCKET. The client's priority: $GPU_MEMD_PRIORITY (see
 * gmd_connect). The cache of idle mappings: $GPU_MEMD_CACHE and
 * $GPU_MEMD_CACHE_LIMIT (see gmd_connect and gmd_free). Riding through a
 * daemon's restart: $GPU_MEMD_RECONNECT_S (see gmd_connect).
 */
#ifndef GPUMEM_H
#define GPUMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMD_VERSION_STRING  "0.1.0"
#define GMD_DEFAULT_SOCKET  "/run/gpu-memd/gpu-memd.sock"
#define GMD_SOCKET_ENV      "GPU_MEMD_SOCKET"
#define GMD_PRIORITY_ENV    "GPU_MEMD_PRIORITY"
#define GMD_CACHE_ENV       "GPU_MEMD_CACHE"        /* "0": no mapping cache */
#define GMD_CACHE_LIMIT_ENV "GPU_MEMD_CACHE_LIMIT"  /* bytes parked at most */
/* "0": unmap a SWAPPABLE buffer's VRAM at every swap-out. By default the
 * library keeps it mapped where the daemon keeps that VRAM for the
 * buffer's way back, so a swap-in into it costs no driver call; a buffer
 * touched while out then reads stale bytes instead of faulting. */
#define GMD_KEEP_MAPPINGS_ENV "GPU_MEMD_KEEP_MAPPINGS"
/* Seconds a client rides through its daemon going away (a crash, a
 * restart, an upgrade) before its calls fail: see gmd_connect. 0: fail at
 * once, as before restart recovery. */
#define GMD_RECONNECT_ENV   "GPU_MEMD_RECONNECT_S"
#define GMD_RECONNECT_DEFAULT_S 120

/* Marks the library's exported functions: libgpumem.so is built with
 * -fvisibility=hidden, so everything else stays internal. */
#if defined(__GNUC__)
#define GMD_EXPORT __attribute__((visibility("default")))
#else
#define GMD_EXPORT
#endif

/* Errors with a meaning beyond their errno name. All are negative. */
#define GMD_ENOMEM      (-12)   /* -ENOMEM: no room in the pool before the deadline */
#define GMD_ETOOLARGE   (-27)   /* -EFBIG: larger than the pool can ever hold */
#define GMD_ETIMEDOUT   (-110)  /* -ETIMEDOUT: the request's deadline passed */
#define GMD_EQUOTA      (-122)  /* -EDQUOT: beyond this client's quota */
#define GMD_ENOENT      (-2)    /* -ENOENT: no such buffer */
#define GMD_EPERM       (-1)    /* -EPERM: not allowed */
#define GMD_EBUSY       (-16)   /* -EBUSY: the buffer's state forbids it */
#define GMD_ENOTSUP     (-95)   /* -EOPNOTSUPP: this daemon/backend cannot */
#define GMD_EPROTO      (-71)   /* -EPROTO: protocol error; connection closed */
#define GMD_ECONN       (-107)  /* -ENOTCONN: no daemon, or it went away */
#define GMD_EREVOKED    (-125)  /* -ECANCELED: the daemon revoked the buffer */
#define GMD_ELIMIT      (-11)   /* -EAGAIN: too many outstanding requests,
                                 * buffers or connections for the daemon's
                                 * [limits]; retry later */

/* Placement flags of gmd_alloc (ARCHITECTURE.md, decision 4). */
#define GMD_ALLOC_SWAPPABLE  0u        /* default: moves only while released */
#define GMD_ALLOC_PIN_VRAM   (1u << 0) /* never leaves VRAM */
#define GMD_ALLOC_SPILLABLE  (1u << 1) /* may be placed on HOST and used there
                                        * (zero-copy) when VRAM is short, or
                                        * from the start when it is larger
                                        * than the VRAM pool; moves only
                                        * while released too */
#define GMD_ALLOC_LEGACY_IPC (1u << 2) /* cuda only: plain cudaIpcMemHandle */

/* How gmd_alloc waits, not where the buffer lives (a buffer allocated with
 * it is the same as one without; the cache of idle mappings ignores it).
 *
 * GMD_ALLOC_NO_SELF_WAIT: do not wait for room only this process could
 * make. The allocation fails at once with GMD_ENOMEM — when asked, or
 * later while it waits — when the request does not fit in the device's
 * free VRAM and nothing could ever make the room but this process itself:
 * no released buffer to evict, no parked mapping to ask back and no kept
 * VRAM would cover it, no move is under way on the device, and every byte
 * in use in the device's pool belongs to connections of this process (the
 * same pid, whichever gmd_client). gmd_last_error() says so ("device 0
 * VRAM: the 786 MiB asked for can only come from memory this process holds
 * itself (pid 123: 3.4 GiB in 17 buffers ...): waiting cannot help; free
 * some"). Meant for a caller that cannot free while it waits, e.g. a
 * thread holding the lock every other thread frees under (PyTorch's
 * caching allocator, client/torch). While another process holds any of
 * the pool the request waits as usual, up to its timeout. A daemon older
 * than the flag refuses it with -EINVAL ("unknown allocation flags 0x8"). */
#define GMD_ALLOC_NO_SELF_WAIT (1u << 3)

/* GMD_ALLOC_YIELD: while this allocation waits for room, the daemon may
 * move the buffers this process holds acquired (through any gmd_client of
 * the same pid; not PIN_VRAM ones) out to host memory, to make room for
 * another process's acquire or allocation, and brings every one back into
 * VRAM, at the same address, before gmd_alloc returns — also when it
 * fails or times out, so it may return later than its timeout. The
 * caller promises that nothing of its process touches those buffers
 * until gmd_alloc returns: no kernel still queued (synchronize the device
 * first) and no other thread. This is what keeps processes that each hold
 * memory in use and each wait for more from waiting for each other for
 * ever: of those that wait this way, one is served as soon as the pool
 * can hold its request and what it lent. The daemon says in its log when
 * a process lends. A daemon older than the flag refuses it with -EINVAL
 * ("unknown allocation flags 0x10"). */
#define GMD_ALLOC_YIELD (1u << 4)

/* gmd_alloc timeouts. */
#define GMD_NO_WAIT      0        /* fail at once if there is no room */
#define GMD_WAIT_FOREVER (-1)     /* wait until room appears */

typedef struct gmd_client gmd_client;
typedef struct gmd_buffer gmd_buffer;

typedef enum gmd_tier {
        GMD_TIER_VRAM = 0,
        GMD_TIER_HOST = 1,
} gmd_tier;

typedef enum gmd_buffer_state {
        GMD_STATE_RESIDENT = 0,
        GMD_STATE_MOVING_OUT = 1,
        GMD_STATE_MOVING_IN = 2,
        GMD_STATE_REVOKED = 3,
} gmd_buffer_state;

/* ---- connection --------------------------------------------------------- */

/*
 * Connect to gpu-memd at `socket_path` (NULL: $GPU_MEMD_SOCKET, else
 * GMD_DEFAULT_SOCKET) and introduce this process as `client_name` (NULL:
 * the program's name). Starts the library's I/O thread.
 *
 * The priority the client asks for comes from $GPU_MEMD_PRIORITY, a
 * decimal integer (unset, empty or 0: the daemon's configured default).
 * Under memory pressure the daemon takes memory from lower priorities
 * first; it caps the value at the maximum configured for the user, and an
 * administrator may change it later (gmd_admin_set_priority). A value that
 * is not an integer fails with -EINVAL rather than being ignored.
 *
 * The cache of idle mappings (see gmd_free): $GPU_MEMD_CACHE is "0" to turn
 * it off (gmd_free then frees at once) or "1" (the default, also when
 * unset or empty); $GPU_MEMD_CACHE_LIMIT bounds the bytes one client keeps
 * parked, a size with an optional K/M/G/T suffix ("512M"; default 1G; 0
 * parks nothing). $GPU_MEMD_KEEP_MAPPINGS is "0" to unmap a buffer's VRAM
 * at every swap-out or "1" (the default; see GMD_KEEP_MAPPINGS_ENV). Any
 * of them set to something else fails with -EINVAL.
 *
 * If the daemon stops while the client is connected, calls fail with
 * GMD_ECONN and gmd_last_error() says "gpu-memd is stopping: " followed by
 * the daemon's notice.
 *
 * If instead the connection just ends (the daemon crashed, was killed,
 * restarted or upgraded), the client rides through: every mapping stays
 * (pointers to buffers in VRAM or host memory keep working without a
 * daemon), and the I/O thread connects again to the same socket, backing
 * off from 10 ms to 1 s (and at once when the socket's folder changes:
 * inotify), for up to $GPU_MEMD_RECONNECT_S seconds (a
 * number, fractions allowed; default GMD_RECONNECT_DEFAULT_S, 120; 0:
 * fail at once with GMD_ECONN, as before). There it says hello and claims
 * its buffers back (the old session's token, the fds of what it maps).
 * Calls made meanwhile, and calls whose answer the old daemon never sent,
 * wait and are sent once the claims are settled, in the order made;
 * gmd_alloc, gmd_acquire and gmd_wait wait at most their own timeout
 * (GMD_ETIMEDOUT). A buffer the new daemon did not keep (one without
 * restart recovery keeps none; legacy IPC buffers never survive) is
 * revoked like a drained one: unmapped, its range reserved, its calls
 * GMD_EREVOKED with gmd_last_error() naming it and why ("gpu-memd
 * restarted without keeping this client's buffers (...); buffer 7 is
 * lost"). If the window passes, calls fail with GMD_ECONN: "gpu-memd went
 * away and did not come back within 120 s". An administrator's drain is
 * not ridden through. Only clients made by gmd_connect (a socket path)
 * reconnect.
 *
 * To offer its memory back the library keeps one fd per mapped segment,
 * placed at fd 1024 or above (clear of what select() can watch), and
 * with restart recovery on gmd_connect raises the process's soft
 * RLIMIT_NOFILE toward 65536, never past the hard limit (children inherit
 * it). A buffer whose fd could not be kept (no fd free there) works as
 * usual but cannot be offered back. $GPU_MEMD_RECONNECT_S=0 keeps no fd
 * and leaves the limit alone.
 *
 * Errors: GMD_ECONN when no daemon answers at the socket (missing, or
 * nobody listening; gmd_last_error() names the path), GMD_EPERM when this
 * user may not connect to it (the socket's mode and group), GMD_ELIMIT
 * when the daemon refuses the connection for one of its [limits] (too many
 * clients, or of this user, or no file descriptor left; gmd_last_error()
 * says which), -ENAMETOOLONG for a path longer than a socket address
 * holds, -EINVAL for a bad $GPU_MEMD_PRIORITY, $GPU_MEMD_CACHE* or
 * $GPU_MEMD_RECONNECT_S.
 */
GMD_EXPORT
int gmd_connect(const char *socket_path, const char *client_name,
                gmd_client **ret_client);

/*
 * Close the connection. The daemon frees every buffer the client still
 * holds; their addresses become invalid. Buffer handles of this client are
 * freed too; answers still owed to gmd_*_nowait calls are not waited for
 * (gmd_flush first to hear them). Accepts NULL; returns NULL. The one call that must not overlap
 * others on the same client: no other thread may be inside a gmd_ call on
 * it, or enter one after (the client's memory is gone when this returns).
 */
GMD_EXPORT
gmd_client *gmd_disconnect(gmd_client *client);

/* The backend the daemon runs ("sim" or "cuda") and the protocol version
 * agreed. Valid while the client lives. */
GMD_EXPORT
const char *gmd_client_backend(const gmd_client *client);
GMD_EXPORT
unsigned gmd_client_protocol_version(const gmd_client *client);

/* Number of devices the daemon serves. */
GMD_EXPORT
unsigned gmd_client_device_count(const gmd_client *client);

/* ---- devices by identity -------------------------------------------- */

/* Bytes that hold a device's UUID text ("GPU-" and 36 characters) and
 * its PCI bus id ("0000:19:00.0"), with the terminating NUL. */
#define GMD_UUID_SIZE        48
#define GMD_PCI_BUS_ID_SIZE  32

/*
 * The daemon's device that is the calling process's CUDA device
 * `cuda_ordinal` (what cudaGetDevice returns, torch's "cuda:N"), into
 * *ret_device: the number to pass to gmd_alloc. The two differ whenever
 * the process sees other GPUs than the daemon, or in another order — a
 * job that Slurm or torchrun started with CUDA_VISIBLE_DEVICES=1 calls
 * the daemon's second GPU its device 0.
 *
 * The devices are matched by UUID. On the cuda backend the CUDA driver of
 * this process says which GPU the ordinal is (cuDeviceGet and
 * cuDeviceGetUuid: CUDA_VISIBLE_DEVICES applies, by index or UUID). On
 * the sim backend, where there is no driver, the rule CUDA applies is
 * emulated over the daemon's devices: unset, the process sees all of
 * them in order; else each comma-separated entry of CUDA_VISIBLE_DEVICES
 * is an index into the daemon's list or a UUID, or a prefix of one that
 * names a single device ("GPU-5140dd00-0000-4000-8000-000000000001",
 * "GPU-5140"), and the first entry that names no device (or one already
 * listed) ends the list, as CUDA's does.
 *
 * Errors (gmd_last_error() says which and what to do): -ENODEV when the
 * process has no CUDA device `cuda_ordinal`, when its GPU is not one the
 * daemon serves (the sentence names its UUID and the daemon's devices), or
 * on cuda when this process has no usable CUDA driver; -EINVAL for a
 * negative ordinal or NULL argument; GMD_ENOTSUP when the daemon did not
 * say its devices' UUIDs (a gpu-memd older than this call: then the
 * ordinal is the daemon's device only when both see the same GPUs in the
 * same order).
 */
GMD_EXPORT
int gmd_device_from_cuda(gmd_client *client, int cuda_ordinal,
                         unsigned *ret_device);

/*
 * The daemon's `device`'s UUID ("GPU-...", as nvidia-smi prints it) or
 * PCI bus id ("0000:19:00.0") into `buf` of `len` bytes (GMD_UUID_SIZE,
 * GMD_PCI_BUS_ID_SIZE hold them). 0, -EINVAL for a device the daemon
 * does not have, -ERANGE when `len` is too small (buf untouched),
 * GMD_ENOTSUP from a daemon that does not say (older than these calls).
 */
GMD_EXPORT
int gmd_device_uuid(const gmd_client *client, unsigned device, char *buf,
                    size_t len);
GMD_EXPORT
int gmd_device_pci_bus_id(const gmd_client *client, unsigned device,
                          char *buf, size_t len);

/*
 * Let the daemon's `device` reach the memory of this client's buffers on
 * its `peer` — what cudaDeviceEnablePeerAccess(peer), called on `device`,
 * does for cudaMalloc memory, and does not do for gpu-memd's buffers
 * (VMM memory, whose access is given per mapping): kernels and copies
 * queued on `device` then read and write them directly, over NVLink or
 * PCIe peer-to-peer. It holds for the buffers mapped now and for every
 * one mapped later, after a move or a daemon restart too, until
 * gmd_disconnect. The PyTorch shim calls it from its own
 * cudaDeviceEnablePeerAccess, which PyTorch calls before the first copy
 * between two GPUs. Both are the daemon's device numbers
 * (gmd_device_from_cuda). On the sim backend every device reaches all
 * memory and this only checks its arguments.
 *
 * 0; -EINVAL unless both are devices of the daemon and differ;
 * GMD_ENOTSUP when this process cannot map `peer`'s memory for `device`
 * (no peer access between the GPUs, or it does not see both); a driver
 * error (-errno) when a buffer could not be given the access: the first
 * such buffer is named in gmd_last_error(), and it, like every other
 * buffer, still works on its own device.
 */
GMD_EXPORT
int gmd_peer_access(gmd_client *client, unsigned device, unsigned peer);

/* ---- buffers ------------------------------------------------------------ */

/*
 * Allocate `size` bytes (rounded up to the device's granularity) on
 * `device` with placement `flags`. If the pool has no room, wait up to
 * `timeout_ms` for others to free memory (GMD_NO_WAIT, GMD_WAIT_FOREVER,
 * or milliseconds). The buffer starts acquired by the caller.
 *
 * A buffer this client freed earlier with the same device, rounded size and
 * flags is reused from the client's cache without asking the daemon (see
 * gmd_free); `timeout_ms` does not matter then. Memory is zero-filled when
 * it is new; a buffer reused from this client's own cache, or VRAM that
 * one of this client's buffers of the same size left when it moved to
 * host memory ([swap] keep_vram), holds what it held, like memory from
 * cudaMalloc. Memory that was another client's is always zeroed before
 * this one sees it.
 *
 * Errors: GMD_ETOOLARGE at once when the pool could never hold it (for a
 * SPILLABLE buffer: neither the VRAM pool nor the host pool),
 * GMD_ENOMEM / GMD_ETIMEDOUT when no room appeared in time (for a
 * SPILLABLE buffer placed on host memory that includes [pools] host_limit,
 * which bounds all the pinned host memory of the daemon), GMD_ENOMEM at
 * once when the pool has room but the GPU has not because memory is held
 * outside gpu-memd (other processes, or freed buffers whose fds a client
 * keeps: gmd_last_error() says how much; see gmd_pool_status.unaccounted),
 * GMD_EQUOTA
 * (also when the quota counted on this user's parked buffers and a client
 * of theirs did not give them back within [limits] reclaim_timeout_ms),
 * -EINVAL (size 0, unknown device or flags), GMD_ENOTSUP (for instance
 * GMD_ALLOC_LEGACY_IPC from a daemon without the cuda backend), GMD_ELIMIT
 * when the client or its user holds as many buffers as the daemon's
 * [limits] allow (max_buffers_per_client, max_buffers_per_user), has as
 * many allocations waiting as they allow (max_waiting_per_client,
 * max_waiting_per_user) or the daemon has no file descriptor left for one
 * (gmd_last_error() says which).
 *
 * Waiting allocations are served in the order of the daemon's wait queue:
 * what fits first (a large request does not hold back a small one), a
 * higher priority before a lower one, users taking turns; a request that
 * has waited [limits] wait_hold_ms holds back smaller ones until it fits
 * (docs/operators.md, "Quotas and priorities").
 *
 * GMD_ALLOC_LEGACY_IPC buffers are opened from a plain CUDA IPC handle:
 * their address is the driver's choice, the daemon cannot move them, and
 * they die with the daemon (ARCHITECTURE.md decision 1).
 */
GMD_EXPORT
int gmd_alloc(gmd_client *client, size_t size, unsigned device,
              unsigned flags, int64_t timeout_ms, gmd_buffer **ret_buffer);

/*
 * Free a buffer and its handle. Its address becomes invalid to the caller.
 *
 * Unless the cache is off ($GPU_MEMD_CACHE=0), an ordinary buffer is not
 * given back at once: the library keeps its mapping "parked" for the next
 * gmd_alloc of the same shape (a fresh import and map costs more than
 * cudaMalloc) and returns 0 without waiting for the daemon. Parked memory
 * still counts as this client's in gpu-memctl (shown as cached) and against
 * its user's quota; when the daemon needs it (for someone else, or because
 * that quota is full) it asks, and the library's I/O thread unmaps and
 * returns it. At most
 * $GPU_MEMD_CACHE_LIMIT bytes stay parked; past that the oldest go back.
 * When the connection ends (the daemon stopped, an administrator drained
 * this client), every parked mapping is unmapped at once: the daemon freed
 * those buffers, and their memory must not stay held outside it.
 * Only a buffer the application holds the lease on (allocated or acquired,
 * not released since) and that is not SPILLABLE is parked: the daemon
 * never moves such a buffer, so none can be on its way to host memory
 * while it waits in the cache. Revoked and GMD_ALLOC_LEGACY_IPC buffers
 * are never parked.
 *
 * A revoked buffer frees with 0. On GMD_ECONN and GMD_EPROTO the handle is
 * freed too (the daemon dropped the memory with the connection), likewise
 * on GMD_ENOENT; on any other error the buffer and its handle stay as they
 * were (a legacy IPC buffer's mapping is closed before the daemon is asked,
 * so such a buffer stays, revoked).
 */
GMD_EXPORT
int gmd_free(gmd_client *client, gmd_buffer *buffer);

/*
 * Return every buffer parked in this client's cache (see gmd_free) to the
 * daemon now: unmap them and tell it, without waiting for an answer.
 * Returns how many went back (0 with the cache off), or a negative error
 * (GMD_ECONN when the connection is gone).
 */
GMD_EXPORT
int gmd_trim_cache(gmd_client *client);

/* The buffer's address: a device pointer (cuda) or host pointer (sim).
 * Stable for the buffer's whole life. */
GMD_EXPORT
void *gmd_buffer_ptr(const gmd_buffer *buffer);

/* Size in bytes, after rounding to the granularity. */
GMD_EXPORT
size_t gmd_buffer_size(const gmd_buffer *buffer);

/* The daemon's id for the buffer, as gpu-memctl shows it. */
GMD_EXPORT
uint64_t gmd_buffer_id(const gmd_buffer *buffer);

GMD_EXPORT
unsigned gmd_buffer_device(const gmd_buffer *buffer);

/* The tier behind the buffer's address in this process. While a released
 * buffer moves it can change before the move is over: a swap-in into VRAM
 * kept from the buffer's client maps it when the copy starts, and a
 * swap-out of a buffer released with no last-use event unmaps then, as
 * does one whose VRAM stays mapped for its way back (even with GPU work
 * pending on it: that VRAM stays where it is); a move that is then
 * cancelled or fails changes it back. The bytes are where it
 * says once gmd_wait or gmd_acquire returns, and while the buffer is
 * acquired. */
GMD_EXPORT
gmd_tier gmd_buffer_tier(const gmd_buffer *buffer);

/*
 * Take the buffer's lease before using it: the daemon never moves a buffer
 * while it is acquired (whatever its flags: the owner may be writing it,
 * and no copy could catch those writes). Release it when idle so the
 * daemon may move it to host memory when VRAM runs short.
 *
 * A buffer that was moved to host memory is brought back first, ahead of
 * every other move (a passive swap-in); the call returns when it is usable
 * again, at the same address. A pageout still copying is cancelled: the
 * buffer never left. `timeout_ms` bounds the wait (GMD_WAIT_FOREVER: no
 * bound; 0: succeed only if usable now — otherwise GMD_ETIMEDOUT, and the
 * swap-in goes on as a prefetch; a pageout being undone, whose owner had
 * already unmapped, counts as usable now and takes one more round trip,
 * at most a second). A SPILLABLE buffer that gets no VRAM by the deadline
 * is acquired where it is, on the host tier, where kernels still reach it
 * (gmd_buffer_tier tells); it stays there until released. Acquire on an acquired buffer is GMD_EBUSY;
 * -EIO when its swap-in failed (the GPU refused the copy: the buffer stays
 * on host memory, intact).
 */
GMD_EXPORT
int gmd_acquire(gmd_client *client, gmd_buffer *buffer, int64_t timeout_ms);

/*
 * GMD_ACQUIRE_READ_ONLY: the caller will not write the buffer during this
 * lease (its kernels and threads only read it). While every lease since a
 * buffer's last swap-in was read only, the daemon keeps the host copy that
 * swap-in came from, and the buffer's next pageout or eviction copies
 * nothing: its VRAM is dropped and the kept copy is its host backing
 * again (weights streamed for inference cross the link one way instead of
 * two). A read-write acquire (flags 0, or gmd_acquire) gives the kept copy
 * up at once. A write made under a read-only lease may be lost at the
 * next pageout: the buffer comes back with its bytes of before. Kept
 * copies use host memory ([pools] host_limit) and are the first given up
 * when a swap-out or a host allocation needs the room. Unknown bits:
 * GMD_EINVAL.
 */
#define GMD_ACQUIRE_READ_ONLY (1u << 0)

/* GMD_ACQUIRE_YIELD: while this acquire waits for its buffer to come back,
 * the other buffers this process holds acquired may be moved out for
 * another process, as with GMD_ALLOC_YIELD (same promise: nothing of the
 * process touches them until the call returns; they are back in VRAM,
 * at their addresses, before it does, also when it fails). A daemon older
 * than the flag refuses it (GMD_EINVAL, "unknown acquire flags 0x2"). */
#define GMD_ACQUIRE_YIELD (1u << 1)

/* gmd_acquire with GMD_ACQUIRE_* `flags` (0: gmd_acquire). */
GMD_EXPORT
int gmd_acquire_flags(gmd_client *client, gmd_buffer *buffer,
                      int64_t timeout_ms, unsigned flags);

/*
 * gmd_acquire_flags in two halves, for a caller with other work to do
 * meanwhile (a layer's kernels to launch while the next layer's lease
 * comes): gmd_acquire_start sends the request and returns; the daemon
 * handles it as gmd_acquire's (the swap-in ahead of every other move,
 * `timeout_ms` counted from when it reads it). gmd_acquire_finish waits
 * for the answer and returns what gmd_acquire_flags would have; the
 * buffer is usable only after it returned 0. One acquire of a buffer may
 * be started at a time: until it is finished, another start, an acquire
 * or a release of that buffer is GMD_EBUSY, and gmd_free finishes it
 * first. The daemon reads the request before anything the thread sends
 * after the start (its answer may come later than theirs: a swap-in).
 * gmd_acquire_start fails at once only
 * for bad arguments (-EINVAL), a revoked buffer and out of memory; a dead
 * connection is what gmd_acquire_finish returns.
 */
GMD_EXPORT
int gmd_acquire_start(gmd_client *client, gmd_buffer *buffer,
                      int64_t timeout_ms, unsigned flags);
GMD_EXPORT
int gmd_acquire_finish(gmd_client *client, gmd_buffer *buffer);
GMD_EXPORT
int gmd_release(gmd_client *client, gmd_buffer *buffer);

/*
 * Release once the work queued so far on `stream` (a CUstream or
 * cudaStream_t; NULL: the default stream) is done, without waiting for it:
 * the library records an interprocess event on the stream and the daemon's
 * copies of the buffer wait for that event on the GPU. With gmd_release
 * the application must synchronize the stream first. On the sim backend
 * (no GPU work to wait for) it is gmd_release.
 */
GMD_EXPORT
int gmd_release_after(gmd_client *client, gmd_buffer *buffer, void *stream);

/*
 * Tiering. With `buffer` NULL each acts on every buffer of the client.
 *
 * A released buffer (SWAPPABLE or SPILLABLE) may be moved to host memory
 * at any time (by gmd_pageout, or by the daemon when another allocation
 * needs room); an acquired one never moves. While a SWAPPABLE buffer is
 * there its address stays reserved but is NOT mapped: touching it faults.
 * Acquire it first; the acquire brings it back. A SPILLABLE buffer on host
 * memory stays mapped there and usable by kernels; acquired there (see
 * gmd_acquire), it stays there until released. With the daemon's peer
 * tier, "host memory" may be another GPU's free VRAM instead, for either
 * kind; a SPILLABLE buffer goes there only where this process sees that
 * GPU and reaches it (libgpumem tells the daemon when it connects), is
 * mapped there and used the same way, and gmd_buffer_tier says
 * GMD_TIER_HOST (out of its own GPU). With `buffer` NULL,
 * gmd_pageout and gmd_prefetch skip the buffers that are acquired.
 *
 * gmd_pageout: move released buffers to host memory, asynchronously: it
 *   returns once the moves are queued. GMD_EBUSY for an acquired buffer,
 *   SPILLABLE ones included: release it first (gmd_release_after lets the
 *   copy wait on the GPU for work still queued on it), or let it stay
 *   where it is; -EINVAL for PIN_VRAM or legacy IPC buffers;
 *   GMD_ENOMEM when the host pool is full or [pools] host_limit leaves no
 *   room to pin a host copy; GMD_EQUOTA when the buffers would take the
 *   user past its host_quota (pageouts under way count; nothing of the
 *   request is queued then; evictions the daemon makes on its own are
 *   not refused, but count against later host allocations and pageouts);
 *   -EIO for about a second after the GPU refused
 *   a copy. With several buffers, those before the one that failed stay
 *   queued. Cancels a prefetch under way.
 * gmd_prefetch: bring buffers back to VRAM, queued behind every other
 *   move; returns at once. Cancels a pageout whose copy has not ended.
 *   GMD_EBUSY for an acquired buffer (in use where it is: release it, and
 *   the next acquire that may wait brings it to VRAM).
 * gmd_wait: wait until the buffer (or all of the client's) is not moving,
 *   up to `timeout_ms` (GMD_ETIMEDOUT after it). -EIO when a pageout or
 *   prefetch of one of them failed (the GPU refused a copy) and no wait
 *   told it yet: the buffer stays where it was, bytes intact; the error
 *   names the first such buffer and clears them all. Moves the daemon made
 *   on its own (evictions) are not reported.
 */
GMD_EXPORT
int gmd_pageout(gmd_client *client, gmd_buffer *buffer);
GMD_EXPORT
int gmd_prefetch(gmd_client *client, gmd_buffer *buffer);
GMD_EXPORT
int gmd_wait(gmd_client *client, gmd_buffer *buffer, int64_t timeout_ms);

/*
 * Without waiting for the answer. Each of these sends the request of its
 * waiting twin (gmd_release_after, gmd_pageout, gmd_prefetch) and returns
 * once it is on the socket (that may wait for room in the socket, never
 * for the daemon), saving the round trip (~0.1 ms each) on a thread that
 * launches GPU work. The library's I/O thread takes the answer;
 * gmd_flush reports a refusal.
 *
 * Order: the daemon handles one client's requests in the order they were
 * sent and answers them in that order, so a call made after one of these
 * on the same thread (a gmd_acquire, a gmd_wait, another nowait call)
 * acts after it, as it would after the waiting twin: a gmd_acquire after
 * gmd_release_after_nowait and gmd_pageout_nowait brings the buffer back
 * from wherever the pageout took it.
 *
 * What the library can tell alone fails at once, with the waiting twin's
 * codes: -EINVAL (no client; no buffer for gmd_release_after_nowait),
 * GMD_EREVOKED, the connection's error (GMD_ECONN, GMD_EPROTO) when it is
 * gone, and for gmd_release_after_nowait an error recording the last-use
 * event on `stream` (nothing is sent then). What the daemon refuses
 * (GMD_EBUSY, GMD_ENOMEM, GMD_EQUOTA, -EIO, ...; see the twins) comes
 * back from the next gmd_flush.
 *
 * gmd_release_after_nowait marks the buffer released at once, as
 * gmd_release_after does when its answer comes: gmd_free then gives it
 * back to the daemon instead of parking it (only a buffer its owner holds
 * is parked). Should the daemon refuse the release for a reason that
 * leaves the buffer acquired (its last-use event cannot be opened), the
 * I/O thread marks it held again before the refusal reaches gmd_flush;
 * refused because the buffer was not acquired (GMD_EBUSY) or is gone, it
 * stays released. On the sim backend it is a release without waiting.
 * `buffer` NULL is -EINVAL; for gmd_pageout_nowait and
 * gmd_prefetch_nowait NULL means every buffer of the client, as for the
 * twins.
 */
GMD_EXPORT
int gmd_release_after_nowait(gmd_client *client, gmd_buffer *buffer,
                             void *stream);
GMD_EXPORT
int gmd_pageout_nowait(gmd_client *client, gmd_buffer *buffer);
GMD_EXPORT
int gmd_prefetch_nowait(gmd_client *client, gmd_buffer *buffer);

/*
 * Wait until every request this client sent without waiting (the
 * gmd_*_nowait calls above, from any thread, including those sent while
 * it waits) is answered, up to `timeout_ms` (< 0: no bound; 0: only
 * look), and return the first error the daemon answered one of them with
 * since the last gmd_flush, clearing it; 0 when there was none. Later
 * errors of the same stretch are not kept: one flush tells one refusal.
 * gmd_last_error() names the call and buffer, then gives the daemon's
 * words ("gmd_pageout_nowait of buffer 7: not enough host memory to page
 * out: ..."). GMD_ETIMEDOUT when some are still unanswered at the
 * deadline (an error already answered stays for the next flush); the
 * connection's error (GMD_ECONN, GMD_EPROTO) once it is gone, after any
 * error answered before it: requests unanswered then may or may not have
 * been carried out, and the daemon freed the client's buffers anyway. With
 * nothing sent since the last flush it returns 0 at once.
 */
GMD_EXPORT
int gmd_flush(gmd_client *client, int64_t timeout_ms);

/* ---- status ------------------------------------------------------------- */

/*
 * One pool. The copy engine's figures belong to a device and are given on
 * its VRAM pool; they are 0 on the host pool. "out" is VRAM to host
 * (pageout, eviction), "in" host to VRAM (prefetch, swap-in). The average
 * rate of a direction is bytes_* / copy_us_*: bytes over the time at least
 * one copy was running, not over the uptime.
 */
typedef struct gmd_pool_status {
        unsigned device;
        gmd_tier tier;
        uint64_t capacity;
        uint64_t used;
        uint64_t free;
        uint32_t queued_out;    /* moves queued or copying, VRAM -> host */
        uint32_t queued_in;     /* moves queued or copying, host -> VRAM */
        uint64_t bytes_out;     /* copied since the daemon started */
        uint64_t bytes_in;
        uint64_t copy_us_out;   /* microseconds spent copying */
        uint64_t copy_us_in;
        /* VRAM pools: the device's host arena, pinned host memory made
         * ahead of swap-outs ([pools] host_stock in gpu-memd.conf): bytes
         * pinned so far and, of those, not holding a host copy now. */
        uint64_t arena_size;
        uint64_t arena_free;
        /* VRAM pools: of `used`, VRAM that swap-outs left, kept for the
         * same clients' next swap-ins ([swap] keep_vram) and released as
         * soon as any request needs the room. */
        uint64_t kept;
        /* VRAM pools: the GPU as its driver sees it (read at most a few
         * seconds ago): bytes free on the device, and bytes used on it
         * that gpu-memd did not create — other processes, CUDA contexts,
         * freed buffers whose fds a client keeps. An allocation the pool
         * has room for but the GPU has not fails with GMD_ENOMEM saying
         * so. Both 0 when the daemon could not read the driver. */
        uint64_t device_free;
        uint64_t unaccounted;
        /* VRAM pools: the link between host memory and the device, bytes
         * per second each way ("out" VRAM to host, "in" host to VRAM):
         * on the cuda backend measured once, soon after the daemon
         * starts, with timed copies through the copy engine and host
         * arena; on sim the configured [sim] copy_rate. The rate to plan
         * prefetches by: a buffer of N bytes takes about N / link_in
         * seconds to come back. 0 when not known (not measured yet, the
         * measurement skipped — the daemon's log says why —, sim copies
         * unthrottled, or a daemon older than these fields). */
        uint64_t link_bytes_per_s_out;
        uint64_t link_bytes_per_s_in;
        /* VRAM pools: the lowest-numbered device whose link to host memory
         * this device shares (GPUs behind one PCIe switch, as NVML's
         * topology tells; sim: [sim] shared_link), this device's own
         * number when it shares none. Devices with the same link_group
         * share one link: the daemon schedules their copies together, and
         * the link rates above are each one's measured alone. */
        unsigned link_group;
        /* VRAM pools: the process whose memory slice of the device runs
         * ([limits] memory_slice_ms in gpu-memd.conf: while it runs, what
         * that process holds stays in VRAM for it and processes of its
         * priority or lower wait for it), and the milliseconds it has left
         * at most (it ends sooner when that process uses none of its
         * buffers there). 0 and 0: no slice runs. */
        uint32_t slice_pid;
        uint64_t slice_left_ms;
        /* VRAM pools: the step, in bytes, at which the device's copies to
         * VRAM already under way pause for an acquire's swap-in ([swap]
         * preempt_step in gpu-memd.conf), so it waits behind at most a
         * step or two of a prefetch. 0: they do not pause (preempt_step 0;
         * on cuda the daemon's log says why otherwise; or an older
         * daemon). */
        uint64_t preempt_step;
        /* VRAM pools: the device's UUID as nvidia-smi prints it and its
         * PCI bus id (see gmd_device_uuid); "" on host pools and from a
         * daemon older than these fields. */
        char uuid[GMD_UUID_SIZE];
        char pci_bus_id[GMD_PCI_BUS_ID_SIZE];
        /* VRAM pools, the peer tier ([pools] peer_tier in gpu-memd.conf:
         * other GPUs' free VRAM as a swap tier): of `used`, bytes of other
         * devices' buffers this device's VRAM holds (counted against their
         * owners, not this device's users), and VRAM kept here for their
         * next swap-outs; both are the first room this device's own
         * clients get back. 0 from an older daemon. */
        uint64_t peer_held;
        uint64_t peer_spare;
} gmd_pool_status;

/* One pair of devices the peer tier may use: `home`'s buffers may rest in
 * `holder`'s free VRAM. */
typedef struct gmd_peer_status {
        unsigned home;
        unsigned holder;
        uint64_t bytes_per_s;   /* home's copies into holder's VRAM, as
                                 * measured at start (cuda) */
        uint64_t held;          /* home's buffers held there now */
} gmd_peer_status;

typedef struct gmd_client_status {
        uint64_t client_id;
        uint32_t pid;
        uint32_t uid;
        char name[65];
        uint64_t bytes;
        uint32_t buffers;
        uint32_t waiting;
        int32_t priority;
        uint32_t gid;
        int details_hidden;     /* another user's client seen by a
                                 * non-admin: name and buffers withheld */
        uint64_t parked_bytes;  /* of `bytes`, idle in its mapping cache */
        uint64_t vram_bytes;    /* of `bytes`, on VRAM (parked ones too) */
        uint64_t host_bytes;    /* of `bytes`, moved out to host memory */
        uint64_t lent_bytes;    /* of `bytes`, acquired but lent to the
                                 * daemon while a request of its process
                                 * waits (GMD_ALLOC_YIELD, GMD_ACQUIRE_YIELD):
                                 * it may be moved out meanwhile */
        uint64_t outside_bytes; /* VRAM its process holds outside gpu-memd
                                 * (fds it kept after freeing buffers,
                                 * memory allocated beside gpu-memd), as
                                 * the driver reports it per process, less
                                 * its buffers and a CUDA context
                                 * ([limits] outside_vram_allowance):
                                 * charged to its user's vram_quota and
                                 * counted in the pool's `used`. On the
                                 * oldest connection of a process only; 0
                                 * from an older daemon */
        /* Its memory plan as last reported with gmd_report_plan: the
         * planner's name ("" if none, or withheld with details_hidden) and
         * the bytes kept, offloaded, recomputed and streamed. All 0: no
         * plan reported, or an older daemon. */
        char planner[33];
        uint64_t plan_kept_bytes;
        uint64_t plan_offloaded_bytes;
        uint64_t plan_recomputed_bytes;
        uint64_t plan_streamed_bytes;
} gmd_client_status;

typedef struct gmd_buffer_status {
        uint64_t buffer_id;
        uint64_t client_id;
        uint32_t pid;
        unsigned device;
        uint64_t size;
        gmd_tier tier;
        gmd_buffer_state state;
        unsigned flags;
        int acquired;
        int parked;             /* idle in its client's mapping cache */
} gmd_buffer_status;

/* A process holding a device's memory, other than gpu-memd, as the
 * driver's management library (NVML) reports it; none where the daemon
 * cannot tell. Memory a process holds only through a freed buffer's fd may
 * be charged to no process, so these can add up to less than
 * gmd_pool_status.unaccounted. */
typedef struct gmd_gpu_process_status {
        unsigned device;
        uint32_t pid;
        uint64_t bytes;         /* 0: the driver does not say how much */
        uint64_t client_id;     /* its gpu-memd client, 0 when not one */
} gmd_gpu_process_status;

typedef struct gmd_status {
        char daemon_version[32];
        char backend[16];
        uint64_t uptime_ms;
        uint64_t total_capacity;
        uint64_t total_used;
        uint32_t total_clients;
        uint32_t total_buffers;
        size_t n_pools;
        gmd_pool_status *pools;
        size_t n_clients;
        gmd_client_status *clients;    /* filled with GMD_STATUS_CLIENTS+ */
        size_t n_buffers;
        gmd_buffer_status *buffers;    /* filled with GMD_STATUS_BUFFERS */
        size_t n_gpu_processes;
        gmd_gpu_process_status *gpu_processes;  /* largest first, per device */
        /* Restart recovery: 1 when this daemon took over the state an
         * earlier one left (0: a fresh start, or a daemon without it), and
         * how long that took, start to the last claim (0 while claims are
         * still awaited). */
        uint32_t restores;
        uint64_t restored_ms;
        /* The host's own limit across the GPUs' links: bytes per second
         * each way (out: VRAM to host, in: host to VRAM) that every GPU
         * copying at once moves, all of them together; the VRAM pools'
         * link_bytes_per_s_* are each link alone, and where the host
         * cannot feed them all at once this is below their sum (the
         * daemon then schedules copies against it). Measured at start on
         * cuda. 0: not known (not measured yet, skipped, fewer than two
         * links, or an older daemon). */
        uint64_t host_bytes_per_s_out;
        uint64_t host_bytes_per_s_in;
        /* The peer tier's pairs of devices: none where no GPU reaches
         * another, the tier is off, or the daemon is older. */
        size_t n_peers;
        gmd_peer_status *peers;
} gmd_status;

typedef enum gmd_status_what {
        GMD_STATUS_POOLS = 0,
        GMD_STATUS_CLIENTS = 1,
        GMD_STATUS_BUFFERS = 2,
} gmd_status_what;

/* Ask the daemon what it holds. With GMD_STATUS_BUFFERS, `pid` (0 = all)
 * limits the buffer list to one process. Free with gmd_status_free(). */
GMD_EXPORT
int gmd_query_status(gmd_client *client, gmd_status_what what, uint32_t pid,
                     gmd_status **ret_status);
GMD_EXPORT
gmd_status *gmd_status_free(gmd_status *status);

/*
 * Tell the daemon the memory plan this client's planner chose, for
 * administrators to see (gpu-memctl status): the bytes it keeps on the
 * GPU, offloads to host memory, recomputes and streams in, and the
 * planner's name (printable ASCII, at most 32 bytes; NULL for none). The
 * daemon decides nothing by it; each report replaces the last. Sent
 * without waiting: 0 once sent (while the daemon is away: once kept for
 * the next connection), -EINVAL for a bad name (nothing sent), or the
 * connection's error. The library remembers the last report: when the
 * daemon restarts under the client it is reported again, once the
 * client has reconnected and taken its buffers back. An empty report (no
 * name, all 0) takes the plan back and is not repeated.
 */
GMD_EXPORT
int gmd_report_plan(gmd_client *client, const char *planner, uint64_t kept,
                    uint64_t offloaded, uint64_t recomputed, uint64_t streamed);

/* ---- administration ----------------------------------------------------- */

/*
 * Act on every client of process `pid`. Only root and members of the
 * daemon's configured admin group may; others get GMD_EPERM, and a `pid`
 * with no client gives GMD_ENOENT. gmd_last_error() has the daemon's words.
 *
 * gmd_admin_drain: revoke and free every buffer of the process's clients,
 * then disconnect them.
 * gmd_admin_set_priority: set their priority (see gmd_connect); -EINVAL
 * when the daemon's range does not hold `priority`.
 * gmd_admin_evict: move their released buffers to host memory (their
 * addresses stay valid; the next acquire brings them back); GMD_ENOTSUP
 * from a backend that cannot move buffers yet.
 */
GMD_EXPORT
int gmd_admin_drain(gmd_client *client, uint32_t pid);
GMD_EXPORT
int gmd_admin_set_priority(gmd_client *client, uint32_t pid, int32_t priority);
GMD_EXPORT
int gmd_admin_evict(gmd_client *client, uint32_t pid);

/* ---- errors and names --------------------------------------------------- */

/* The last failure's explanation on this thread ("" if none). */
GMD_EXPORT
const char *gmd_last_error(void);

/* A short description of an error code. */
GMD_EXPORT
const char *gmd_strerror(int err);

GMD_EXPORT
const char *gmd_tier_name(gmd_tier tier);            /* "vram", "host" */
GMD_EXPORT
const char *gmd_state_name(gmd_buffer_state state);  /* "resident", ... */

/* Parse "512M", "2G", "1.5T", "4096" into bytes. 0 or -EINVAL. */
GMD_EXPORT
int gmd_parse_size(const char *text, uint64_t *ret_bytes);

/* Format bytes for people: "1.5 GiB". Writes at most `len` bytes. */
GMD_EXPORT
char *gmd_format_size(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif

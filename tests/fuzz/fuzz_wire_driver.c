/*
 * fuzz_wire_driver — runs fuzz_wire.c's LLVMFuzzerTestOneInput over a fixed
 * corpus, so the decoder's malformed cases run in ctest under any compiler
 * (libFuzzer needs clang). The corpus is built here, in code: good messages
 * of every request type, then each of them broken the ways a client could
 * break them (header, length, truncation, bad varints, huge length prefixes).
 *
 *   fuzz_wire_driver                  run the built-in corpus
 *   fuzz_wire_driver PATH...          run these inputs: files (a crash
 *                                     reproducer) or folders of them (the
 *                                     seed corpus, tests/fuzz/corpus)
 *   fuzz_wire_driver --write-corpus DIR
 *                                     write the built-in corpus as seed
 *                                     files for libFuzzer
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpumem.pb-c.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern const ProtobufCMessageDescriptor *const fuzz_wire_messages[];
extern const size_t fuzz_wire_n_messages;

typedef struct input {
        char name[48];
        size_t size;
        uint8_t *data;
} input;

static input corpus[256];
static size_t n_corpus;

static void add(const char *name, const void *data, size_t size)
{
        input *in;

        if (n_corpus == sizeof(corpus) / sizeof(corpus[0])) {
                fprintf(stderr, "corpus full\n");
                exit(1);
        }
        in = &corpus[n_corpus++];
        snprintf(in->name, sizeof(in->name), "%s", name);
        in->size = size;
        in->data = malloc(size ? size : 1);
        if (!in->data)
                exit(1);
        memcpy(in->data, data, size);
}

/* Header + payload, with the header fields given. */
static void add_packet(const char *name, uint32_t magic, uint16_t version,
                       uint16_t type, uint32_t length, const void *payload,
                       size_t payload_size)
{
        gmd_wire_header h = {
                .magic = magic, .version = version, .type = type,
                .length = length, .request_id = 1,
        };
        uint8_t pkt[GMD_WIRE_HEADER_SIZE + 512];

        if (payload_size > sizeof(pkt) - sizeof(h))
                exit(1);
        memcpy(pkt, &h, sizeof(h));
        if (payload_size)
                memcpy(pkt + sizeof(h), payload, payload_size);
        add(name, pkt, sizeof(h) + payload_size);
}

static void add_good(const char *name, uint16_t type, const void *payload,
                     size_t len)
{
        char n[48];

        add_packet(name, GMD_WIRE_MAGIC, GMD_WIRE_VERSION, type,
                   (uint32_t)len, payload, len);
        /* The same message cut short, with the header telling the truth. */
        if (len > 1) {
                snprintf(n, sizeof(n), "%s-truncated", name);
                add_packet(n, GMD_WIRE_MAGIC, GMD_WIRE_VERSION, type,
                           (uint32_t)(len - 1), payload, len - 1);
        }
        /* ... and with the header lying about it. */
        snprintf(n, sizeof(n), "%s-length-lies", name);
        add_packet(n, GMD_WIRE_MAGIC, GMD_WIRE_VERSION, type,
                   (uint32_t)len + 1, payload, len);
        /* Under the wrong type. */
        snprintf(n, sizeof(n), "%s-wrong-type", name);
        add_packet(n, GMD_WIRE_MAGIC, GMD_WIRE_VERSION, 999, (uint32_t)len,
                   payload, len);
}

static void build_corpus(void)
{
        uint8_t out[512];
        size_t len;

        /* Good messages of every request type. */
        {
                Gmd__Hello m = GMD__HELLO__INIT;

                m.min_version = 1;
                m.max_version = 1;
                m.client_name = "fuzz";
                m.priority = 5;
                len = gmd__hello__pack(&m, out);
                add_good("hello", GMD__MSG_TYPE__MSG_HELLO, out, len);
        }
        {
                Gmd__AllocRequest m = GMD__ALLOC_REQUEST__INIT;

                m.size = 4u << 20;
                m.timeout_ms = -1;
                m.flags = 2;
                len = gmd__alloc_request__pack(&m, out);
                add_good("alloc", GMD__MSG_TYPE__MSG_ALLOC, out, len);
        }
        {
                Gmd__BufferRequest m = GMD__BUFFER_REQUEST__INIT;

                m.buffer_id = 12345;
                len = gmd__buffer_request__pack(&m, out);
                add_good("free", GMD__MSG_TYPE__MSG_FREE, out, len);
        }
        {
                Gmd__AcquireRequest m = GMD__ACQUIRE_REQUEST__INIT;

                m.buffer_id = 7;
                m.timeout_ms = 1000;
                len = gmd__acquire_request__pack(&m, out);
                add_good("acquire", GMD__MSG_TYPE__MSG_ACQUIRE, out, len);
        }
        {
                Gmd__StatusRequest m = GMD__STATUS_REQUEST__INIT;

                m.what = GMD__STATUS_WHAT__STATUS_BUFFERS;
                m.pid = 42;
                len = gmd__status_request__pack(&m, out);
                add_good("status", GMD__MSG_TYPE__MSG_STATUS, out, len);
        }
        {
                Gmd__RemapAck m = GMD__REMAP_ACK__INIT;

                m.buffer_id = 7;
                m.sequence = 3;
                m.result = -5;
                len = gmd__remap_ack__pack(&m, out);
                add_good("remap-ack", GMD__MSG_TYPE__MSG_REMAP_ACK, out, len);
        }
        {
                Gmd__AdminRequest m = GMD__ADMIN_REQUEST__INIT;

                m.op = GMD__ADMIN_OP__ADMIN_PRIORITY;
                m.pid = 4242;
                m.priority = -3;
                len = gmd__admin_request__pack(&m, out);
                add_good("admin", GMD__MSG_TYPE__MSG_ADMIN, out, len);
        }
        {
                uint64_t ids[] = { 1, 2, UINT64_MAX };
                Gmd__MoveRequest m = GMD__MOVE_REQUEST__INIT;

                m.n_buffer_ids = 3;
                m.buffer_ids = ids;
                len = gmd__move_request__pack(&m, out);
                add_good("pageout", GMD__MSG_TYPE__MSG_PAGEOUT, out, len);
        }
        {
                uint64_t ids[] = { 9, 10 };
                Gmd__WaitRequest m = GMD__WAIT_REQUEST__INIT;

                m.n_buffer_ids = 2;
                m.buffer_ids = ids;
                m.timeout_ms = -1;
                len = gmd__wait_request__pack(&m, out);
                add_good("wait", GMD__MSG_TYPE__MSG_WAIT, out, len);
        }
        {
                uint64_t ids[] = { 4, 5, 6, 7 };
                Gmd__BufferList m = GMD__BUFFER_LIST__INIT;

                m.n_buffer_ids = 4;
                m.buffer_ids = ids;
                len = gmd__buffer_list__pack(&m, out);
                add_good("park", GMD__MSG_TYPE__MSG_PARK, out, len);
        }
        {
                Gmd__BufferRequest m = GMD__BUFFER_REQUEST__INIT;
                uint8_t event[16] = { 1, 2, 3, 4 };

                m.buffer_id = 3;
                m.last_use_event.data = event;
                m.last_use_event.len = sizeof(event);
                len = gmd__buffer_request__pack(&m, out);
                add_good("release-event", GMD__MSG_TYPE__MSG_RELEASE, out,
                         len);
        }
        /* What the daemon sends: the client's decoders see these. */
        {
                Gmd__DeviceInfo dev = GMD__DEVICE_INFO__INIT, *devs[] = { &dev };
                Gmd__HelloReply m = GMD__HELLO_REPLY__INIT;

                dev.name = "sim0";
                dev.vram_total = 1u << 30;
                dev.granularity = 2u << 20;
                m.version = 1;
                m.daemon_version = "0.1.0";
                m.backend = "sim";
                m.client_id = 77;
                m.n_devices = 1;
                m.devices = devs;
                len = gmd__hello_reply__pack(&m, out);
                add_good("hello-reply", GMD__MSG_TYPE__MSG_HELLO_REPLY, out,
                         len);
        }
        {
                Gmd__Segment s0 = GMD__SEGMENT__INIT, s1 = GMD__SEGMENT__INIT;
                Gmd__Segment *segs[] = { &s0, &s1 };
                Gmd__AllocReply m = GMD__ALLOC_REPLY__INIT;

                s0.size = 2u << 20;
                s1.fd_index = 1;
                s1.offset = 2u << 20;
                s1.size = 2u << 20;
                m.buffer_id = 5;
                m.size = 4u << 20;
                m.tier = GMD__TIER__TIER_HOST;
                m.n_segments = 2;
                m.segments = segs;
                len = gmd__alloc_reply__pack(&m, out);
                add_good("alloc-reply", GMD__MSG_TYPE__MSG_ALLOC_REPLY, out,
                         len);
        }
        {
                Gmd__ErrorReply m = GMD__ERROR_REPLY__INIT;

                m.code = GMD__ERROR_CODE__ERR_NO_MEMORY;
                m.message = "no room: 0 of 1 GiB free";
                len = gmd__error_reply__pack(&m, out);
                add_good("error-reply", GMD__MSG_TYPE__MSG_ERROR_REPLY, out,
                         len);
        }
        {
                Gmd__PoolInfo pool = GMD__POOL_INFO__INIT, *pools[] = { &pool };
                Gmd__ClientInfo client = GMD__CLIENT_INFO__INIT;
                Gmd__ClientInfo *clients[] = { &client };
                Gmd__BufferInfo buffer = GMD__BUFFER_INFO__INIT;
                Gmd__BufferInfo *buffers[] = { &buffer };
                Gmd__GpuProcess proc = GMD__GPU_PROCESS__INIT;
                Gmd__GpuProcess *procs[] = { &proc };
                Gmd__StatusReply m = GMD__STATUS_REPLY__INIT;

                pool.capacity = 1u << 30;
                pool.used = 4u << 20;
                pool.kept = 2u << 20;
                pool.device_free = 1u << 29;
                pool.unaccounted = 3u << 28;
                proc.pid = 4321;
                proc.bytes = 3u << 28;
                client.client_id = 3;
                client.pid = 1234;
                client.name = "trainer";
                client.bytes = 4u << 20;
                client.priority = -2;
                client.details_hidden = 1;
                buffer.buffer_id = 8;
                buffer.size = 4u << 20;
                buffer.acquired = 1;
                m.daemon_version = "0.1.0";
                m.backend = "sim";
                m.n_pools = 1;
                m.pools = pools;
                m.n_clients = 1;
                m.clients = clients;
                m.n_buffers = 1;
                m.buffers = buffers;
                m.n_gpu_processes = 1;
                m.gpu_processes = procs;
                len = gmd__status_reply__pack(&m, out);
                add_good("status-reply", GMD__MSG_TYPE__MSG_STATUS_REPLY, out,
                         len);
        }
        {
                Gmd__Segment s0 = GMD__SEGMENT__INIT, *segs[] = { &s0 };
                Gmd__RemapNotify m = GMD__REMAP_NOTIFY__INIT;

                s0.size = 2u << 20;
                m.buffer_id = 5;
                m.sequence = 2;
                m.n_segments = 1;
                m.segments = segs;
                len = gmd__remap_notify__pack(&m, out);
                add_good("remap", GMD__MSG_TYPE__MSG_REMAP, out, len);
        }
        {
                Gmd__RevokeNotify m = GMD__REVOKE_NOTIFY__INIT;

                m.buffer_id = 5;
                m.reason = GMD__ERROR_CODE__ERR_PERMISSION;
                m.message = "drained by an admin";
                len = gmd__revoke_notify__pack(&m, out);
                add_good("revoke", GMD__MSG_TYPE__MSG_REVOKE, out, len);
        }
        {
                Gmd__ReclaimNotify m = GMD__RECLAIM_NOTIFY__INIT;

                m.bytes = 64u << 20;
                len = gmd__reclaim_notify__pack(&m, out);
                add_good("reclaim", GMD__MSG_TYPE__MSG_RECLAIM, out, len);
        }
        add_good("empty-status", GMD__MSG_TYPE__MSG_STATUS, "", 0);

        /* Header-level breakage. */
        add("empty", "", 0);
        add("one-byte", "G", 1);
        {
                gmd_wire_header h = {
                        .magic = GMD_WIRE_MAGIC, .version = 1,
                        .type = GMD__MSG_TYPE__MSG_STATUS,
                };

                add("header-minus-one", &h, sizeof(h) - 1);
        }
        add_packet("bad-magic", 0x31444d48u, 1, GMD__MSG_TYPE__MSG_STATUS,
                   0, NULL, 0);
        add_packet("swapped-magic", 0x474d4431u, 1, GMD__MSG_TYPE__MSG_STATUS,
                   0, NULL, 0);
        add_packet("version-0", GMD_WIRE_MAGIC, 0, GMD__MSG_TYPE__MSG_STATUS,
                   0, NULL, 0);
        add_packet("version-2", GMD_WIRE_MAGIC, 2, GMD__MSG_TYPE__MSG_STATUS,
                   0, NULL, 0);
        add_packet("version-ffff", GMD_WIRE_MAGIC, 0xffff,
                   GMD__MSG_TYPE__MSG_STATUS, 0, NULL, 0);
        add_packet("length-max", GMD_WIRE_MAGIC, 1, GMD__MSG_TYPE__MSG_ALLOC,
                   UINT32_MAX, "abc", 3);
        add_packet("length-wraps", GMD_WIRE_MAGIC, 1, GMD__MSG_TYPE__MSG_ALLOC,
                   UINT32_MAX - GMD_WIRE_HEADER_SIZE + 4, "abcd", 4);
        add_packet("type-0", GMD_WIRE_MAGIC, 1, 0, 0, NULL, 0);
        add_packet("type-ffff", GMD_WIRE_MAGIC, 1, 0xffff, 0, NULL, 0);

        /* Payload-level breakage, under a request type. */
        {
                static const struct {
                        const char *name;
                        const char *bytes;
                        size_t len;
                } bad[] = {
                        /* field 1, wire type 7: no such wire type */
                        { "bad-wire-type", "\x0f\x01", 2 },
                        /* varint that never ends */
                        { "endless-varint", "\x08\xff\xff\xff\xff\xff", 6 },
                        /* varint longer than 10 bytes */
                        { "long-varint",
                          "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12 },
                        /* string with a length past the end */
                        { "string-past-end", "\x1a\x7f" "abc", 5 },
                        /* string with a 2^63 length */
                        { "string-huge-len",
                          "\x1a\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 10 },
                        /* field number 0 */
                        { "field-zero", "\x00\x01", 2 },
                        /* fixed64 cut short */
                        { "fixed64-short", "\x09\x01\x02\x03", 4 },
                        /* deprecated group start without end */
                        { "group-start", "\x0b\x08\x01", 3 },
                        /* unknown field 99, length-delimited, fine */
                        { "unknown-field", "\x9a\x06\x02hi", 5 },
                        /* repeated message with a broken element */
                        { "repeated-broken", "\x22\x03\x08\xff\xff", 5 },
                        /* invalid UTF-8 in the client name */
                        { "bad-utf8", "\x1a\x02\xc3\x28", 4 },
                        /* enum out of range */
                        { "enum-range", "\x08\xe7\x07", 3 },
                        /* negative as uint32 */
                        { "neg-uint32", "\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11 },
                };
                static const uint16_t types[] = {
                        GMD__MSG_TYPE__MSG_HELLO, GMD__MSG_TYPE__MSG_ALLOC,
                        GMD__MSG_TYPE__MSG_STATUS,
                };

                for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                        for (size_t t = 0; t < 3; t++) {
                                char n[48];

                                snprintf(n, sizeof(n), "%s-%u", bad[i].name,
                                         types[t]);
                                add_packet(n, GMD_WIRE_MAGIC, 1, types[t],
                                           (uint32_t)bad[i].len, bad[i].bytes,
                                           bad[i].len);
                        }
        }

        /* Largest and one-too-large packets. */
        {
                static uint8_t big[GMD_WIRE_MAX_PACKET + 1];
                gmd_wire_header h = {
                        .magic = GMD_WIRE_MAGIC, .version = 1,
                        .type = GMD__MSG_TYPE__MSG_STATUS,
                        .length = GMD_WIRE_MAX_PAYLOAD,
                };

                memset(big, 0x08, sizeof(big));
                memcpy(big, &h, sizeof(h));
                add("max-packet", big, GMD_WIRE_MAX_PACKET);
                h.length++;
                memcpy(big, &h, sizeof(h));
                add("too-large", big, GMD_WIRE_MAX_PACKET + 1);
        }
}

static int count_open_fds(void)
{
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *entry;
        int n = 0;

        if (!dir)
                return -1;
        while ((entry = readdir(dir)))
                if (entry->d_name[0] != '.')
                        n++;
        closedir(dir);
        return n;
}

static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        uint8_t *data = malloc(GMD_WIRE_MAX_PACKET + 2);
        size_t n;

        if (!f || !data) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                free(data);
                if (f)
                        fclose(f);
                return 1;
        }
        n = fread(data, 1, GMD_WIRE_MAX_PACKET + 2, f);
        fclose(f);
        LLVMFuzzerTestOneInput(data, n);
        free(data);
        return 0;
}

/* A file, or every file of a folder (not recursive). */
static int run_path(const char *path, size_t *ret_count)
{
        struct dirent *entry;
        struct stat st;
        DIR *dir;
        int r = 0;

        if (stat(path, &st) < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
                (*ret_count)++;
                return run_file(path);
        }
        dir = opendir(path);
        if (!dir) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return 1;
        }
        while ((entry = readdir(dir))) {
                char *file = NULL;

                if (entry->d_name[0] == '.')
                        continue;
                if (asprintf(&file, "%s/%s", path, entry->d_name) < 0) {
                        r = 1;
                        break;
                }
                (*ret_count)++;
                r |= run_file(file);
                free(file);
        }
        closedir(dir);
        return r;
}

static int write_corpus(const char *dir)
{
        for (size_t i = 0; i < n_corpus; i++) {
                char *path = NULL;
                FILE *f;

                if (asprintf(&path, "%s/%s", dir, corpus[i].name) < 0)
                        return 1;
                f = fopen(path, "wb");
                if (!f || fwrite(corpus[i].data, 1, corpus[i].size, f) !=
                    corpus[i].size) {
                        fprintf(stderr, "%s: %s\n", path, strerror(errno));
                        if (f)
                                fclose(f);
                        free(path);
                        return 1;
                }
                fclose(f);
                free(path);
        }
        printf("%zu inputs written to %s\n", n_corpus, dir);
        return 0;
}

/* fuzz_wire.c must decode every message of gpumem.proto: one added to the
 * protocol and not to fuzz_wire_messages[] would go unfuzzed. */
static int check_message_count(void)
{
        FILE *f = fopen(GMD_PROTO_PATH, "r");
        char line[512];
        size_t n = 0;

        if (!f) {
                fprintf(stderr, "%s: %s\n", GMD_PROTO_PATH, strerror(errno));
                return 1;
        }
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "message ", 8) == 0)
                        n++;
        fclose(f);
        if (n != fuzz_wire_n_messages) {
                fprintf(stderr, "%s has %zu messages, fuzz_wire.c decodes %zu: "
                        "add the new ones to fuzz_wire_messages[]\n",
                        GMD_PROTO_PATH, n, fuzz_wire_n_messages);
                return 1;
        }
        return 0;
}

int main(int argc, char **argv)
{
        int fds_before, fds_after, r = 0;

        build_corpus();
        if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
                return write_corpus(argv[2]);
        if (argc > 1) {
                size_t count = 0;

                for (int i = 1; i < argc; i++)
                        r |= run_path(argv[i], &count);
                if (count == 0) {
                        fprintf(stderr, "no inputs found\n");
                        return 1;
                }
                printf("%zu inputs decoded, no crash\n", count);
                return r;
        }

        r = check_message_count();
        if (r)
                return r;
        /* The first input opens the socketpair the target keeps. */
        LLVMFuzzerTestOneInput(corpus[0].data, corpus[0].size);
        fds_before = count_open_fds();
        for (int round = 0; round < 2; round++)
                for (size_t i = 0; i < n_corpus; i++)
                        LLVMFuzzerTestOneInput(corpus[i].data, corpus[i].size);
        fds_after = count_open_fds();
        if (fds_before != fds_after) {
                fprintf(stderr, "fd leak: %d fds before the corpus, %d after\n",
                        fds_before, fds_after);
                return 1;
        }
        printf("%zu inputs decoded twice, no crash, no fd leak\n", n_corpus);
        for (size_t i = 0; i < n_corpus; i++)
                free(corpus[i].data);
        return 0;
}

/*
 * fake_mover — a backend for unit tests of the core's choices on hand-made
 * buffer records (test_evict, test_buffer_index): it has copy_submit, which
 * makes it one that moves buffers (placement asks for no more), and nothing
 * else; no test calls it. `fake_vram_mem` is a VRAM backing to point
 * records at. Header-only: each test program includes it once.
 */
#ifndef GMD_TEST_FAKE_MOVER_H
#define GMD_TEST_FAKE_MOVER_H

#include "backend.h"

static int fake_copy_submit(gmd_backend *b, unsigned device, gmd_copy_dir dir,
                            gmd_mem *dst, uint64_t dst_off, gmd_mem *src,
                            uint64_t src_off, uint64_t len, void *cookie)
{
        (void)b; (void)device; (void)dir; (void)dst; (void)dst_off; (void)src;
        (void)src_off; (void)len; (void)cookie;
        return 0;
}

static gmd_backend_ops fake_mover_ops = { .name = "fake",
                                          .copy_submit = fake_copy_submit };
static gmd_backend fake_mover = { .ops = &fake_mover_ops };
static gmd_mem fake_vram_mem = { .fd = 5, .tier = GMD_TIER_VRAM };

#endif

/*
 * test_mapper_sim — the sim mapper on its own: a reservation is
 * inaccessible, map shows the memfd's bytes at the right offsets, unmap
 * keeps the range reserved, remap swaps the backing in place, and a memfd
 * shorter than its segment is refused instead of faulting later.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "mapper.h"

#define PAGE 4096u

static int memfd_with(uint64_t size, uint8_t byte)
{
        int fd = memfd_create("test", MFD_CLOEXEC);
        void *p;

        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)size), 0);
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        assert_true(p != MAP_FAILED);
        memset(p, byte, size);
        munmap(p, size);
        return fd;
}

static void test_map_unmap_remap(void **ctx)
{
        gmd_mapper *m = NULL;
        gmd_map_segment segs[2];
        uint8_t *addr = NULL;

        assert_int_equal(gmd__mapper_sim_new(&m), 0);
        assert_int_equal(m->ops->reserve(m, 4 * PAGE, (void **)&addr), 0);

        segs[0] = (gmd_map_segment){ memfd_with(2 * PAGE, 0x11), 0, 2 * PAGE };
        segs[1] = (gmd_map_segment){ memfd_with(2 * PAGE, 0x22), 2 * PAGE,
                                     2 * PAGE };
        assert_int_equal(m->ops->map(m, addr, 0, segs, 2), 0);
        /* The fds are borrowed: the mapping holds the memory without them. */
        close(segs[0].fd);
        close(segs[1].fd);
        assert_int_equal(addr[0], 0x11);
        assert_int_equal(addr[2 * PAGE - 1], 0x11);
        assert_int_equal(addr[2 * PAGE], 0x22);
        addr[5] = 0x99;

        segs[0] = (gmd_map_segment){ memfd_with(4 * PAGE, 0x33), 0, 4 * PAGE };
        assert_int_equal(m->ops->remap(m, addr, 4 * PAGE, 0, segs, 1), 0);
        close(segs[0].fd);
        assert_int_equal(addr[5], 0x33);
        assert_int_equal(addr[4 * PAGE - 1], 0x33);

        assert_int_equal(m->ops->unmap(m, addr, 4 * PAGE), 0);
        /* Still reserved: MAP_FIXED_NOREPLACE finds the range taken. */
        {
                void *p = mmap(addr, PAGE, PROT_READ,
                               MAP_PRIVATE | MAP_ANONYMOUS |
                               MAP_FIXED_NOREPLACE, -1, 0);

                assert_true(p == MAP_FAILED);
                assert_int_equal(errno, EEXIST);
        }
        m->ops->unreserve(m, addr, 4 * PAGE);
        m->ops->destroy(m);
}

static void test_short_memfd_refused(void **ctx)
{
        gmd_mapper *m = NULL;
        gmd_map_segment seg;
        void *addr = NULL;

        assert_int_equal(gmd__mapper_sim_new(&m), 0);
        assert_int_equal(m->ops->reserve(m, 4 * PAGE, &addr), 0);
        seg = (gmd_map_segment){ memfd_with(PAGE, 0), 0, 4 * PAGE };
        assert_int_equal(m->ops->map(m, addr, 0, &seg, 1), -EINVAL);
        close(seg.fd);
        m->ops->unreserve(m, addr, 4 * PAGE);
        m->ops->destroy(m);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_map_unmap_remap),
                cmocka_unit_test(test_short_memfd_refused),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_devices — finding a CUDA device of this process among the daemon's
 * (client/devices.c): the CUDA_VISIBLE_DEVICES rule the sim backend
 * emulates, in every form CUDA accepts (unset, indices, reordering, UUIDs,
 * unique UUID prefixes, an invalid entry ending the list), and
 * gmd_device_from_cuda's answers and sentences on a client whose hello
 * said two devices, without a daemon.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "client.h"
#include "devices.h"
#include "gpumem.h"

static const gmd__device_id ids[2] = {
        { "GPU-aaaa1111-0000-4000-8000-000000000000", "0000:19:00.0" },
        { "GPU-bbbb2222-0000-4000-8000-000000000001", "0000:3b:00.0" },
};

/* The list as "1,0" for compact assertions. */
static const char *visible(const char *env)
{
        static char text[64];
        unsigned list[8], n = gmd__visible_devices(env, ids, 2, list, 8);
        size_t used = 0;

        text[0] = '\0';
        for (unsigned i = 0; i < n; i++)
                used += (size_t)snprintf(text + used, sizeof(text) - used,
                                         "%s%u", i ? "," : "", list[i]);
        return text;
}

static void test_rule(void **ctx)
{
        (void)ctx;
        assert_string_equal(visible(NULL), "0,1");
        assert_string_equal(visible("1"), "1");
        assert_string_equal(visible("1,0"), "1,0");
        assert_string_equal(visible(" 1 , 0 "), "1,0");
        assert_string_equal(visible(ids[1].uuid), "1");
        assert_string_equal(visible("GPU-bbbb"), "1");
        assert_string_equal(visible("gpu-BBBB2222,GPU-aaaa"), "1,0");
        /* An invalid entry ends the list; what came before stays. */
        assert_string_equal(visible("0,7,1"), "0");
        assert_string_equal(visible("1,x,0"), "1");
        assert_string_equal(visible("GPU-,1"), "");     /* names both */
        assert_string_equal(visible("GPU-cccc"), "");   /* names none */
        assert_string_equal(visible("1,1,0"), "1");     /* listed twice */
        assert_string_equal(visible("-1"), "");
        assert_string_equal(visible("2"), "");
        assert_string_equal(visible(""), "");
}

/* A client as the hello of a daemon with `ids` leaves it. */
static gmd_client *fake_client(const char *backend, gmd__device_id *copy)
{
        gmd_client *c = calloc(1, sizeof(*c));

        assert_non_null(c);
        memcpy(copy, ids, sizeof(ids));
        c->backend = (char *)backend;
        c->daemon_version = (char *)"0.1.0";
        c->n_devices = 2;
        c->ids = copy;
        return c;
}

static void test_from_cuda_sim(void **ctx)
{
        gmd__device_id copy[2];
        gmd_client *c = fake_client("sim", copy);
        char buf[GMD_UUID_SIZE];
        unsigned d = 9;

        (void)ctx;
        unsetenv("CUDA_VISIBLE_DEVICES");
        assert_int_equal(gmd_device_from_cuda(c, 1, &d), 0);
        assert_int_equal(d, 1);
        setenv("CUDA_VISIBLE_DEVICES", "1", 1);
        assert_int_equal(gmd_device_from_cuda(c, 0, &d), 0);
        assert_int_equal(d, 1);
        d = 9;
        assert_int_equal(gmd_device_from_cuda(c, 1, &d), -ENODEV);
        assert_int_equal(d, 9);                 /* untouched on failure */
        assert_non_null(strstr(gmd_last_error(), "no CUDA device 1"));
        assert_non_null(strstr(gmd_last_error(), "CUDA_VISIBLE_DEVICES=1"));
        setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,GPU-aaaa", 1);
        assert_int_equal(gmd_device_from_cuda(c, 1, &d), 0);
        assert_int_equal(d, 0);
        /* A device the daemon does not have. */
        setenv("CUDA_VISIBLE_DEVICES", "5", 1);
        assert_int_equal(gmd_device_from_cuda(c, 0, &d), -ENODEV);
        assert_int_equal(gmd_device_from_cuda(c, -1, &d), -EINVAL);
        unsetenv("CUDA_VISIBLE_DEVICES");

        assert_int_equal(gmd_device_uuid(c, 1, buf, sizeof(buf)), 0);
        assert_string_equal(buf, ids[1].uuid);
        assert_int_equal(gmd_device_pci_bus_id(c, 0, buf, sizeof(buf)), 0);
        assert_string_equal(buf, "0000:19:00.0");
        assert_int_equal(gmd_device_uuid(c, 2, buf, sizeof(buf)), -EINVAL);
        assert_int_equal(gmd_device_uuid(c, 0, buf, 8), -ERANGE);

        /* An older daemon says no UUIDs: no guessing. */
        copy[0].uuid[0] = '\0';
        assert_int_equal(gmd_device_from_cuda(c, 0, &d), GMD_ENOTSUP);
        assert_non_null(strstr(gmd_last_error(), "UUIDs"));
        assert_int_equal(gmd_device_uuid(c, 0, buf, sizeof(buf)), GMD_ENOTSUP);
        free(c);
}

/* On cuda the process's driver names the GPU. Here there is either no
 * driver, or a GPU whose UUID is none of the made-up ones: both -ENODEV,
 * each with its sentence. */
static void test_from_cuda_gpu(void **ctx)
{
        gmd__device_id copy[2];
        gmd_client *c = fake_client("cuda", copy);
        unsigned d = 9;

        (void)ctx;
        assert_int_equal(gmd_device_from_cuda(c, 0, &d), -ENODEV);
        assert_int_equal(d, 9);
        assert_true(strstr(gmd_last_error(), "CUDA") != NULL);
        free(c);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rule),
                cmocka_unit_test(test_from_cuda_sim),
                cmocka_unit_test(test_from_cuda_gpu),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}

/* hello.c: connect to gpu-memd, allocate 64 MiB, use it, free it. */
#include <gpumem.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *call, int err)
{
        /* The code's name, then the library's sentence (often the daemon's). */
        fprintf(stderr, "hello: %s: %s: %s\n", call, gmd_strerror(err), gmd_last_error());
        return 1;
}

int main(void)
{
        gmd_client *c;
        gmd_buffer *b;
        int r;

        r = gmd_connect(NULL, "hello", &c);     /* $GPU_MEMD_SOCKET, else the default */
        if (r < 0)
                return fail("gmd_connect", r);
        r = gmd_alloc(c, 64 << 20, 0, GMD_ALLOC_SWAPPABLE, 5000, &b);  /* wait up to 5 s */
        if (r < 0) {
                fail("gmd_alloc", r);
                gmd_disconnect(c);
                return 1;
        }
        char *p = gmd_buffer_ptr(b);            /* stable for the buffer's life */
        if (strcmp(gmd_client_backend(c), "sim") == 0)
                strcpy(p, "hello from gpu-memd");   /* host memory: touch it here */
        /* on the cuda backend p is device memory: pass it to kernels, cudaMemcpy */
        printf("%zu bytes at %p in %s (%s backend)\n", gmd_buffer_size(b), (void *)p,
               gmd_tier_name(gmd_buffer_tier(b)), gmd_client_backend(c));
        r = gmd_free(c, b);
        if (r < 0)
                fail("gmd_free", r);
        gmd_disconnect(c);
        return r < 0;
}

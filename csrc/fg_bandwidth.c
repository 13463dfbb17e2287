/* The concurrent memory-read bandwidth probe: what "% of bandwidth" figures divide by.
 *
 * nth threads of one team each read a buffer of their own at the same time. Each buffer is allocated and first
 * touched by the thread that later reads it (on a NUMA host its pages lie on that thread's node, as the forward
 * pass's do), and every pass is one fg_parallel call that the caller times as one window: bytes of all threads
 * over the time of the slowest. (Summing per-thread best passes that did not overlap reported 60 GB/s on a VM
 * whose two threads read 30-34 GB/s together.) The read loop is the GEMV kernels' pattern: 4 sequential streams,
 * a software prefetch one line per stream 1 KB ahead, summed as 64-bit words. */
#include <stdint.h>
#include <stdlib.h>

#include "fg_bandwidth.h"
#include "fg_kernels.h"
#include "fg_threads.h"

struct fg_bw {
    fg_pool *pool;
    int nth;
    int64_t words;      /* per thread, a multiple of 32 */
    uint64_t **buf;     /* (nth,) buffers of words each */
    uint64_t *sum;      /* (nth * 8,) each thread's sum, a cache line apart */
    int failed;         /* a thread could not allocate its buffer */
};

static void touch(int ith, int nth, void *arg) {
    fg_bw *b = arg;
    (void)nth;
    uint64_t *p = malloc((size_t)b->words * sizeof(uint64_t));
    if (!p) {
        b->failed = 1; /* (a benign race: every writer writes 1) */
        return;
    }
    for (int64_t i = 0; i < b->words; i++) p[i] = 1;
    b->buf[ith] = p;
}

static void read_pass(int ith, int nth, void *arg) {
    fg_bw *b = arg;
    (void)nth;
    const int64_t q = b->words / 4;
    const uint64_t *p0 = b->buf[ith], *p1 = p0 + q, *p2 = p1 + q, *p3 = p2 + q;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < q; i += 8) { /* one 64-byte line of each stream per step */
        fg_prefetch_line(p0 + i + 128);
        fg_prefetch_line(p1 + i + 128);
        fg_prefetch_line(p2 + i + 128);
        fg_prefetch_line(p3 + i + 128);
        for (int64_t j = i; j < i + 8; j++) {
            s0 += p0[j];
            s1 += p1[j];
            s2 += p2[j];
            s3 += p3[j];
        }
    }
    b->sum[8 * ith] = s0 + s1 + s2 + s3;
}

fg_bw *fg_bw_new(int nth, int64_t bytes_per_thread) {
    if (nth < 1 || bytes_per_thread < 1024) return NULL;
    fg_bw *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->nth = nth;
    b->words = bytes_per_thread / 8 / 32 * 32;
    b->buf = calloc((size_t)nth, sizeof(uint64_t *));
    b->sum = calloc((size_t)nth * 8, sizeof(uint64_t));
    b->pool = nth > 1 ? fg_pool_new() : NULL;
    if (!b->buf || !b->sum || (nth > 1 && !b->pool) || fg_parallel(b->pool, nth, touch, b) != nth || b->failed) {
        fg_bw_free(b);
        return NULL;
    }
    return b;
}

int fg_bw_read(fg_bw *b) { return fg_bw_read_n(b, b->nth); }

int fg_bw_read_n(fg_bw *b, int nth) {
    if (nth < 1 || nth > b->nth) return -1;
    for (int t = 0; t < nth; t++) b->sum[8 * t] = 0;
    if (fg_parallel(b->pool, nth, read_pass, b) != nth) return -1;
    for (int t = 0; t < nth; t++)
        if (b->sum[8 * t] != (uint64_t)b->words) return -1; /* a miscounted pass (or a skipped thread) */
    return 0;
}

int64_t fg_bw_bytes(const fg_bw *b) { return (int64_t)b->nth * b->words * 8; }

void fg_bw_free(fg_bw *b) {
    if (!b) return;
    fg_pool_free(b->pool);
    if (b->buf)
        for (int t = 0; t < b->nth; t++) free(b->buf[t]);
    free(b->buf);
    free(b->sum);
    free(b);
}

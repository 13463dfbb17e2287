/* The concurrent memory-read bandwidth probe (fg_bandwidth.c). */
#ifndef FG_BANDWIDTH_H
#define FG_BANDWIDTH_H

#include <stdint.h>

typedef struct fg_bw fg_bw;

/* nth threads (a team of their own), each with a buffer of bytes_per_thread (>= 1 KB) it allocated and first
 * touched; NULL when memory or threads are short (fewer threads than nth would measure something else). */
fg_bw *fg_bw_new(int nth, int64_t bytes_per_thread);
/* One pass: every thread reads its whole buffer at once; returns when the slowest is done (the caller times the
 * call). 0, or -1 when a thread's sum was wrong. */
int fg_bw_read(fg_bw *b);
/* The same with the team's first nth threads only (1 <= nth <= the team's; each reads its own buffer): one such
 * pass reads nth / the team's threads of fg_bw_bytes. One set of buffers measures every thread count (the
 * decode-thread probe, fastgguf/_threads.py). */
int fg_bw_read_n(fg_bw *b, int nth);
/* Bytes one pass reads, all threads together. */
int64_t fg_bw_bytes(const fg_bw *b);
void fg_bw_free(fg_bw *b); /* NULL is fine */

#endif

/* The team (csrc/fg_threads.c) on its own: every thread of a call sees the same nth and a distinct ith, the
 * barrier holds everyone until all arrived (each thread checks the others' writes after it), calls of varying
 * size reuse one pool (one thread, then more, then fewer), two pools run at once from two threads, freeing
 * joins the workers, and the dynamic chunks (fg_chunk_claim) of phases between barriers go out exactly once each. Built with -fsanitize=thread by .ci/kernels.sh, where a missing happens-before shows. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fg_threads.h"

#define MAX_NTH 8
#define ROUNDS 50

static int failed, passed;
#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            passed++;                                                 \
        } else {                                                      \
            failed++;                                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);               \
            printf(__VA_ARGS__);                                      \
            printf("\n");                                             \
        }                                                             \
    } while (0)

typedef struct {
    fg_pool *pool;
    int rounds;
    int slot[MAX_NTH];     /* slot[ith]: what thread ith wrote this round */
    int seen[MAX_NTH];     /* each thread: the nth it was given */
    int errors[MAX_NTH];   /* each thread: rounds where another thread's slot was not written yet */
} call;

static void task(int ith, int nth, void *arg) {
    call *c = arg;
    c->seen[ith] = nth;
    for (int r = 0; r < c->rounds; r++) {
        c->slot[ith] = r * MAX_NTH + ith;
        fg_barrier(c->pool);
        for (int j = 0; j < nth; j++) /* all wrote round r before anyone passed the barrier */
            if (c->slot[j] != r * MAX_NTH + j) c->errors[ith]++;
        fg_barrier(c->pool); /* nobody writes round r + 1 before all read round r */
    }
}

/* Dynamic chunks: phases of n chunks (n from `sizes`, several of them empty or smaller than the team) between
 * barriers, each thread taking chunk ith, then claiming (as fg_forward.c's next_chunk); thread 1 dawdles on its
 * chunks so that the others steal. After each phase's barrier every thread checks that each chunk ran once. */
#define PHASES 40
#define MAX_CHUNKS 64
typedef struct {
    fg_pool *pool;
    int hits[PHASES][MAX_CHUNKS]; /* how often chunk k of a phase ran (atomic adds) */
    int errors[MAX_NTH];
} chunk_call;

static int phase_chunks(int ph) {
    static const int n[] = {0, 1, 2, 3, 7, 37, 64, 5};
    return n[ph % 8];
}

static void chunk_task(int ith, int nth, void *arg) {
    chunk_call *c = arg;
    for (int ph = 0; ph < PHASES; ph++) {
        int n = phase_chunks(ph);
        for (int k = ith < n ? ith : nth + fg_chunk_claim(c->pool); k < n; k = nth + fg_chunk_claim(c->pool)) {
            if (ith == 1)
                for (volatile int spin = 0; spin < 2000; spin++) {
                }
            __atomic_add_fetch(&c->hits[ph][k], 1, __ATOMIC_RELAXED);
        }
        fg_barrier(c->pool);
        for (int k = 0; k < MAX_CHUNKS; k++)
            if (__atomic_load_n(&c->hits[ph][k], __ATOMIC_RELAXED) != (k < n)) c->errors[ith]++;
    }
}

static int run_chunks(fg_pool *pool, int nth) {
    static chunk_call c;
    memset(&c, 0, sizeof(c));
    c.pool = pool;
    int ran = fg_parallel(pool, nth, chunk_task, &c), bad = ran != nth;
    for (int i = 0; i < ran; i++) bad += c.errors[i];
    return bad;
}

/* One call of nth threads on pool; returns the number of failed checks. */
static int run_call(fg_pool *pool, int nth) {
    call c;
    memset(&c, 0, sizeof(c));
    c.pool = pool;
    c.rounds = ROUNDS;
    int ran = fg_parallel(pool, nth, task, &c);
    int bad = 0;
    if (ran != nth) bad++;
    for (int i = 0; i < ran; i++) bad += c.errors[i] + (c.seen[i] != ran);
    return bad;
}

static void *pool_user(void *arg) {
    int *bad = arg;
    fg_pool *pool = fg_pool_new();
    static const int sizes[] = {3, 1, 4, 2, 4};
    for (int k = 0; k < 5; k++) *bad += run_call(pool, sizes[k]);
    fg_pool_free(pool);
    return NULL;
}

int main(void) {
    printf("thread api: %s, compiler: %s, cpus: %d\n", fg_thread_api(), fg_compiler(), fg_cpu_count());
    CHECK(fg_cpu_count() >= 1, "fg_cpu_count %d", fg_cpu_count());

    fg_pool *pool = fg_pool_new();
    CHECK(pool != NULL, "fg_pool_new");
    /* one thread first (the pool has no workers yet), then more, fewer, and one again: the barrier follows nth */
    static const int sizes[] = {1, 2, 4, 1, 3, 8, 2, 1, 5};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        CHECK(run_call(pool, sizes[k]) == 0, "call of %d threads", sizes[k]);
    for (int k = 0; k < 300; k++) { /* many short calls: a worker must never miss or repeat one */
        call c;
        memset(&c, 0, sizeof(c));
        c.pool = pool;
        c.rounds = 1;
        int ran = fg_parallel(pool, 2 + k % 3, task, &c);
        if (ran != 2 + k % 3 || c.errors[0] || c.errors[1]) {
            CHECK(0, "short call %d ran %d threads, errors %d %d", k, ran, c.errors[0], c.errors[1]);
            break;
        }
    }
    for (int nth = 2; nth <= 5; nth++) CHECK(run_chunks(pool, nth) == 0, "dynamic chunks on %d threads", nth);
    fg_pool_free(pool);
    fg_pool_free(fg_pool_new()); /* a pool never used: nothing to join */
    fg_pool_free(NULL);

    /* NULL pool (allocation failed, or a build without threads): the caller alone */
    CHECK(run_call(NULL, 1) == 0, "NULL pool, 1 thread");
    call c;
    memset(&c, 0, sizeof(c));
    c.rounds = 1;
    CHECK(fg_parallel(NULL, 4, task, &c) == 1 && c.seen[0] == 1, "NULL pool runs 1 thread");

    /* two pools at once from two threads (two Contexts in two Python threads) */
    int bad[2] = {0, 0};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, pool_user, &bad[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(bad[0] == 0 && bad[1] == 0, "concurrent pools: %d, %d failures", bad[0], bad[1]);

    printf("threads: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}

/* The team (see fg_threads.h): persistent workers, a per-worker "go" word, and the team's barrier.
 *
 * A call: the caller writes the task (fn, arg, nth) into the pool, bumps the go word of workers 1..nth-1 (each on
 * its own cache line, so a call wakes exactly the workers it needs), runs its own share, and all nth meet at the
 * barrier at the end. A worker cannot see two calls in one wake: the next call starts only after that barrier.
 *
 * Waiting (go words and the barrier alike) spins SPINS_BEFORE_SLEEP times, then sleeps: on a busy machine a
 * waiting thread must hand its core to the thread it waits for (a spinning barrier made 2-thread decode 10-15x
 * slower when the 2 cores were shared with other processes; OpenMP's barrier spins ~300k times). Sleeping is a
 * futex on Linux, WaitOnAddress on Windows (MSVC, clang-cl) and a mutex + condition variable elsewhere (macOS,
 * BSDs, mingw); a sleepers count lets the waker skip the system call when nobody sleeps. */
#if !defined(_WIN32) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE 1 /* POSIX and BSD declarations (syscall, sigfillset, pthread_sigmask) under -std=c11 too */
#endif
#include "fg_threads.h"

#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

const char *fg_compiler(void) {
#if defined(__clang__) && defined(_MSC_VER)
    return "clang-cl " __clang_version__;
#elif defined(__clang__)
    return "clang " __clang_version__; /* Apple clang and zig cc say so in the version string */
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
    return "msvc " STR(_MSC_VER);
#else
    return "unknown";
#endif
}

#ifdef FG_NO_THREADS /* ---------------------------------------------------------------------- one thread */

fg_pool *fg_pool_new(void) { return NULL; }
void fg_pool_free(fg_pool *p) { (void)p; }
int fg_parallel(fg_pool *p, int nth, fg_task fn, void *arg) {
    (void)p;
    (void)nth;
    fn(0, 1, arg);
    return 1;
}
void fg_barrier(fg_pool *p) { (void)p; }
int fg_chunk_claim(fg_pool *p) {
    (void)p;
    return 1 << 30;
}
int fg_cpu_count(void) { return 1; }
const char *fg_thread_api(void) { return "none"; }

#else /* ------------------------------------------------------------------------------------------- threads */

#ifdef _WIN32
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0602 /* Windows 8: WaitOnAddress (CPython 3.9+ needs 8.1 anyway) */
#endif
#define WIN32_LEAN_AND_MEAN
#include <stdint.h>
#include <windows.h>
#include <process.h>
#ifdef _MSC_VER
/* WaitOnAddress (Windows 8+) lives in synchronization.lib; other Windows toolchains (mingw, zig) name its import
 * library differently, so they sleep on a condition variable (kernel32) instead */
#pragma comment(lib, "synchronization.lib")
#define FG_WAIT_ADDRESS 1
#else
typedef SRWLOCK mutex_t;
typedef CONDITION_VARIABLE cond_t;
static int mutex_init(mutex_t *m) { InitializeSRWLock(m); return 0; }
static void mutex_destroy(mutex_t *m) { (void)m; }
static void mutex_lock(mutex_t *m) { AcquireSRWLockExclusive(m); }
static void mutex_unlock(mutex_t *m) { ReleaseSRWLockExclusive(m); }
static int cond_init(cond_t *c) { InitializeConditionVariable(c); return 0; }
static void cond_destroy(cond_t *c) { (void)c; }
static void cond_wait(cond_t *c, mutex_t *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
static void cond_broadcast(cond_t *c) { WakeAllConditionVariable(c); }
#endif
#else
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#define FG_WAIT_ADDRESS 1
#else
typedef pthread_mutex_t mutex_t;
typedef pthread_cond_t cond_t;
static int mutex_init(mutex_t *m) { return pthread_mutex_init(m, NULL); }
static void mutex_destroy(mutex_t *m) { pthread_mutex_destroy(m); }
static void mutex_lock(mutex_t *m) { pthread_mutex_lock(m); }
static void mutex_unlock(mutex_t *m) { pthread_mutex_unlock(m); }
static int cond_init(cond_t *c) { return pthread_cond_init(c, NULL); }
static void cond_destroy(cond_t *c) { pthread_cond_destroy(c); }
static void cond_wait(cond_t *c, mutex_t *m) { pthread_cond_wait(c, m); }
static void cond_broadcast(cond_t *c) { pthread_cond_broadcast(c); }
#endif
#endif

/* ---- atomics: GCC/clang builtins (clang-cl has them too); Interlocked* for plain MSVC ---- */
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
/* Interlocked* are full barriers: stronger than each use below needs, never weaker. */
static int at_load(int *p) { return (int)_InterlockedCompareExchange((volatile long *)p, 0, 0); }
static void at_store(int *p, int v) { _InterlockedExchange((volatile long *)p, v); }
static int at_add(int *p, int v) { return (int)_InterlockedExchangeAdd((volatile long *)p, v) + v; }
#else
static int at_load(int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void at_store(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static int at_add(int *p, int v) { return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST); }
#endif

#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif (defined(__aarch64__) || defined(__arm__)) && (defined(__GNUC__) || defined(__clang__))
#define CPU_RELAX() __asm__ __volatile__("yield")
#elif defined(_M_ARM64)
#define CPU_RELAX() __yield()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPINS_BEFORE_SLEEP 4000
#define LINE_INTS 16 /* ints per 64-byte cache line: words two threads hammer sit a line apart */

#ifdef _WIN32
typedef HANDLE thread_t;
#else
typedef pthread_t thread_t;
#endif

typedef struct {
    int go[LINE_INTS];  /* {generation, sleepers}: the caller bumps generation to hand this worker a call */
    fg_pool *pool;
    int ith;
    thread_t thread;
} worker;

struct fg_pool {
    /* the barrier: arrivals on a line of their own, so that arriving threads do not disturb the ones spinning on
     * the generation word (every thread reads it until the last arrives) */
    int arrived[LINE_INTS];
    int gen[LINE_INTS];  /* {generation, sleepers} */
    int chunk[LINE_INTS]; /* the dynamic chunks claimed since the last barrier (fg_chunk_claim) */
    int joined[LINE_INTS]; /* threads that ran the current call's fn */
    fg_task fn;          /* the current call: written before the go words are bumped */
    void *arg;
    int nth;
    int stop;            /* set (then go bumped) to make workers return */
    int n_workers, cap;
    worker **workers;    /* (cap,) each its own allocation, so a worker's go line is its own */
#ifndef _WIN32
    pid_t pid;           /* the process that created the workers: a forked child has none of them */
#endif
#ifndef FG_WAIT_ADDRESS
    mutex_t mu;          /* the sleeping place of every wait of this pool */
    cond_t cv;
#endif
};

/* Sleep while *word == val (sleepers counted in *sleepers so that wake() knows whether to call the OS). */
static void sleep_on(fg_pool *p, int *word, int val, int *sleepers) {
    at_add(sleepers, 1);
#if defined(FG_WAIT_ADDRESS) && defined(_WIN32)
    (void)p;
    if (at_load(word) == val) WaitOnAddress(word, &val, sizeof(int), INFINITE);
#elif defined(FG_WAIT_ADDRESS)
    (void)p;
    if (at_load(word) == val) syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    mutex_lock(&p->mu);
    while (at_load(word) == val) cond_wait(&p->cv, &p->mu);
    mutex_unlock(&p->mu);
#endif
    at_add(sleepers, -1);
}

/* After changing *word: wake whoever sleeps on it. */
static void wake(fg_pool *p, int *word, int *sleepers) {
    if (at_load(sleepers) == 0) return;
#if defined(FG_WAIT_ADDRESS) && defined(_WIN32)
    (void)p;
    WakeByAddressAll(word);
#elif defined(FG_WAIT_ADDRESS)
    (void)p;
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
    mutex_lock(&p->mu); /* a waiter checks *word under the mutex: it cannot miss this broadcast */
    cond_broadcast(&p->cv);
    mutex_unlock(&p->mu);
#endif
}

/* Return once *word != val: spin a little, then sleep. */
static void wait_change(fg_pool *p, int *word, int val, int *sleepers) {
    for (int spins = 0; at_load(word) == val;) {
        if (spins < SPINS_BEFORE_SLEEP) {
            spins++;
            CPU_RELAX();
        } else {
            sleep_on(p, word, val, sleepers);
        }
    }
}

void fg_barrier(fg_pool *p) {
    if (!p) return;
    int nth = p->nth; /* read before arriving: once all have arrived the caller may start the next call */
    if (nth <= 1) return;
    int gen = at_load(&p->gen[0]);
    if (at_add(&p->arrived[0], 1) == nth) { /* the last to arrive opens the next generation */
        at_store(&p->arrived[0], 0);
        at_store(&p->chunk[0], 0); /* every thread has left the previous phase's chunks */
        at_store(&p->gen[0], gen + 1);
        wake(p, &p->gen[0], &p->gen[1]);
        return;
    }
    wait_change(p, &p->gen[0], gen, &p->gen[1]);
}

int fg_chunk_claim(fg_pool *p) { return p ? at_add(&p->chunk[0], 1) - 1 : 1 << 30; }

static void run_share(fg_pool *p, int ith) {
    p->fn(ith, p->nth, p->arg);
    at_add(&p->joined[0], 1);
    fg_barrier(p); /* the call's end: the caller returns after it */
}

static void worker_loop(worker *w) {
    fg_pool *p = w->pool;
    for (int seen = 0;;) {
        wait_change(p, &w->go[0], seen, &w->go[1]);
        seen = at_load(&w->go[0]);
        if (at_load(&p->stop)) return;
        run_share(p, w->ith);
    }
}

#ifdef _WIN32
static unsigned __stdcall worker_main(void *arg) {
    worker_loop(arg);
    return 0;
}
static int thread_start(worker *w) {
    uintptr_t h = _beginthreadex(NULL, 0, worker_main, w, 0, NULL);
    if (!h) return -1;
    w->thread = (HANDLE)h;
    return 0;
}
static void thread_join(worker *w) {
    WaitForSingleObject(w->thread, INFINITE);
    CloseHandle(w->thread);
}
#else
static void *worker_main(void *arg) {
    worker_loop(arg);
    return NULL;
}
static int thread_start(worker *w) {
    /* Workers block every signal: the process's handlers (Python's) run on the threads that expect them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? 0 : -1;
}
static void thread_join(worker *w) { pthread_join(w->thread, NULL); }
#endif

fg_pool *fg_pool_new(void) {
    fg_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
#ifndef _WIN32
    p->pid = getpid();
#endif
#ifndef FG_WAIT_ADDRESS
    if (mutex_init(&p->mu) != 0) {
        free(p);
        return NULL;
    }
    if (cond_init(&p->cv) != 0) {
        mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
#endif
    return p;
}

/* Free the worker records without joining (their threads are gone, or were never ours). */
static void forget_workers(fg_pool *p) {
    for (int i = 0; i < p->n_workers; i++) free(p->workers[i]);
    free(p->workers);
    p->workers = NULL;
    p->n_workers = p->cap = 0;
}

/* Grow to n workers as far as memory and the OS allow; returns the workers there are. */
static int grow(fg_pool *p, int n) {
    if (n > p->cap) {
        worker **ws = realloc(p->workers, (size_t)n * sizeof(*ws));
        if (!ws) return p->n_workers;
        p->workers = ws;
        p->cap = n;
    }
    while (p->n_workers < n) {
        worker *w = calloc(1, sizeof(*w));
        if (!w) break;
        w->pool = p;
        w->ith = p->n_workers + 1;
        if (thread_start(w) != 0) {
            free(w);
            break;
        }
        p->workers[p->n_workers++] = w;
    }
    return p->n_workers;
}

int fg_parallel(fg_pool *p, int nth, fg_task fn, void *arg) {
    if (!p || nth < 2) {
        if (p) p->nth = 1; /* fg_barrier reads the call's nth */
        fn(0, 1, arg);
        return 1;
    }
#ifndef _WIN32
    if (p->pid != getpid()) { /* a forked child: the workers stayed in the parent; start afresh */
        forget_workers(p);
        p->pid = getpid();
        memset(p->arrived, 0, sizeof(p->arrived));
        memset(p->gen, 0, sizeof(p->gen));
        memset(p->chunk, 0, sizeof(p->chunk));
#ifndef FG_WAIT_ADDRESS
        mutex_init(&p->mu); /* the parent may have held it at the fork */
        cond_init(&p->cv);
#endif
    }
#endif
    int have = grow(p, nth - 1);
    if (nth > have + 1) nth = have + 1;
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    at_store(&p->joined[0], 0);
    at_store(&p->chunk[0], 0); /* (the last call's closing barrier did too) */
    for (int i = 0; i < nth - 1; i++) {
        worker *w = p->workers[i];
        at_add(&w->go[0], 1); /* after the task's fields: a worker reading the new generation sees them */
        wake(p, &w->go[0], &w->go[1]);
    }
    run_share(p, 0);
    return at_load(&p->joined[0]);
}

void fg_pool_free(fg_pool *p) {
    if (!p) return;
#ifndef _WIN32
    int ours = p->pid == getpid(); /* in a forked child the workers are not ours to join */
#else
    int ours = 1;
#endif
    if (ours) {
        at_store(&p->stop, 1);
        for (int i = 0; i < p->n_workers; i++) {
            at_add(&p->workers[i]->go[0], 1);
            wake(p, &p->workers[i]->go[0], &p->workers[i]->go[1]);
        }
        for (int i = 0; i < p->n_workers; i++) thread_join(p->workers[i]);
    }
    forget_workers(p);
#ifndef FG_WAIT_ADDRESS
    cond_destroy(&p->cv);
    mutex_destroy(&p->mu);
#endif
    free(p);
}

int fg_cpu_count(void) {
#ifdef _WIN32
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n > 0 ? (int)n : 1;
#else
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#endif
}

const char *fg_thread_api(void) {
#ifdef _WIN32
    return "win32";
#else
    return "pthreads";
#endif
}

#endif

/* The team: fastgguf's own thread pool (no OpenMP, so a wheel carries no runtime library) and its barrier.
 *
 * A pool holds persistent worker threads (pthreads on POSIX, Win32 threads on Windows), created on first use and
 * reused by every later call; fg_pool_free joins them. fg_parallel(p, nth, fn, arg) runs fn(ith, nth, arg) on the
 * caller (ith 0) and nth - 1 workers and returns when all returned; inside fn, fg_barrier(p) waits for the whole
 * team. A waiting thread spins a little, then sleeps (futex on Linux, WaitOnAddress on Windows, a condition
 * variable elsewhere): idle workers between calls sleep too.
 *
 * One call at a time per pool: each owner of concurrent work (fg_work, one per Context or batch workspace) has its
 * own pool, so two Contexts in two Python threads never share a team. -DFG_NO_THREADS builds without threads:
 * fg_pool_new returns NULL and fg_parallel runs fn on the caller alone. */
#ifndef FG_THREADS_H
#define FG_THREADS_H

typedef struct fg_pool fg_pool;
typedef void (*fg_task)(int ith, int nth, void *arg);

/* An empty pool (no threads until the first fg_parallel that needs them); NULL on allocation failure or in a
 * build without threads (callers then run one thread: fg_parallel takes NULL). */
fg_pool *fg_pool_new(void);
/* Stop, join and free the workers (NULL is fine). Not while a call runs on the pool. */
void fg_pool_free(fg_pool *p);
/* Run fn on up to nth threads (nth < 1 counts as 1) and return how many ran it: fewer than nth when p is NULL or a
 * worker thread could not be created (the pool then works with the ones it has). Every thread sees the same,
 * true nth. One call at a time per pool. */
int fg_parallel(fg_pool *p, int nth, fg_task fn, void *arg);
/* Inside fn: return once all nth threads of the call have arrived (the team's barrier). */
void fg_barrier(fg_pool *p);
/* Inside fn: claim the next dynamic chunk of the current phase (the work between two barriers of the team): 0, 1,
 * 2, ... in the order the team's threads ask, counted from 0 again after every barrier and at the call's start
 * (llama.cpp's work-stealing counter, PR #6915). So at most ONE phase of dynamic chunks between two barriers; a
 * thread leaves it only once a claim is past the phase's last chunk. A large number when p is NULL. */
int fg_chunk_claim(fg_pool *p);

/* Logical CPUs online, at least 1. */
int fg_cpu_count(void);
/* "pthreads", "win32" or "none": what this build's pool runs on. */
const char *fg_thread_api(void);
/* The C compiler and its version as the preprocessor tells it, e.g. "gcc 12.2.0", "clang 19.1.0", "msvc 1940". */
const char *fg_compiler(void);

#endif

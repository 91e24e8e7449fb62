/* Splitting a call's work between threads, shared by clovercode's native kernels (included, not linked:
 * engine/nativebuild.py builds each kernel from one source file and hashes the headers beside it).
 *
 * The worker threads are started once and kept, asleep between calls: starting a thread per call cost
 * 70-120 us on the 2-core development VM (the AMX kernel's threads also pay for their tile state on first
 * use), about a millisecond of a Clover-width block pass over its ~10 native calls. One call at a time runs
 * the pool (others wait); a forked child starts its own workers (fork copies no threads).
 *
 * Where the caller hands over the OpenMP runtime torch runs on (clover_share_openmp), the jobs run on
 * torch's own OpenMP threads instead: between torch's operations those threads spin for a while before they
 * sleep, and a worker of our own started beside them shared a core with a spinning thread (in an int8
 * block pass of Clover's widths, letting them sleep at once made the native kernels' part ~9 ms faster).
 * Not in a forked child (OpenMP's threads are not copied either): there the pool above. */
#ifndef CLOVER_FANOUT_H
#define CLOVER_FANOUT_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#define FANOUT_MAX 64

/* The threads a call uses: at least 1, at most FANOUT_MAX, and no more than it has items of work. */
static inline int fanout_threads(int threads, int64_t items) {
  if (threads < 1) threads = 1;
  if (threads > FANOUT_MAX) threads = FANOUT_MAX;
  if (items < threads) threads = items > 0 ? (int)items : 1;
  return threads;
}

static struct {
  pthread_mutex_t call, lock;
  pthread_cond_t wake, idle;
  int workers, forks_handled;
  void *(*run)(void *);
  char *jobs;
  size_t size;
  int count, next, busy;  /* the call's jobs; the next one to take; taken and not yet finished */
} fanout_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                 PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL, 0, 0, 0, 0};

static void fanout_forked(void) {  /* in a forked child: no workers, and nothing held */
  pthread_mutex_init(&fanout_pool.call, NULL);
  pthread_mutex_init(&fanout_pool.lock, NULL);
  pthread_cond_init(&fanout_pool.wake, NULL);
  pthread_cond_init(&fanout_pool.idle, NULL);
  fanout_pool.workers = 0;
  fanout_pool.count = fanout_pool.next = fanout_pool.busy = 0;
}

/* Take jobs until none is left; called with the lock held, returns with it held. */
static void fanout_take(void) {
  while (fanout_pool.next < fanout_pool.count) {
    const int job = fanout_pool.next++;
    void *(*run)(void *) = fanout_pool.run;
    char *at = fanout_pool.jobs + (size_t)job * fanout_pool.size;
    fanout_pool.busy++;
    pthread_mutex_unlock(&fanout_pool.lock);
    run(at);
    pthread_mutex_lock(&fanout_pool.lock);
    if (--fanout_pool.busy == 0 && fanout_pool.next >= fanout_pool.count) pthread_cond_broadcast(&fanout_pool.idle);
  }
}

static void *fanout_worker(void *unused) {
  (void)unused;
  pthread_mutex_lock(&fanout_pool.lock);
  for (;;) {
    while (fanout_pool.next >= fanout_pool.count) pthread_cond_wait(&fanout_pool.wake, &fanout_pool.lock);
    fanout_take();
  }
  return NULL;
}

static struct {
  void (*parallel)(void (*)(void *), void *, unsigned, unsigned);  /* libgomp's GOMP_parallel */
  int (*thread_num)(void), (*num_threads)(void);
  pid_t pid;
} fanout_omp;

/* Run the jobs on the OpenMP runtime at these addresses (GOMP_parallel, omp_get_thread_num,
 * omp_get_num_threads of the runtime torch loaded) in this process; NULLs go back to the pool. */
int clover_share_openmp(void *parallel, void *thread_num, void *num_threads) {
  fanout_omp.parallel = (void (*)(void (*)(void *), void *, unsigned, unsigned))parallel;
  fanout_omp.thread_num = (int (*)(void))thread_num;
  fanout_omp.num_threads = (int (*)(void))num_threads;
  fanout_omp.pid = getpid();
  return parallel && thread_num && num_threads;
}

typedef struct { void *(*run)(void *); char *jobs; size_t size; int count; } fanout_call_t;

static void fanout_team(void *data) {  /* each thread of the OpenMP team: every team-th job from its own */
  const fanout_call_t *call = (const fanout_call_t *)data;
  const int team = fanout_omp.num_threads(), me = fanout_omp.thread_num();
  for (int job = me; job < call->count; job += team) call->run(call->jobs + (size_t)job * call->size);
}

/* run(job) for each of the count jobs (size bytes apart from jobs on): on torch's OpenMP threads where they
 * were handed over, else job 0 on the calling thread and the others on the pool's workers and on the calling
 * thread, whichever is free first; returns when all have run. Where no worker can be started the calling
 * thread runs them all. */
static inline void fanout(void *(*run)(void *), void *jobs, size_t size, int count) {
  if (count > 1 && fanout_omp.parallel && fanout_omp.thread_num && fanout_omp.num_threads && fanout_omp.pid == getpid()) {
    fanout_call_t call = {run, (char *)jobs, size, count};
    fanout_omp.parallel(fanout_team, &call, (unsigned)count, 0);
    return;
  }
  pthread_mutex_lock(&fanout_pool.call);
  if (!fanout_pool.forks_handled) fanout_pool.forks_handled = pthread_atfork(NULL, NULL, fanout_forked) == 0;
  while (fanout_pool.forks_handled && fanout_pool.workers < count - 1) {
    pthread_t id;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr)) break;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&id, &attr, fanout_worker, NULL);
    pthread_attr_destroy(&attr);
    if (failed) break;
    fanout_pool.workers++;
  }
  pthread_mutex_lock(&fanout_pool.lock);
  fanout_pool.run = run;
  fanout_pool.jobs = (char *)jobs;
  fanout_pool.size = size;
  fanout_pool.count = count;
  fanout_pool.next = 1;
  fanout_pool.busy = 0;
  if (count > 1) pthread_cond_broadcast(&fanout_pool.wake);
  pthread_mutex_unlock(&fanout_pool.lock);
  run(jobs);
  pthread_mutex_lock(&fanout_pool.lock);
  fanout_take();
  while (fanout_pool.busy > 0) pthread_cond_wait(&fanout_pool.idle, &fanout_pool.lock);
  fanout_pool.count = fanout_pool.next = 0;
  pthread_mutex_unlock(&fanout_pool.lock);
  pthread_mutex_unlock(&fanout_pool.call);
}
#endif

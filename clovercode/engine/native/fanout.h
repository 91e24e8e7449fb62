/* Splitting a call's work between threads, shared by clovercode's native kernels (included, not linked:
 * engine/nativebuild.py builds each kernel from one source file and hashes the headers beside it). */
#ifndef CLOVER_FANOUT_H
#define CLOVER_FANOUT_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FANOUT_MAX 64

/* The threads a call uses: at least 1, at most FANOUT_MAX, and no more than it has items of work. */
static inline int fanout_threads(int threads, int64_t items) {
  if (threads < 1) threads = 1;
  if (threads > FANOUT_MAX) threads = FANOUT_MAX;
  if (items < threads) threads = items > 0 ? (int)items : 1;
  return threads;
}

/* run(job) for each of the count jobs (size bytes apart from jobs on): job 0 on the calling thread, the
 * others on threads of their own; a job whose thread cannot be started runs on the calling thread too. */
static inline void fanout(void *(*run)(void *), void *jobs, size_t size, int count) {
  pthread_t ids[FANOUT_MAX];
  int started[FANOUT_MAX] = {0};
  for (int t = 1; t < count; t++) started[t] = pthread_create(&ids[t], NULL, run, (char *)jobs + t * size) == 0;
  run(jobs);
  for (int t = 1; t < count; t++) {
    if (started[t]) pthread_join(ids[t], NULL);
    else run((char *)jobs + t * size);
  }
}
#endif

/* int8 MoE experts on the CPU at the memory's speed: out[rows of group g] = x[rows] @ W[hit[g]]^T * scale[hit[g]],
 * W int8 [E, N, K] as stored, x and out bfloat16, a bfloat16 scale per output row (engine/int8nativecpu.py builds
 * and calls it; engine/int8cpu.py chooses it).
 *
 * Why our own: torch's _weight_int8pack_mm, called once per hit expert at 1-2 rows, read the int8 weights at
 * ~11 GB/s on a 2-core Xeon whose copy moves ~31 GB/s: each call is short, splits its few rows over the
 * threads and waits at a barrier, and nothing fetches the next expert's bytes while one is multiplied. Here one
 * call covers every hit expert of a projection: the (expert, 4 output rows) blocks are split once into one
 * contiguous run per thread, each thread reads its run in memory order, one weight row after another (a
 * single stream), prefetching 8 KB ahead into L2 (a prefetch into L1 holds one of the core's ~16 fill buffers
 * until its line arrives, which capped a core at ~8 GB/s), and the int8 values are widened in registers,
 * never written out. With AVX512-VNNI each group's rows are first scaled to 16-bit integers (a row's error
 * at most 2^-16 of its largest value) and the weights widened to 16 bits and multiplied-and-summed in pairs
 * into 32-bit integers (vpdpwssd, exact): a third of the arithmetic of widening to float32 for FMAs, which
 * counts because on a core the arithmetic and the memory stream take turns. Without VNNI, or for a row
 * holding an infinity or a NaN, the float32 path.
 *
 * Built with -march=native on the machine that runs it; without AVX-512 it reports so and the caller keeps
 * torch's kernel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "fanout.h"
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define HAVE_KERNEL 1
#else
#define HAVE_KERNEL 0
#endif

int clover_int8_available(void) { return HAVE_KERNEL; }

#if HAVE_KERNEL
#define ROWS 4   /* activation rows per tile: 4 x 4 accumulators, 4 x 4 partial sums and the widened weights */
#define BLOCK 4  /* output rows (weight rows) per block */
#define DIST 8192  /* bytes prefetched ahead in the stream, into L2 */

static inline float bf16_to_float(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t float_to_bf16(float f) {  /* round to nearest even, as torch does; NaN stays NaN */
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

typedef struct {
  const uint16_t *x; const int8_t *w; const uint16_t *scale; const int64_t *hit; const int64_t *offsets;
  int64_t groups, n, k, max_rows; uint16_t *out; int64_t first, last; int status;
} job_t;

/* the four sums of a, b, c, d (16 lanes each) in one vector's lanes 0..3 */
static inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  /* a0 b0 a1 b1 per 128-bit lane */
  __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));  /* a b c d per lane */
  __m256 half = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

/* rows [r0, r0 + R) of xf (float32, [m, k]) times weight rows [n0, n0 + BLOCK) of w, scaled, into out (row stride
 * n); R a constant in each call, so that the R x BLOCK accumulators stay in registers */
/* rows [r0, r0 + R) of xf (float32, [m, k]) times weight rows [n0, n0 + BLOCK) of w, scaled, into out (row stride
 * n): the block's weight rows one after another (the thread's stream stays in memory order), four
 * accumulators a row (independent FMA chains); R a constant in each call, so that they stay in registers.
 * Bytes before `end` (the expert's last) are prefetched DIST ahead. */
static inline __attribute__((always_inline)) void tile(const int R, const float *xf, int64_t r0, const int8_t *w0,
                                                       const uint16_t *scale, int64_t k, int64_t n, int64_t n0,
                                                       uint16_t *out, const int8_t *end) {
  __m512 tot[ROWS][BLOCK];
  for (int j = 0; j < BLOCK; j++) {
    __m512 acc[ROWS][4];
    for (int r = 0; r < R; r++) for (int u = 0; u < 4; u++) acc[r][u] = _mm512_setzero_ps();
    const int8_t *row = w0 + j * k;
    for (int64_t c = 0; c < k; c += 64) {
      if ((uintptr_t)(row + c) + DIST < (uintptr_t)end) _mm_prefetch((const char *)(row + c + DIST), _MM_HINT_T1);
      for (int u = 0; u < 4; u++) {
        __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + c + 16 * u))));
        for (int r = 0; r < R; r++) acc[r][u] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(xf + (r0 + r) * k + c + 16 * u), acc[r][u]);
      }
    }
    for (int r = 0; r < R; r++) tot[r][j] = _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
  }
  for (int r = 0; r < R; r++) {
    float sums[4];
    _mm_storeu_ps(sums, sum4(tot[r][0], tot[r][1], tot[r][2], tot[r][3]));
    for (int j = 0; j < 4; j++) out[(r0 + r) * n + n0 + j] = float_to_bf16(sums[j] * bf16_to_float(scale[n0 + j]));
  }
}

/* rows [0, m) of xf times weight rows [n0, n0 + BLOCK) of w: tiles of ROWS rows, the last one shorter; only the
 * first tile prefetches (the others read the same weights again, from cache) */
static void block_rows(const float *xf, int64_t m, const int8_t *w, const uint16_t *scale, int64_t k, int64_t n,
                       int64_t n0, uint16_t *out, const int8_t *end) {
  const int8_t *w0 = w + n0 * k;
  for (int64_t r0 = 0; r0 < m; r0 += ROWS) {
    const int8_t *ahead = r0 == 0 ? end : w0;  /* w0: nothing before it, no prefetch */
    switch (m - r0 < ROWS ? m - r0 : ROWS) {
      case 1: tile(1, xf, r0, w0, scale, k, n, n0, out, ahead); break;
      case 2: tile(2, xf, r0, w0, scale, k, n, n0, out, ahead); break;
      case 3: tile(3, xf, r0, w0, scale, k, n, n0, out, ahead); break;
      default: tile(ROWS, xf, r0, w0, scale, k, n, n0, out, ahead); break;
    }
  }
}

#if defined(__AVX512VNNI__)
#define HAVE_VNNI 1
/* |w| <= 128 and |x| <= 32767: a lane sums k / 32 products of at most 2^22, under 2^31 up to k = 16384 */
#define VNNI_MAX_K 16384

/* tile() with the rows as 16-bit integers (xq, each row scaled by xscale to its largest magnitude): the int8
 * weights are widened to 16 bits (one instruction for 32) and multiplied-and-summed in pairs into 32-bit
 * integers (vpdpwssd), exact, instead of being widened to float32 (two instructions for 16) for float FMAs.
 * The arithmetic a weight costs drops ~3x, which matters because on a core the widening and the memory
 * stream take turns. */
static inline __attribute__((always_inline)) void tile16(const int R, const int16_t *xq, const float *xscale,
                                                         int64_t r0, const int8_t *w0, const uint16_t *scale,
                                                         int64_t k, int64_t n, int64_t n0, uint16_t *out,
                                                         const int8_t *end) {
  __m512 tot[ROWS][BLOCK];
  for (int j = 0; j < BLOCK; j++) {
    __m512i acc[ROWS][2];
    for (int r = 0; r < R; r++) { acc[r][0] = _mm512_setzero_si512(); acc[r][1] = _mm512_setzero_si512(); }
    const int8_t *row = w0 + j * k;
    for (int64_t c = 0; c < k; c += 64) {
      if ((uintptr_t)(row + c) + DIST < (uintptr_t)end) _mm_prefetch((const char *)(row + c + DIST), _MM_HINT_T1);
      const __m512i w8 = _mm512_loadu_si512((const void *)(row + c));
      const __m512i lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(w8));
      const __m512i hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(w8, 1));
      for (int r = 0; r < R; r++) {
        const int16_t *x = xq + (r0 + r) * k + c;
        acc[r][0] = _mm512_dpwssd_epi32(acc[r][0], lo, _mm512_loadu_si512((const void *)x));
        acc[r][1] = _mm512_dpwssd_epi32(acc[r][1], hi, _mm512_loadu_si512((const void *)(x + 32)));
      }
    }
    for (int r = 0; r < R; r++) tot[r][j] = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[r][0], acc[r][1]));
  }
  for (int r = 0; r < R; r++) {
    float sums[4];
    _mm_storeu_ps(sums, sum4(tot[r][0], tot[r][1], tot[r][2], tot[r][3]));
    for (int j = 0; j < 4; j++)
      out[(r0 + r) * n + n0 + j] = float_to_bf16(sums[j] * xscale[r0 + r] * bf16_to_float(scale[n0 + j]));
  }
}

static void block_rows16(const int16_t *xq, const float *xscale, int64_t m, const int8_t *w, const uint16_t *scale,
                         int64_t k, int64_t n, int64_t n0, uint16_t *out, const int8_t *end) {
  const int8_t *w0 = w + n0 * k;
  for (int64_t r0 = 0; r0 < m; r0 += ROWS) {
    const int8_t *ahead = r0 == 0 ? end : w0;
    switch (m - r0 < ROWS ? m - r0 : ROWS) {
      case 1: tile16(1, xq, xscale, r0, w0, scale, k, n, n0, out, ahead); break;
      case 2: tile16(2, xq, xscale, r0, w0, scale, k, n, n0, out, ahead); break;
      case 3: tile16(3, xq, xscale, r0, w0, scale, k, n, n0, out, ahead); break;
      default: tile16(ROWS, xq, xscale, r0, w0, scale, k, n, n0, out, ahead); break;
    }
  }
}

/* Rows [0, m) of x (bf16, [m, k]) as 16-bit integers: each row scaled so that its largest magnitude becomes
 * 32767 (rounded to nearest; a row's error at most 2^-16 of its largest value, below the bf16 result's own
 * rounding of 2^-9). 0 if a row holds an infinity or a NaN (the float path keeps those as they are). */
static int quantize_rows(const uint16_t *x, int64_t m, int64_t k, int16_t *xq, float *xscale) {
  for (int64_t r = 0; r < m; r++) {
    const uint16_t *row = x + r * k;
    __m512 big = _mm512_setzero_ps();
    __mmask16 odd = 0;
    for (int64_t i = 0; i < k; i += 16) {
      __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + i))), 16));
      odd |= _mm512_fpclass_ps_mask(v, 0x99);  /* quiet or signalling NaN, +inf, -inf */
      big = _mm512_max_ps(big, _mm512_abs_ps(v));
    }
    if (odd) return 0;
    const float largest = _mm512_reduce_max_ps(big);
    const float inverse = largest > 0.0f ? 32767.0f / largest : 0.0f;
    xscale[r] = largest / 32767.0f;
    const __m512 mul = _mm512_set1_ps(inverse);
    for (int64_t i = 0; i < k; i += 16) {
      __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + i))), 16));
      _mm256_storeu_si256((__m256i *)(xq + r * k + i), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v, mul))));
    }
  }
  return 1;
}
#else
#define HAVE_VNNI 0
#endif

static void *run(void *arg) {
  job_t *job = (job_t *)arg;
  const int64_t k = job->k, n = job->n, blocks = n / BLOCK;
  float *xf = NULL;
#if HAVE_VNNI
  int16_t *xq = NULL;
  float xscale[64];
  const int exact16 = k <= VNNI_MAX_K && job->max_rows <= 64;
#endif
  if (job->last > job->first) {
    xf = (float *)aligned_alloc(64, (size_t)(job->max_rows * k * (int64_t)sizeof(float)));
    if (!xf) { job->status = -3; return NULL; }
#if HAVE_VNNI
    xq = (int16_t *)aligned_alloc(64, (size_t)(job->max_rows * k * (int64_t)sizeof(int16_t)));
    if (!xq) { free(xf); job->status = -3; return NULL; }
#endif
  }
  int64_t item = 0, start = 0;  /* items: the (group, block) pairs of the groups this call multiplies, in order */
  for (int64_t g = 0; g < job->groups && item < job->last; g++) {
    int64_t end = job->offsets[g], m = end - start;
    if (m > 0 && m <= job->max_rows) {
      int64_t lo = job->first > item ? job->first - item : 0;
      int64_t hi = job->last - item < blocks ? job->last - item : blocks;
      if (lo < hi) {
        const int8_t *w = job->w + job->hit[g] * n * k;
        const uint16_t *scale = job->scale + job->hit[g] * n;
        const uint16_t *xs = job->x + start * k;  /* k % 64 == 0: whole vectors of 16 */
#if HAVE_VNNI
        if (exact16 && quantize_rows(xs, m, k, xq, xscale)) {
          for (int64_t b = lo; b < hi; b++)
            block_rows16(xq, xscale, m, w, scale, k, n, b * BLOCK, job->out + start * n, w + n * k);
          item += blocks;
          start = end;
          continue;
        }
#endif
        for (int64_t i = 0; i < m * k; i += 16)
          _mm512_storeu_ps(xf + i, _mm512_castsi512_ps(_mm512_slli_epi32(
              _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(xs + i))), 16)));
        for (int64_t b = lo; b < hi; b++) block_rows(xf, m, w, scale, k, n, b * BLOCK, job->out + start * n, w + n * k);
      }
      item += blocks;
    }
    start = end;
  }
  free(xf);
#if HAVE_VNNI
  free(xq);
#endif
  return NULL;
}
#endif

/* Every group of 1..max_rows rows; groups with more rows are left for the caller (their out rows untouched).
 * x has `rows` rows, w `experts` matrices: an expert index or an offset outside them is refused before
 * anything is read. 0 when done, -1 shapes it does not take (n % 4, k % 64), -2 built without AVX-512,
 * -3 out of memory, -4 an index or offset out of range. */
int clover_int8_grouped_mm(const uint16_t *x, const int8_t *w, const uint16_t *scale, const int64_t *hit,
                           const int64_t *offsets, int64_t groups, int64_t experts, int64_t rows, int64_t n,
                           int64_t k, int64_t max_rows, uint16_t *out, int threads) {
#if HAVE_KERNEL
  if (n % BLOCK || k % 64 || n <= 0 || k <= 0 || max_rows < 1) return -1;
  int64_t items = 0, start = 0;
  for (int64_t g = 0; g < groups; g++) {
    if (hit[g] < 0 || hit[g] >= experts || offsets[g] < 0 || offsets[g] > rows) return -4;
    int64_t m = offsets[g] - start;
    if (m > 0 && m <= max_rows) items += n / BLOCK;
    start = offsets[g];
  }
  threads = fanout_threads(threads, items);
  job_t jobs[FANOUT_MAX];
  for (int t = 0; t < threads; t++) {
    job_t job = {x, w, scale, hit, offsets, groups, n, k, max_rows, out, items * t / threads, items * (t + 1) / threads, 0};
    jobs[t] = job;
  }
  fanout(run, jobs, sizeof jobs[0], threads);
  int status = 0;
  for (int t = 0; t < threads; t++) if (jobs[t].status) status = jobs[t].status;
  return status;
#else
  (void)x; (void)w; (void)scale; (void)hit; (void)offsets; (void)groups; (void)experts; (void)rows; (void)n;
  (void)k; (void)max_rows;
  (void)out; (void)threads;
  return -2;
#endif
}

/* Whether this build multiplies rows as 16-bit integers (AVX512-VNNI) where they are finite. */
int clover_int8_vnni(void) {
#if HAVE_KERNEL
  return HAVE_VNNI;
#else
  return 0;
#endif
}

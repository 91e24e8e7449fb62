/* An int8 linear at a block's rows on the CPU's matrix unit (AMX): out[M, N] = x[M, K] @ W[N, K]^T * scale[N], x and
 * out bfloat16, W int8 as stored with a bfloat16 scale per output row, M <= 32 (engine/amxlinear.py loads it,
 * engine/int8cpu.py chooses it).
 *
 * Why: at a block's 32 rows an int8 linear is neither memory- nor compute-cheap with what torch ships for the
 * CPU. torch's _weight_int8pack_mm multiplies in float32 FMAs (its time grows with the rows: ~0.2 ms a row
 * for 8192 x 2048 on a 2-core Xeon), and widening the whole weight to bf16 for one AMX matmul writes and reads
 * twice the int8 bytes. Here each thread widens 32 weight rows at a time into a bf16 buffer that stays in L2
 * (the int8 read once, in memory order) and multiplies them on AMX against the rows, packed once per call.
 * (The same tiles over a bf16 weight as it lies, tried for the LM head to write its result row-major, read
 * the 1 GB head slower than oneDNN's product does: 51-56 ms against 44-49 with its transposition.)
 *
 * Tiles: A = 16 weight rows x 32 k (bf16), B = 16 pairs of k x 16 activation rows (VNNI), C = 16 weight rows x
 * 16 activation rows (float32): two A, two B and four C tiles cover 32 weight rows x 32 activation rows.
 * Needs AMX-BF16 and AVX512-BF16 at build time and the kernel's permission to use the tile data (Linux
 * arch_prctl); without either it reports so and the caller keeps torch's paths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "fanout.h"
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_AMX 1
#else
#define HAVE_AMX 0
#endif

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

int clover_amx_available(void) {
#if HAVE_AMX
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return 0;
#endif
}

#if HAVE_AMX
typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config_t;

typedef struct {
  const uint16_t *xp; const int8_t *w; const uint16_t *scale; uint16_t *out;
  int64_t m, n, k; int64_t first, last; int status;
} job_t;

/* Weight rows [n0 + lo, n0 + hi) of a block of 32 widened to bf16, each row read and written in memory order,
 * into wide[r][k] with rows (k + 32) values apart: 64 bytes more than the row, so that the 16 rows an A tile
 * loads fall in different L1 sets (rows a power of two apart would all map to one). The row two ahead is
 * prefetched into L2. */
static void widen(const int8_t *w, int64_t k, int64_t n0, int64_t lo, int64_t hi, uint16_t *wide) {
  const int64_t stride = k + 32;
  for (int64_t r = lo; r < hi; r++) {
    const int8_t *row = w + (n0 + r) * k;
    uint16_t *to = wide + r * stride;
    for (int64_t c = 0; c < k; c += 32) {
      if (!(c & 63)) _mm_prefetch((const char *)((uintptr_t)row + (uintptr_t)(2 * k + c)), _MM_HINT_T1);
      __m512 lo16 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + c))));
      __m512 hi16 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + c + 16))));
      _mm512_storeu_si512((void *)(to + c), (__m512i)_mm512_cvtne2ps_pbh(hi16, lo16));
    }
  }
}

static void *run(void *arg) {
  job_t *job = (job_t *)arg;
  if (job->last <= job->first) return NULL;
  const int64_t k = job->k, steps = k / 32;
  const int64_t stride = k + 32;  /* widen()'s row stride, in values */
  /* two buffers: the tiles multiply one block while the vector units widen the next into the other */
  uint16_t *wide = (uint16_t *)aligned_alloc(64, (size_t)(2 * 32 * stride * 2));
  float *c = (float *)aligned_alloc(64, 32 * 32 * sizeof(float));
  if (!wide || !c) { free(wide); free(c); job->status = -3; return NULL; }
  tile_config_t config;
  memset(&config, 0, sizeof config);
  config.palette = 1;
  for (int t = 0; t < 8; t++) { config.rows[t] = 16; config.colsb[t] = 64; }
  _tile_loadconfig(&config);
  widen(job->w, k, job->first * 32, 0, 32, wide);
  for (int64_t block = job->first; block < job->last; block++) {
    const int64_t n0 = block * 32;
    uint16_t *cur = wide + ((block - job->first) & 1) * 32 * stride, *nxt = wide + ((block - job->first + 1) & 1) * 32 * stride;
    const int more = block + 1 < job->last;
    _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
    for (int64_t s = 0; s < steps; s++) {
      _tile_loadd(0, cur + s * 32, stride * 2);
      _tile_loadd(1, cur + 16 * stride + s * 32, stride * 2);
      _tile_loadd(2, job->xp + (s * 2) * 16 * 32, 64);
      _tile_loadd(3, job->xp + (s * 2 + 1) * 16 * 32, 64);
      _tile_dpbf16ps(4, 0, 2); _tile_dpbf16ps(5, 0, 3);
      _tile_dpbf16ps(6, 1, 2); _tile_dpbf16ps(7, 1, 3);
      /* the next block's rows, spread over this block's steps */
      if (more) widen(job->w, k, n0 + 32, (s * 32) / steps, ((s + 1) * 32) / steps, nxt);
    }
    /* c[weight row][activation row], 32 x 32 float32 */
    _tile_stored(4, c, 128); _tile_stored(5, c + 16, 128);
    _tile_stored(6, c + 16 * 32, 128); _tile_stored(7, c + 16 * 32 + 16, 128);
    /* out[i][n0 + r] = c[r][i] * scale[n0 + r]: a column of c gathered, scaled, rounded to bf16 as torch rounds */
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(32));
    const __m512 scale_lo = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i *)(job->scale + n0)));
    const __m512 scale_hi = _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i *)(job->scale + n0 + 16)));
    for (int64_t i = 0; i < job->m; i++) {
      __m512 lo = _mm512_mul_ps(_mm512_i32gather_ps(column, c + i, 4), scale_lo);
      __m512 hi = _mm512_mul_ps(_mm512_i32gather_ps(column, c + 16 * 32 + i, 4), scale_hi);
      _mm512_storeu_si512((void *)(job->out + i * job->n + n0), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  _tile_release();
  free(wide); free(c);
  return NULL;
}
#endif

/* x bf16 [m, k], m in 1..32; w int8 [n, k]; scale bf16 [n]; out bf16 [m, n]. 0 when done, -1 shapes it does not
 * take (n % 32, k % 32, m outside 1..32), -2 no AMX here, -3 out of memory. */
int clover_int8_linear_amx(const uint16_t *x, const int8_t *w, const uint16_t *scale, uint16_t *out, int64_t m,
                           int64_t n, int64_t k, int threads) {
#if HAVE_AMX
  if (m < 1 || m > 32 || n <= 0 || k <= 0 || n % 32 || k % 32) return -1;
  if (!clover_amx_available()) return -2;
  const int64_t steps = k / 32;
  /* the rows as B tiles, once: xp[s][half][p][i][e] = x[16 half + i][32 s + 2 p + e], zero past m */
  uint16_t *xp = (uint16_t *)aligned_alloc(64, (size_t)(steps * 2 * 16 * 32 * 2));
  if (!xp) return -3;
  if (m < 32) memset(xp, 0, (size_t)(steps * 2 * 16 * 32 * 2));
  /* a pair of bf16 is one 32-bit word: xp32[s][half][p][i % 16] = x32[i][16 s + p] */
  uint32_t *xp32 = (uint32_t *)xp;
  for (int64_t i = 0; i < m; i++) {
    const uint32_t *row = (const uint32_t *)(x + i * k);
    for (int64_t s = 0; s < steps; s++)
      for (int64_t p = 0; p < 16; p++) xp32[((s * 2 + i / 16) * 16 + p) * 16 + i % 16] = row[16 * s + p];
  }
  const int64_t blocks = n / 32;
  threads = fanout_threads(threads, blocks);
  job_t jobs[FANOUT_MAX];
  for (int t = 0; t < threads; t++) {
    job_t job = {xp, w, scale, out, m, n, k, blocks * t / threads, blocks * (t + 1) / threads, 0};
    jobs[t] = job;
  }
  fanout(run, jobs, sizeof jobs[0], threads);
  int status = 0;
  for (int t = 0; t < threads; t++) if (jobs[t].status) status = jobs[t].status;
  free(xp);
  return status;
#else
  (void)x; (void)w; (void)scale; (void)out; (void)m; (void)n; (void)k; (void)threads;
  return -2;
#endif
}

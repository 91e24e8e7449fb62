/* An int8 linear at a block's rows on the CPU's matrix unit (AMX): out[M, N] = x[M, K] @ W[N, K]^T * scale[N],
 * x and out bfloat16, W int8 as stored with a bfloat16 scale per output row, M <= 32 (engine/int8native.py
 * loads it, engine/int8cpu.py chooses it).
 *
 * Why: at a block's 32 rows an int8 linear is neither memory- nor compute-cheap with what torch ships for the
 * CPU. torch's _weight_int8pack_mm multiplies in float32 FMAs (its time grows with the rows: ~0.2 ms a row
 * for 8192 x 2048 on a 2-core Xeon), and widening the whole weight to bf16 for one AMX matmul writes and reads
 * twice the int8 bytes. Here each thread widens 32 weight rows at a time into a bf16 buffer that stays in L2
 * (the int8 read once, in memory order) and multiplies them on AMX against the rows, packed once per call.
 *
 * Tiles: A = 16 weight rows x 32 k (bf16), B = 16 pairs of k x 16 activation rows (VNNI), C = 16 weight rows x
 * 16 activation rows (float32): two A, two B and four C tiles cover 32 weight rows x 32 activation rows.
 * Needs AMX-BF16 and AVX512-BF16 at build time and the kernel's permission to use the tile data (Linux
 * arch_prctl); without either it reports so and the caller keeps torch's paths. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
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

static inline uint16_t float_to_bf16(float f) {  /* round to nearest even, as torch does; NaN stays NaN */
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float bf16_to_float(uint16_t v) { uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }

/* 32 weight rows [n0, n0 + 32) widened to bf16, laid out as k-steps of two A tiles: wide[s][row][32] */
static void widen(const int8_t *w, int64_t k, int64_t n0, uint16_t *wide) {
  const int64_t steps = k / 32;
  for (int64_t r = 0; r < 32; r++) {
    const int8_t *row = w + (n0 + r) * k;
    for (int64_t s = 0; s < steps; s++) {
      if (!(s & 1)) _mm_prefetch((const char *)(row + 32 * s + 4096), _MM_HINT_T0);  /* the block's rows are one run */
      __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + 32 * s))));
      __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(row + 32 * s + 16))));
      _mm512_storeu_si512((void *)(wide + (s * 32 + r) * 32), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

static void *run(void *arg) {
  job_t *job = (job_t *)arg;
  if (job->last <= job->first) return NULL;
  const int64_t k = job->k, steps = k / 32;
  uint16_t *wide = (uint16_t *)aligned_alloc(64, (size_t)(steps * 32 * 32 * 2));
  float *c = (float *)aligned_alloc(64, 32 * 32 * sizeof(float));
  if (!wide || !c) { free(wide); free(c); job->status = -3; return NULL; }
  tile_config_t config;
  memset(&config, 0, sizeof config);
  config.palette = 1;
  for (int t = 0; t < 8; t++) { config.rows[t] = 16; config.colsb[t] = 64; }
  _tile_loadconfig(&config);
  for (int64_t block = job->first; block < job->last; block++) {
    const int64_t n0 = block * 32;
    widen(job->w, k, n0, wide);
    _tile_zero(4); _tile_zero(5); _tile_zero(6); _tile_zero(7);
    for (int64_t s = 0; s < steps; s++) {
      _tile_loadd(0, wide + (s * 32) * 32, 64);
      _tile_loadd(1, wide + (s * 32 + 16) * 32, 64);
      _tile_loadd(2, job->xp + (s * 2) * 16 * 32, 64);
      _tile_loadd(3, job->xp + (s * 2 + 1) * 16 * 32, 64);
      _tile_dpbf16ps(4, 0, 2); _tile_dpbf16ps(5, 0, 3);
      _tile_dpbf16ps(6, 1, 2); _tile_dpbf16ps(7, 1, 3);
    }
    /* c[weight row][activation row], 32 x 32 float32 */
    _tile_stored(4, c, 128); _tile_stored(5, c + 16, 128);
    _tile_stored(6, c + 16 * 32, 128); _tile_stored(7, c + 16 * 32 + 16, 128);
    for (int64_t i = 0; i < job->m; i++)
      for (int64_t r = 0; r < 32; r++)
        job->out[i * job->n + n0 + r] = float_to_bf16(c[r * 32 + i] * bf16_to_float(job->scale[n0 + r]));
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
  memset(xp, 0, (size_t)(steps * 2 * 16 * 32 * 2));
  for (int64_t i = 0; i < m; i++)
    for (int64_t s = 0; s < steps; s++)
      for (int64_t p = 0; p < 16; p++)
        for (int64_t e = 0; e < 2; e++)
          xp[(((s * 2 + i / 16) * 16 + p) * 16 + i % 16) * 2 + e] = x[i * k + 32 * s + 2 * p + e];
  const int64_t blocks = n / 32;
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  if (blocks < threads) threads = (int)blocks;
  job_t jobs[64];
  pthread_t ids[64];
  int started[64] = {0};
  for (int t = 0; t < threads; t++) {
    job_t job = {xp, w, scale, out, m, n, k, blocks * t / threads, blocks * (t + 1) / threads, 0};
    jobs[t] = job;
  }
  for (int t = 1; t < threads; t++) started[t] = pthread_create(&ids[t], NULL, run, &jobs[t]) == 0;
  run(&jobs[0]);
  int status = jobs[0].status;
  for (int t = 1; t < threads; t++) {
    if (started[t]) pthread_join(ids[t], NULL);
    else run(&jobs[t]);
    if (jobs[t].status) status = jobs[t].status;
  }
  free(xp);
  return status;
#else
  (void)x; (void)w; (void)scale; (void)out; (void)m; (void)n; (void)k; (void)threads;
  return -2;
#endif
}

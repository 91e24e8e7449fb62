/* The gated delta rule on the CPU, token by token, in float32: what transformers' PyTorch fallbacks
 * (torch_recurrent_gated_delta_rule / torch_chunk_gated_delta_rule) compute, for every length, in one call
 * (engine/gdncpu.py builds, chooses and calls it).
 *
 * Why: flash-linear-attention's kernels are Triton, for GPUs; on the CPU transformers runs its chunked
 * fallback, which pads a 32-position block to a 64-position chunk and runs dozens of small float32 batched
 * matmuls and a triangular solve, or, token by token, ~8 operations per token. The recurrence itself is small: per
 * value head and token one pass over a dk x dv float32 state (64 KB at 128 x 128), here in slabs of columns
 * that stay in L1 while every token of the call runs; the heads are split between threads.
 *
 * Per token t of head h (key head h / (Hv / Hk), as repeat_interleave serves them):
 *   q, k = l2norm(q), l2norm(k) (when asked), q *= dk^-1/2
 *   S *= exp(g);  m = k^T S;  d = (v - m) * beta;  S += k d^T;  o = q^T S
 * AVX-512 where the machine has it, else plain C the compiler vectorises. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "fanout.h"

int clover_gdn_available(void) { return 1; }

typedef struct {
  const float *q, *k, *v, *g, *beta; float *state, *out;
  int64_t batch, tokens, hk, hv, dk, dv; int l2norm; int64_t first, last; int status;
} job_t;

static float inverse_norm(const float *x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) sum += x[i] * x[i];
  return 1.0f / sqrtf(sum + 1e-6f);
}

/* The state's columns evolve independently (column j needs only q, k, decay, beta and v[j]), so a slab of
 * SLAB columns (128 rows x 64 columns: 32 KB, in L1) runs through every token before the next slab. With
 * a = k^T S and b = q^T S read from the state before token t, S' = decay S + k d^T gives
 *   d = (v - decay a) beta,  o = decay b + (q . k) d,
 * and one pass over the rows per token both writes S' and reads a, b for token t + 1 from it. */
#define SLAB 64

#if defined(__AVX512F__)
#include <immintrin.h>
#define HAVE_SLAB64 1
static void slab64(float *s, int64_t dk, int64_t dv, int64_t j0, int64_t tokens, const float *qn, const float *kn,
                 const float *qk, const float *decay, const float *beta, const float *v, int64_t v_stride,
                 float *o, int64_t o_stride) {
  /* a = k^T S and b = q^T S for the next token, each summed in two halves (even and odd rows of S): one
   * chain of FMAs over 128 rows waited on its own latency */
  __m512 a[2][4], b[2][4], d[4];
  for (int h = 0; h < 2; h++) for (int c = 0; c < 4; c++) { a[h][c] = _mm512_setzero_ps(); b[h][c] = _mm512_setzero_ps(); }
#define READ_ROW(h, i)                                                                                  \
  do {                                                                                                  \
    const __m512 ki = _mm512_set1_ps(kn[i]), qi = _mm512_set1_ps(qn[i]);                                \
    for (int c = 0; c < 4; c++) {                                                                       \
      __m512 x = _mm512_loadu_ps(s + (i) * dv + j0 + 16 * c);                                           \
      a[h][c] = _mm512_fmadd_ps(ki, x, a[h][c]); b[h][c] = _mm512_fmadd_ps(qi, x, b[h][c]);             \
    }                                                                                                   \
  } while (0)
  int64_t i = 0;
  for (; i + 1 < dk; i += 2) { READ_ROW(0, i); READ_ROW(1, i + 1); }
  if (i < dk) READ_ROW(0, i);
#undef READ_ROW
  for (int64_t t = 0; t < tokens; t++) {
    const __m512 dec = _mm512_set1_ps(decay[t]), bet = _mm512_set1_ps(beta[t]), dot = _mm512_set1_ps(qk[t]);
    for (int c = 0; c < 4; c++) {
      __m512 vv = _mm512_loadu_ps(v + t * v_stride + j0 + 16 * c);
      d[c] = _mm512_mul_ps(_mm512_fnmadd_ps(dec, _mm512_add_ps(a[0][c], a[1][c]), vv), bet);
      _mm512_storeu_ps(o + t * o_stride + j0 + 16 * c,
                       _mm512_fmadd_ps(dot, d[c], _mm512_mul_ps(dec, _mm512_add_ps(b[0][c], b[1][c]))));
      for (int h = 0; h < 2; h++) { a[h][c] = _mm512_setzero_ps(); b[h][c] = _mm512_setzero_ps(); }
    }
    /* the buffers hold a row of zeros after the last token: its "next" reads nothing */
    const float *kt = kn + t * dk, *kn1 = kn + (t + 1) * dk, *qn1 = qn + (t + 1) * dk;
#define WRITE_ROW(h, i)                                                                                 \
    do {                                                                                                \
      const __m512 ki = _mm512_set1_ps(kt[i]), k1 = _mm512_set1_ps(kn1[i]), q1 = _mm512_set1_ps(qn1[i]);  \
      for (int c = 0; c < 4; c++) {                                                                     \
        float *at = s + (i) * dv + j0 + 16 * c;                                                         \
        __m512 x = _mm512_fmadd_ps(ki, d[c], _mm512_mul_ps(dec, _mm512_loadu_ps(at)));                  \
        _mm512_storeu_ps(at, x);                                                                        \
        a[h][c] = _mm512_fmadd_ps(k1, x, a[h][c]); b[h][c] = _mm512_fmadd_ps(q1, x, b[h][c]);           \
      }                                                                                                 \
    } while (0)
    int64_t i = 0;
    for (; i + 1 < dk; i += 2) { WRITE_ROW(0, i); WRITE_ROW(1, i + 1); }
    if (i < dk) WRITE_ROW(0, i);
#undef WRITE_ROW
  }
}
#else
#define HAVE_SLAB64 0
#endif

/* any width up to SLAB columns (the last slab, or a machine without AVX-512) */
static void slab(float *s, int64_t dk, int64_t dv, int64_t j0, int width, int64_t tokens, const float *qn, const float *kn,
                 const float *qk, const float *decay, const float *beta, const float *v, int64_t v_stride,
                 float *o, int64_t o_stride) {
  float a[SLAB] = {0}, b[SLAB] = {0}, d[SLAB];
  for (int64_t i = 0; i < dk; i++)
    for (int j = 0; j < width; j++) { a[j] += kn[i] * s[i * dv + j0 + j]; b[j] += qn[i] * s[i * dv + j0 + j]; }
  for (int64_t t = 0; t < tokens; t++) {
    for (int j = 0; j < width; j++) {
      d[j] = (v[t * v_stride + j0 + j] - decay[t] * a[j]) * beta[t];
      o[t * o_stride + j0 + j] = decay[t] * b[j] + qk[t] * d[j];
      a[j] = 0.0f; b[j] = 0.0f;
    }
    const int next = t + 1 < tokens;
    for (int64_t i = 0; i < dk; i++) {
      const float ki = kn[t * dk + i], k1 = next ? kn[(t + 1) * dk + i] : 0.0f, q1 = next ? qn[(t + 1) * dk + i] : 0.0f;
      for (int j = 0; j < width; j++) {
        float x = decay[t] * s[i * dv + j0 + j] + ki * d[j];
        s[i * dv + j0 + j] = x; a[j] += k1 * x; b[j] += q1 * x;
      }
    }
  }
}

static void *run(void *arg) {
  job_t *job = (job_t *)arg;
  const int64_t dk = job->dk, dv = job->dv, hv = job->hv, hk = job->hk, tokens = job->tokens;
  const int64_t per_key = hv / hk;
  /* this item's normalised queries and keys, q . k, decays and betas, for all its tokens (+1 row of zeros) */
  float *qn = (float *)calloc((size_t)((tokens + 1) * dk * 2 + tokens * 3), sizeof(float));
  if (!qn) { job->status = -3; return NULL; }
  float *kn = qn + (tokens + 1) * dk, *qk = kn + (tokens + 1) * dk, *decay = qk + tokens, *beta = decay + tokens;
  const float scale = 1.0f / sqrtf((float)dk);
  for (int64_t item = job->first; item < job->last; item++) {
    const int64_t b = item / hv, h = item % hv, kh = h / per_key;
    for (int64_t t = 0; t < tokens; t++) {
      const int64_t at = b * tokens + t;
      const float *q = job->q + (at * hk + kh) * dk, *k = job->k + (at * hk + kh) * dk;
      const float qs = job->l2norm ? inverse_norm(q, dk) * scale : scale;
      const float ks = job->l2norm ? inverse_norm(k, dk) : 1.0f;
      float dot = 0.0f;
      for (int64_t i = 0; i < dk; i++) {
        qn[t * dk + i] = q[i] * qs; kn[t * dk + i] = k[i] * ks; dot += qn[t * dk + i] * kn[t * dk + i];
      }
      qk[t] = dot; decay[t] = expf(job->g[at * hv + h]); beta[t] = job->beta[at * hv + h];
    }
    float *s = job->state + item * dk * dv;
    const float *v = job->v + (b * tokens * hv + h) * dv;
    float *o = job->out + (b * tokens * hv + h) * dv;
    for (int64_t j0 = 0; j0 < dv; j0 += SLAB) {
      const int width = dv - j0 < SLAB ? (int)(dv - j0) : SLAB;
#if HAVE_SLAB64
      if (width == SLAB) { slab64(s, dk, dv, j0, tokens, qn, kn, qk, decay, beta, v, hv * dv, o, hv * dv); continue; }
#endif
      slab(s, dk, dv, j0, width, tokens, qn, kn, qk, decay, beta, v, hv * dv, o, hv * dv);
    }
  }
  free(qn);
  return NULL;
}

/* q, k float32 [batch, tokens, hk, dk]; v float32 [batch, tokens, hv, dv]; g, beta float32 [batch, tokens, hv];
 * state float32 [batch, hv, dk, dv], the initial state, updated in place to the final one; out float32
 * [batch, tokens, hv, dv]. 0 when done, -1 shapes it does not take, -3 out of memory. */
int clover_gdn_recurrent(const float *q, const float *k, const float *v, const float *g, const float *beta,
                         float *state, float *out, int64_t batch, int64_t tokens, int64_t hk, int64_t hv,
                         int64_t dk, int64_t dv, int l2norm, int threads) {
  if (batch < 0 || tokens < 0 || hk <= 0 || hv <= 0 || dk <= 0 || dv <= 0 || hv % hk) return -1;
  const int64_t items = batch * hv;
  if (items == 0 || tokens == 0) return 0;
  threads = fanout_threads(threads, items);
  job_t jobs[FANOUT_MAX];
  for (int t = 0; t < threads; t++) {
    job_t job = {q, k, v, g, beta, state, out, batch, tokens, hk, hv, dk, dv, l2norm,
                 items * t / threads, items * (t + 1) / threads, 0};
    jobs[t] = job;
  }
  fanout(run, jobs, sizeof jobs[0], threads);
  int status = 0;
  for (int t = 0; t < threads; t++) if (jobs[t].status) status = jobs[t].status;
  return status;
}

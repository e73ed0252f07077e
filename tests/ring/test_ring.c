/*
 * test_ring.c - end-to-end tests of the ring: real ringd daemons on
 * 127.0.0.1, one client per host in its own thread, through the public
 * client API (ringd.h) only.
 *
 * How results are checked
 *   Every rank must end with the same bytes (memcmp against rank 0), and rank
 *   0's bytes must match a reference computed here from every rank's input:
 *   - Integers: exactly. SUM and PROD wrap around modulo 2^bits, so the
 *     reference is computed in uint64_t and truncated; MIN and MAX compare as
 *     signed or unsigned values of the type.
 *   - Floats, MIN and MAX: exactly (no rounding is involved).
 *   - Floats, SUM: the ring adds the N inputs of an element one at a time in
 *     some fixed order, so with u the unit roundoff of one addition the
 *     classic bound for any order of N-1 additions holds (Higham, Accuracy and
 *     Stability of Numerical Algorithms, 4.2):
 *         |computed - exact| <= gamma(N-1) * sum|x_i|,  gamma(k) = k*u / (1 - k*u).
 *     Inputs are generated directly in the element type, so they carry no
 *     rounding of their own. u is the type's unit roundoff (2^-11 float16,
 *     2^-8 bfloat16, 2^-24 float32, 2^-53 float64) plus 2^-23, 2^-52 or 2^-63
 *     (twice the unit roundoff of the next wider type): the daemon may compute
 *     in a wider type and round to the element type after every operation
 *     (reduce.h does so for half types in float32), and the double rounding
 *     fl(fl_wide(z)) is within (u + 2*u_wide)*|z| of z.
 *     The reference is a long double sum; for 16- and 32-bit types it is exact
 *     (inputs span at most 2^-31..2^5), for float64 it may be off by
 *     (N-1)*LDBL_EPSILON*sum|x_i|, which is added to the bound.
 *   - Floats, MEAN: one more rounding, of the division by N:
 *         |computed - S/N| <= e_S/N + u*(|S| + e_S)/N   (e_S: the SUM bound),
 *     plus LDBL_EPSILON*|S|/N for the reference's own division. With N a power
 *     of two the division is exact.
 *   - Floats, PROD: inputs in [0.5, 2) in magnitude, so no product of up to 5
 *     of them overflows or underflows any type; relative error
 *         |computed - P| <= gamma(N-1) * |P|  (+ (N-1)*LDBL_EPSILON*|P|).
 *   Inputs of SUM/MEAN/MIN/MAX lie in [-4, 4] (2^-8 <= |x| < 4, or 0), so a
 *   float16 sum of 5 of them (< 20) cannot overflow. Every 7th element is
 *   instead an exactly representable value (k/4 for |k| <= 16; {0.5, 1, 1.5}
 *   with a sign for PROD), whose sums and products up to N = 5 are exactly
 *   representable in every type, including bfloat16's 8 significant bits;
 *   for those the result must be exact (bound 0).
 *
 * Seeds are printed; RINGD_TEST_SEED=N reproduces a run.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "ringd.h"
#include "tests/harness/harness.h"

#ifndef RINGCTL_BIN
#error "RINGCTL_BIN must be defined to the path of the ringctl binary"
#endif

/* The config of every test that forms a ring. A stuck collective fails after
 * collective_timeout; the barriers of the client threads wait longer than
 * that plus the verification of one case. */
#define RING_YAML "collective_timeout: 30s\n"
#define BARRIER_MS 120000
#define MAX_FAILURES 200 /* then the test stops */

#define BIG_PRIME 1048583 /* > 2^20 elements */
#define PRIME 10007

static harness H;

static void setup(void)
{
    harness_reset(&H);
    /* Clients must take whatever local rank the daemon gives (0 of 1). */
    unsetenv("RINGD_LOCAL_RANK");
    unsetenv("LOCAL_RANK");
}

static void teardown(void)
{
    harness_cleanup(&H);
}

TestSuite(allreduce, .init = setup, .fini = teardown, .timeout = 900);
TestSuite(ring, .init = setup, .fini = teardown, .timeout = 300);
TestSuite(ringd, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(ringctl, .init = setup, .fini = teardown, .timeout = 120);

/* ---- element formats ----------------------------------------------------- */

static bool is_float(ringd_dtype t)
{
    return t == RINGD_FLOAT16 || t == RINGD_BFLOAT16 || t == RINGD_FLOAT32 || t == RINGD_FLOAT64;
}

static bool is_signed_int(ringd_dtype t)
{
    return t == RINGD_INT8 || t == RINGD_INT32 || t == RINGD_INT64;
}

static unsigned type_bits(ringd_dtype t)
{
    switch (t) {
    case RINGD_INT8:
    case RINGD_UINT8:
        return 8;
    case RINGD_FLOAT16:
    case RINGD_BFLOAT16:
        return 16;
    case RINGD_INT32:
    case RINGD_FLOAT32:
        return 32;
    default:
        return 64;
    }
}

static uint64_t type_mask(ringd_dtype t)
{
    unsigned b = type_bits(t);
    return b == 64 ? ~0ull : (1ull << b) - 1;
}

/* Binary floating-point layout: mantissa bits and exponent bias. */
typedef struct {
    int mbits, bias;
} float_format;

static float_format format_of(ringd_dtype t)
{
    switch (t) {
    case RINGD_FLOAT16:
        return (float_format){10, 15};
    case RINGD_BFLOAT16:
        return (float_format){7, 127};
    case RINGD_FLOAT32:
        return (float_format){23, 127};
    default:
        return (float_format){52, 1023};
    }
}

/* The per-operation unit roundoff u of the header comment. */
static long double unit_roundoff(ringd_dtype t)
{
    switch (t) {
    case RINGD_FLOAT16:
        return ldexpl(1, -11) + ldexpl(1, -23);
    case RINGD_BFLOAT16:
        return ldexpl(1, -8) + ldexpl(1, -23);
    case RINGD_FLOAT32:
        return ldexpl(1, -24) + ldexpl(1, -52);
    default:
        return ldexpl(1, -53) + ldexpl(1, -63);
    }
}

static long double gamma_n(int k, long double u)
{
    return k * u / (1 - k * u);
}

/* Encodes (-1)^sign * 2^e * (1 + frac / 2^mbits), a normal number. */
static uint64_t encode(ringd_dtype t, int sign, int e, uint64_t frac)
{
    float_format f = format_of(t);
    unsigned bits = type_bits(t);
    return ((uint64_t)sign << (bits - 1)) | ((uint64_t)(e + f.bias) << f.mbits) |
           (frac & ((1ull << f.mbits) - 1));
}

/* Encodes k/4 for |k| <= 16 exactly. */
static uint64_t encode_quarter(ringd_dtype t, int k)
{
    if (k == 0) return 0;
    unsigned a = (unsigned)(k < 0 ? -k : k);
    int top = 31 - __builtin_clz(a); /* a = 2^top + rest */
    uint64_t rest = a - (1u << top);
    return encode(t, k < 0, top - 2, rest << (format_of(t).mbits - top));
}

static long double decode(ringd_dtype t, uint64_t bits)
{
    switch (t) {
    case RINGD_FLOAT16: {
        int sign = (int)(bits >> 15) & 1, ex = (int)(bits >> 10) & 31, frac = (int)bits & 1023;
        long double v = ex == 0    ? ldexpl(frac, -24)
                        : ex == 31 ? (frac ? NAN : INFINITY)
                                   : ldexpl(1024 + frac, ex - 25);
        return sign ? -v : v;
    }
    case RINGD_BFLOAT16: {
        uint32_t w = (uint32_t)bits << 16;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    case RINGD_FLOAT32: {
        uint32_t w = (uint32_t)bits;
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &bits, sizeof d);
        return d;
    }
    }
}

static uint64_t nan_bits(ringd_dtype t)
{
    float_format f = format_of(t);
    return ((uint64_t)(2 * f.bias + 1) << f.mbits) | (1ull << (f.mbits - 1));
}

static uint64_t load(const unsigned char *buf, ringd_dtype t, size_t i)
{
    unsigned bytes = type_bits(t) / 8;
    uint64_t v = 0;
    /* Little-endian hosts only, like the wire format of the tests' ring. */
    memcpy(&v, buf + i * bytes, bytes);
    return v;
}

static void store(unsigned char *buf, ringd_dtype t, size_t i, uint64_t v)
{
    unsigned bytes = type_bits(t) / 8;
    memcpy(buf + i * bytes, &v, bytes);
}

static int64_t sign_extend(uint64_t v, unsigned bits)
{
    if (bits == 64) return (int64_t)v;
    uint64_t m = 1ull << (bits - 1);
    v &= (1ull << bits) - 1;
    return (int64_t)((v ^ m) - m);
}

/* ---- inputs ------------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool exact_element(size_t i)
{
    return i % 7 == 3;
}

/* Element i of rank's input for a collective whose seed is cseed. */
static uint64_t input_element(uint64_t cseed, int rank, size_t i, ringd_dtype t, ringd_op op)
{
    uint64_t r = mix(cseed + ((uint64_t)rank << 40) + i);
    if (!is_float(t)) {
        if (exact_element(i)) /* small values, no wrap-around */
            return (uint64_t)((int64_t)(r % 17) - 8) & type_mask(t);
        return r & type_mask(t);
    }
    int sign = (int)(r & 1);
    if (op == RINGD_PROD) {
        if (exact_element(i)) {
            static const int quarters[] = {2, 4, 6}; /* 0.5, 1, 1.5 */
            int k = quarters[(r >> 1) % 3];
            return encode_quarter(t, sign ? -k : k);
        }
        return encode(t, sign, (int)((r >> 1) & 1) - 1, r >> 12); /* [0.5, 2) */
    }
    if (exact_element(i)) return encode_quarter(t, (int)((r >> 1) % 33) - 16);
    return encode(t, sign, (int)((r >> 1) % 10) - 8, r >> 12); /* 2^-8 <= |x| < 4 */
}

static void fill_input(uint64_t cseed, int rank, unsigned char *out, size_t count, ringd_dtype t,
                       ringd_op op)
{
    for (size_t i = 0; i < count; i++)
        store(out, t, i, input_element(cseed, rank, i, t, op));
}

/* ---- collectives run by client threads -------------------------------------- */

typedef struct {
    size_t count;
    ringd_dtype dtype;
    ringd_op op;
    bool malloced; /* buffer from malloc() rather than ringd_alloc() */
    int expect;    /* 0, or the error every rank must get */
} ring_case;

typedef struct {
    harness *h;
    int n;
    uint64_t seed;
    ring_case *cases;
    size_t n_cases;
    size_t max_bytes;
    int late_rank; /* this rank's thread waits for late_ready, or -1 */
    atomic_bool late_ready;
    unsigned char *input[HARNESS_MAX_HOSTS];  /* each rank's input, kept */
    unsigned char *result[HARNESS_MAX_HOSTS]; /* each rank's buffer, read between barriers */
    harness_barrier bar;
    harness_failures fail;
    atomic_size_t done; /* cases completed */
} ring_job;

static const char *case_name(const ring_job *j, size_t k, char *buf, size_t len)
{
    const ring_case *cs = &j->cases[k];
    snprintf(buf, len, "%d hosts, case %zu: %zu x %s %s, %s memory", j->n, k, cs->count,
             ringd_dtype_name(cs->dtype), ringd_op_name(cs->op),
             cs->malloced ? "malloc" : "ringd_alloc");
    return buf;
}

static uint64_t case_seed(const ring_job *j, size_t k)
{
    return mix(j->seed ^ mix(k + 1));
}

/* Checks element i of rank 0's result against the reference of all inputs.
 * Returns true if it matches; otherwise describes it in why. */
static bool check_element(const ring_job *j, const ring_case *cs, size_t i, char *why, size_t len)
{
    ringd_dtype t = cs->dtype;
    int n = j->n;
    uint64_t got = load(j->result[0], t, i);

    if (!is_float(t)) {
        uint64_t mask = type_mask(t), ref = cs->op == RINGD_PROD ? 1 : 0;
        unsigned bits = type_bits(t);
        for (int r = 0; r < n; r++) {
            uint64_t x = load(j->input[r], t, i);
            bool take;
            switch (cs->op) {
            case RINGD_SUM:
                ref += x;
                break;
            case RINGD_PROD:
                ref *= x;
                break;
            case RINGD_MIN:
            case RINGD_MAX:
                if (r == 0) {
                    ref = x;
                    break;
                }
                if (is_signed_int(t))
                    take = cs->op == RINGD_MIN ? sign_extend(x, bits) < sign_extend(ref, bits)
                                               : sign_extend(x, bits) > sign_extend(ref, bits);
                else
                    take = cs->op == RINGD_MIN ? x < ref : x > ref;
                if (take) ref = x;
                break;
            default:
                break;
            }
        }
        if ((got & mask) == (ref & mask)) return true;
        if (is_signed_int(t))
            snprintf(why, len, "got %lld (0x%llx), expected %lld (0x%llx)",
                     (long long)sign_extend(got, bits), (unsigned long long)(got & mask),
                     (long long)sign_extend(ref, bits), (unsigned long long)(ref & mask));
        else
            snprintf(why, len, "got %llu, expected %llu", (unsigned long long)(got & mask),
                     (unsigned long long)(ref & mask));
        return false;
    }

    long double u = unit_roundoff(t), v = decode(t, got), ref = 0, bound = 0;
    long double sum = 0, abs_sum = 0, prod = 1, mn = INFINITY, mx = -INFINITY;
    for (int r = 0; r < n; r++) {
        long double x = decode(t, load(j->input[r], t, i));
        sum += x;
        abs_sum += fabsl(x);
        prod *= x;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
    }
    bool exact = exact_element(i);
    long double e_sum = gamma_n(n - 1, u) * abs_sum + (n - 1) * LDBL_EPSILON * abs_sum;
    switch (cs->op) {
    case RINGD_SUM:
        ref = sum;
        bound = exact ? 0 : e_sum;
        break;
    case RINGD_MEAN:
        ref = sum / n;
        if (n == 1 || (exact && (n & (n - 1)) == 0))
            bound = 0;
        else
            bound = e_sum / n + u * (fabsl(sum) + e_sum) / n + LDBL_EPSILON * fabsl(sum) / n;
        break;
    case RINGD_PROD:
        ref = prod;
        bound = exact ? 0 : (gamma_n(n - 1, u) + (n - 1) * LDBL_EPSILON) * fabsl(prod);
        break;
    case RINGD_MIN:
        ref = mn;
        break;
    case RINGD_MAX:
        ref = mx;
        break;
    default:
        break;
    }
    if (fabsl(v - ref) <= bound) return true;
    snprintf(why, len, "got %.21Lg (bits 0x%llx), expected %.21Lg within %.3Lg (off by %.3Lg)", v,
             (unsigned long long)got, ref, bound, fabsl(v - ref));
    return false;
}

/* Checks this rank's share of the elements of case k: every rank's bytes
 * equal rank 0's, and rank 0's equal the reference. */
static void verify_slice(ring_job *j, size_t k, int rank)
{
    const ring_case *cs = &j->cases[k];
    size_t sz = ringd_dtype_size(cs->dtype);
    size_t lo = cs->count * (size_t)rank / (size_t)j->n,
           hi = cs->count * (size_t)(rank + 1) / (size_t)j->n;
    char name[160], why[512];

    for (int r = 1; r < j->n; r++) {
        if (memcmp(j->result[r] + lo * sz, j->result[0] + lo * sz, (hi - lo) * sz) == 0) continue;
        size_t i = lo;
        while (i < hi && memcmp(j->result[r] + i * sz, j->result[0] + i * sz, sz) == 0)
            i++;
        harness_fail(&j->fail,
                     "%s: element %zu differs between ranks: rank %d has 0x%llx, rank 0 has 0x%llx",
                     case_name(j, k, name, sizeof name), i, r,
                     (unsigned long long)load(j->result[r], cs->dtype, i),
                     (unsigned long long)load(j->result[0], cs->dtype, i));
    }
    size_t bad = 0, first = 0;
    char first_why[512] = "";
    for (size_t i = lo; i < hi; i++) {
        if (!check_element(j, cs, i, why, sizeof why) && bad++ == 0) {
            first = i;
            memcpy(first_why, why, sizeof why);
        }
    }
    if (bad) {
        harness_fail(&j->fail, "%s: %zu of elements [%zu, %zu) are wrong; element %zu: %s",
                     case_name(j, k, name, sizeof name), bad, lo, hi, first, first_why);
    }
}

static int client_thread(int rank, void *arg)
{
    ring_job *j = arg;
    ringd_client *c = NULL;
    unsigned char *shared = NULL, *heap = NULL;
    char name[160];

    if (rank == j->late_rank) {
        int64_t deadline = harness_now_ms() + 2 * HARNESS_READY_TIMEOUT_MS;
        for (int i = 0; i < 10000 && !atomic_load(&j->late_ready) && harness_now_ms() < deadline;
             i++)
            harness_sleep_ms(10);
    }
    int rc = ringd_connect(j->h->d[rank].socket, &c);
    if (rc < 0) {
        harness_fail(&j->fail, "rank %d: ringd_connect(%s): %s: %s", rank, j->h->d[rank].socket,
                     ringd_errname(rc), ringd_last_error(NULL));
        c = NULL;
    } else if (ringd_rank(c) != rank || ringd_size(c) != j->n || ringd_local_rank(c) != 0 ||
               ringd_local_size(c) != 1) {
        harness_fail(
            &j->fail,
            "client of %s: rank %d of %d, local rank %d of %d; expected rank %d of %d, local "
            "0 of 1",
            j->h->d[rank].name, ringd_rank(c), ringd_size(c), ringd_local_rank(c),
            ringd_local_size(c), rank, j->n);
    }
    if (c) {
        shared = ringd_alloc(c, j->max_bytes);
        if (!shared)
            harness_fail(&j->fail, "rank %d: ringd_alloc(%zu): %s", rank, j->max_bytes,
                         ringd_last_error(c));
    }
    heap = malloc(j->max_bytes);

    for (size_t k = 0; k < j->n_cases; k++) {
        const ring_case *cs = &j->cases[k];
        unsigned char *buf = cs->malloced ? heap : shared;
        bool failed = !c || !buf;
        if (!failed) {
            if (cs->expect == 0) {
                fill_input(case_seed(j, k), rank, j->input[rank], cs->count, cs->dtype, cs->op);
                memcpy(buf, j->input[rank], cs->count * ringd_dtype_size(cs->dtype));
            }
            rc = ringd_allreduce(c, buf, cs->count, cs->dtype, cs->op);
            if (rc != cs->expect) {
                harness_fail(&j->fail, "%s: rank %d: ringd_allreduce returned %s (%s), expected %s",
                             case_name(j, k, name, sizeof name), rank, ringd_errname(rc),
                             ringd_last_error(c), ringd_errname(cs->expect));
                failed = true;
            }
        }
        j->result[rank] = buf;
        /* Everyone stops at the same point if any collective failed: the ring
         * may be out of step after that. */
        int b = harness_barrier_wait(&j->bar, failed, BARRIER_MS);
        if (b < 0)
            harness_fail(&j->fail, "rank %d: other ranks did not finish case %zu within %d ms",
                         rank, k, BARRIER_MS);
        if (b != 0) break;
        if (cs->expect == 0) verify_slice(j, k, rank);
        b = harness_barrier_wait(&j->bar, atomic_load(&j->fail.count) > MAX_FAILURES, BARRIER_MS);
        if (b != 0) break;
        if (rank == 0) atomic_fetch_add(&j->done, 1);
    }
    free(heap);
    if (c) ringd_free(c, shared);
    ringd_close(c);
    return 0;
}

static void job_init(ring_job *j, harness *h, uint64_t seed, ring_case *cases, size_t n_cases)
{
    memset(j, 0, sizeof *j);
    j->h = h;
    j->n = h->n;
    j->seed = seed;
    j->cases = cases;
    j->n_cases = n_cases;
    j->late_rank = -1;
    j->max_bytes = 64;
    for (size_t k = 0; k < n_cases; k++) {
        size_t b = cases[k].count * ringd_dtype_size(cases[k].dtype);
        j->max_bytes = b > j->max_bytes ? b : j->max_bytes;
    }
    for (int r = 0; r < j->n; r++) {
        j->input[r] = calloc(1, j->max_bytes);
        cr_assert_not_null(j->input[r]);
    }
    harness_barrier_init(&j->bar, j->n);
    harness_failures_init(&j->fail);
}

static void job_destroy(ring_job *j)
{
    for (int r = 0; r < j->n; r++)
        free(j->input[r]);
    harness_barrier_destroy(&j->bar);
    harness_failures_destroy(&j->fail);
}

/* Runs every case of j on the started ring, one client thread per host, and
 * asserts that all of them passed. */
static void run_job(ring_job *j, int timeout_ms)
{
    int64_t t0 = harness_now_ms();
    int rc = harness_run_threads(j->h, j->n, client_thread, j, timeout_ms);
    fprintf(stderr, "%d hosts: %zu of %zu collectives in %.1f s, %d failures\n", j->n,
            atomic_load(&j->done), j->n_cases, (double)(harness_now_ms() - t0) / 1000,
            atomic_load(&j->fail.count));
    cr_assert_eq(atomic_load(&j->fail.count), 0, "%d failures; first: %s",
                 atomic_load(&j->fail.count), j->fail.first);
    cr_assert_eq(rc, 0, "%s", j->h->err);
    cr_assert_eq(atomic_load(&j->done), j->n_cases);
}

/* ---- the allreduce matrix ------------------------------------------------------ */

static const ringd_dtype all_dtypes[] = {RINGD_INT8,    RINGD_UINT8,   RINGD_INT32,
                                         RINGD_INT64,   RINGD_FLOAT16, RINGD_BFLOAT16,
                                         RINGD_FLOAT32, RINGD_FLOAT64};
static const ringd_op all_ops[] = {RINGD_SUM, RINGD_MEAN, RINGD_MIN, RINGD_MAX, RINGD_PROD};

#define NDTYPES (sizeof all_dtypes / sizeof all_dtypes[0])
#define NOPS (sizeof all_ops / sizeof all_ops[0])

/* Every count x dtype x op (MEAN on integers must be RINGD_EINVAL), with
 * ringd_alloc() memory and with malloc() memory. */
static size_t matrix_cases(int n, ring_case *out, size_t cap)
{
    size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n + 1, PRIME, BIG_PRIME};
    size_t k = 0;
    for (int m = 0; m < 2; m++) {
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            bool dup = false;
            for (size_t cj = 0; cj < ci; cj++)
                dup = dup || counts[cj] == counts[ci];
            if (dup) continue;
            for (size_t ti = 0; ti < NDTYPES; ti++) {
                for (size_t oi = 0; oi < NOPS; oi++) {
                    ring_case c = {counts[ci], all_dtypes[ti], all_ops[oi], m == 1, 0};
                    if (c.op == RINGD_MEAN && !is_float(c.dtype)) {
                        if (c.count == 0)
                            continue; /* count 0 with MEAN on integers: not specified */
                        c.expect = RINGD_EINVAL;
                    }
                    cr_assert_lt(k, cap);
                    out[k++] = c;
                }
            }
        }
    }
    return k;
}

/* extra_yaml tunes the ring, e.g. a small segment_size so that even the
 * small counts travel in several segments. */
static void check_matrix(int n, const char *extra_yaml)
{
    static ring_case cases[1024];
    char what[64];
    snprintf(what, sizeof what, "allreduce matrix on %d hosts", n);
    uint64_t seed = harness_seed(what);
    size_t n_cases = matrix_cases(n, cases, sizeof cases / sizeof cases[0]);

    char yaml[256];
    snprintf(yaml, sizeof yaml, "%s%s", RING_YAML, extra_yaml ? extra_yaml : "");
    cr_assert_eq(harness_init(&H, n, yaml), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, seed, 100), 0, "%s", H.err);
    ring_job j;
    job_init(&j, &H, seed, cases, n_cases);
    run_job(&j, 800000);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(allreduce, gives_every_rank_the_reference_result_on_1_host)
{
    check_matrix(1, NULL);
}

Test(allreduce, gives_every_rank_the_reference_result_on_2_hosts)
{
    check_matrix(2, "segment_size: 4KiB\n");
}

Test(allreduce, gives_every_rank_the_reference_result_on_3_hosts)
{
    check_matrix(3, NULL);
}

Test(allreduce, gives_every_rank_the_reference_result_on_4_hosts)
{
    check_matrix(4, "segment_size: 64KiB\n");
}

Test(allreduce, gives_every_rank_the_reference_result_on_5_hosts)
{
    check_matrix(5, NULL);
}

Test(allreduce, mean_on_integer_types_is_einval_and_the_ring_goes_on)
{
    ring_case cases[2 * 4 + 1];
    size_t k = 0;
    for (size_t ti = 0; ti < NDTYPES; ti++) {
        if (is_float(all_dtypes[ti])) continue;
        cases[k++] = (ring_case){100, all_dtypes[ti], RINGD_MEAN, false, RINGD_EINVAL};
        cases[k++] = (ring_case){100, all_dtypes[ti], RINGD_MEAN, true, RINGD_EINVAL};
    }
    cases[k++] = (ring_case){1000, RINGD_INT32, RINGD_SUM, false, 0};
    uint64_t seed = harness_seed("mean on integers");
    cr_assert_eq(harness_init(&H, 2, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, seed, 50), 0, "%s", H.err);
    ring_job j;
    job_init(&j, &H, seed, cases, k);
    run_job(&j, 120000);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- single host ------------------------------------------------------------------- */

Test(allreduce, on_a_single_host_returns_the_input_and_mean_divides_by_1)
{
    cr_assert_eq(harness_init(&H, 1, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, 1, 0), 0, "%s", H.err);
    ringd_client *c;
    int rc = ringd_connect(H.d[0].socket, &c);
    cr_assert_eq(rc, 0, "ringd_connect: %s", ringd_last_error(NULL));
    cr_assert_eq(ringd_rank(c), 0);
    cr_assert_eq(ringd_size(c), 1);

    enum { COUNT = 4099 };
    unsigned char *in = malloc(COUNT * 8), *heap = malloc(COUNT * 8),
                  *shared = ringd_alloc(c, COUNT * 8);
    cr_assert(in && heap && shared, "ringd_alloc: %s", ringd_last_error(c));
    for (size_t ti = 0; ti < NDTYPES; ti++) {
        for (size_t oi = 0; oi < NOPS; oi++) {
            ringd_dtype t = all_dtypes[ti];
            ringd_op op = all_ops[oi];
            if (op == RINGD_MEAN && !is_float(t)) continue;
            fill_input(mix(ti * NOPS + oi), 0, in, COUNT, t, op);
            for (int m = 0; m < 2; m++) {
                unsigned char *buf = m ? heap : shared;
                memcpy(buf, in, COUNT * ringd_dtype_size(t));
                rc = ringd_allreduce(c, buf, COUNT, t, op);
                cr_assert_eq(rc, 0, "%s %s: %s", ringd_dtype_name(t), ringd_op_name(op),
                             ringd_last_error(c));
                cr_assert_eq(memcmp(buf, in, COUNT * ringd_dtype_size(t)), 0,
                             "%s %s on 1 host (%s memory) changed the input", ringd_dtype_name(t),
                             ringd_op_name(op), m ? "malloc" : "ringd_alloc");
            }
        }
    }
    free(in);
    free(heap);
    if (c) ringd_free(c, shared);
    ringd_close(c);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- determinism ---------------------------------------------------------------------- */

enum { DET_COUNT = 100003, DET_RUNS = 20, DET_HOSTS = 4 };

typedef struct {
    harness *h;
    uint64_t seed;
    ring_job *j;                        /* for harness_fail() and the barrier */
    unsigned char *first[DET_HOSTS][2]; /* each rank's result of run 0, per dtype */
} det_job;

static int det_thread(int rank, void *arg)
{
    det_job *d = arg;
    ring_job *j = d->j;
    static const ringd_dtype types[2] = {RINGD_FLOAT32, RINGD_BFLOAT16};
    ringd_client *c = NULL;
    int rc = ringd_connect(d->h->d[rank].socket, &c);
    if (rc < 0) {
        harness_fail(&j->fail, "rank %d: ringd_connect: %s", rank, ringd_last_error(NULL));
        c = NULL;
    }
    size_t bytes = DET_COUNT * 4;
    unsigned char *in = malloc(bytes), *buf = c ? ringd_alloc(c, bytes) : NULL;
    bool failed = !in || !buf;
    /* A rank that failed still meets the others at the barrier, so that they
     * stop instead of waiting for it. */
    for (int ti = 0; ti < 2; ti++) {
        ringd_dtype t = types[ti];
        size_t sz = ringd_dtype_size(t);
        d->first[rank][ti] = calloc(1, bytes);
        failed = failed || !d->first[rank][ti];
        if (!failed) fill_input(mix(d->seed + (uint64_t)ti), rank, in, DET_COUNT, t, RINGD_SUM);
        for (int run = 0; run < DET_RUNS && !failed; run++) {
            memcpy(buf, in, DET_COUNT * sz);
            rc = ringd_allreduce(c, buf, DET_COUNT, t, RINGD_SUM);
            if (rc < 0) {
                harness_fail(&j->fail, "rank %d: %s sum run %d: %s", rank, ringd_dtype_name(t), run,
                             ringd_last_error(c));
                failed = true;
                break;
            }
            if (run == 0)
                memcpy(d->first[rank][ti], buf, DET_COUNT * sz);
            else if (memcmp(d->first[rank][ti], buf, DET_COUNT * sz) != 0)
                harness_fail(&j->fail, "rank %d: %s sum run %d differs from run 0", rank,
                             ringd_dtype_name(t), run);
        }
        if (harness_barrier_wait(&j->bar, failed, BARRIER_MS) != 0) break;
        if (rank > 0 && memcmp(d->first[rank][ti], d->first[0][ti], DET_COUNT * sz) != 0)
            harness_fail(&j->fail, "rank %d: %s sum differs from rank 0's", rank,
                         ringd_dtype_name(t));
    }
    free(in);
    if (c) ringd_free(c, buf);
    ringd_close(c);
    return 0;
}

Test(allreduce, float_sum_gives_the_same_bits_on_every_run_and_rank)
{
    uint64_t seed = harness_seed("determinism");
    cr_assert_eq(harness_init(&H, DET_HOSTS, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, seed, 100), 0, "%s", H.err);
    ring_job j;
    job_init(&j, &H, seed, NULL, 0);
    det_job d = {.h = &H, .seed = seed, .j = &j};
    int rc = harness_run_threads(&H, DET_HOSTS, det_thread, &d, 300000);
    for (int r = 0; r < DET_HOSTS; r++)
        for (int t = 0; t < 2; t++)
            free(d.first[r][t]);
    cr_assert_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_assert_eq(rc, 0, "%s", H.err);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- ring formation -------------------------------------------------------------------- */

/* A few collectives checked against the reference: enough to show the ring works. */
static size_t smoke_cases(ring_case *out)
{
    size_t k = 0;
    out[k++] = (ring_case){1, RINGD_INT32, RINGD_SUM, false, 0};
    out[k++] = (ring_case){PRIME, RINGD_FLOAT32, RINGD_SUM, false, 0};
    out[k++] = (ring_case){PRIME, RINGD_INT64, RINGD_MAX, true, 0};
    out[k++] = (ring_case){PRIME, RINGD_FLOAT16, RINGD_MEAN, false, 0};
    return k;
}

Test(ring, forms_when_daemons_start_in_reverse_order_with_a_head_start)
{
    enum { N = 4 };
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    /* h3 first, alone for 1.5 s (retrying its connection to h0), then the rest. */
    int order[N] = {3, 2, 1, 0}, delay[N] = {0, 1500, 0, 0};
    cr_assert_eq(harness_start_in_order(&H, order, delay, N), 0, "%s", H.err);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);
    ring_case cases[8];
    size_t n_cases = smoke_cases(cases);
    ring_job j;
    job_init(&j, &H, harness_seed("reverse order"), cases, n_cases);
    run_job(&j, 200000);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(ring, forms_over_ipv6_and_host_names)
{
    enum { N = 3 };
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    /* The same hosts, addressed as an IPv6 literal, a name and IPv4. */
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "cluster: test\n%shosts:\n"
             "  - {name: h0, address: \"[::1]:%u\", socket: %s}\n"
             "  - {name: h1, address: \"localhost:%u\", socket: %s}\n"
             "  - {name: h2, address: \"127.0.0.1:%u\", socket: %s}\n",
             RING_YAML, H.d[0].port, H.d[0].socket, H.d[1].port, H.d[1].socket, H.d[2].port,
             H.d[2].socket);
    FILE *f = fopen(H.config, "w");
    cr_assert_not_null(f);
    fputs(yaml, f);
    fclose(f);
    cr_assert_eq(harness_start(&H, harness_seed("ipv6"), 100), 0, "%s", H.err);
    ring_case cases[8];
    size_t n_cases = smoke_cases(cases);
    ring_job j;
    job_init(&j, &H, harness_seed("ipv6 job"), cases, n_cases);
    run_job(&j, 200000);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

Test(ring, allreduce_waits_for_a_daemon_that_starts_late)
{
    enum { N = 3 };
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    int order[N - 1] = {0, 1};
    cr_assert_eq(harness_start_in_order(&H, order, NULL, N - 1), 0, "%s", H.err);
    cr_assert_eq(harness_wait_all_ready(&H, HARNESS_READY_TIMEOUT_MS), 0, "%s", H.err);

    ring_case cases[8];
    size_t n_cases = smoke_cases(cases);
    ring_job j;
    job_init(&j, &H, harness_seed("late daemon"), cases, n_cases);
    j.late_rank = N - 1;
    harness_threads t;
    cr_assert_eq(harness_threads_start(&H, &t, N, client_thread, &j), 0, "%s", H.err);
    /* The clients of h0 and h1 are now blocked in their first allreduce. */
    harness_sleep_ms(1000);
    int rc = harness_spawn(&H, N - 1);
    if (rc == 0) rc = harness_wait_ready(&H, N - 1, HARNESS_READY_TIMEOUT_MS);
    atomic_store(&j.late_ready, true);
    int jrc = harness_threads_join(&H, &t, 200000);
    cr_assert_eq(rc, 0, "%s", H.err);
    cr_assert_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_assert_eq(jrc, 0, "%s", H.err);
    cr_assert_eq(atomic_load(&j.done), n_cases);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- NaN ----------------------------------------------------------------------------------- */

typedef struct {
    harness *h;
    ring_job *j;
} nan_job;

/* Rank r puts a NaN in element r; every other element is a plain number. */
static int nan_thread(int rank, void *arg)
{
    nan_job *nj = arg;
    ring_job *j = nj->j;
    static const ringd_dtype types[] = {RINGD_FLOAT16, RINGD_BFLOAT16, RINGD_FLOAT32,
                                        RINGD_FLOAT64};
    static const ringd_op ops[] = {RINGD_MIN, RINGD_MAX};
    enum { COUNT = 64 };
    ringd_client *c = NULL;
    if (ringd_connect(nj->h->d[rank].socket, &c) < 0) {
        harness_fail(&j->fail, "rank %d: ringd_connect: %s", rank, ringd_last_error(NULL));
        return -1;
    }
    unsigned char buf[COUNT * 8];
    for (size_t ti = 0; ti < 4; ti++) {
        for (size_t oi = 0; oi < 2; oi++) {
            ringd_dtype t = types[ti];
            for (size_t i = 0; i < COUNT; i++)
                store(buf, t, i,
                      i == (size_t)rank ? nan_bits(t) : encode_quarter(t, (int)(i % 33) - 16));
            int rc = ringd_allreduce(c, buf, COUNT, t, ops[oi]);
            if (rc < 0) {
                harness_fail(&j->fail, "rank %d: %s %s: %s", rank, ringd_dtype_name(t),
                             ringd_op_name(ops[oi]), ringd_last_error(c));
                ringd_close(c);
                return -1;
            }
            for (size_t i = 0; i < COUNT; i++) {
                long double v = decode(t, load(buf, t, i)),
                            want = decode(t, encode_quarter(t, (int)(i % 33) - 16));
                bool ok = i < (size_t)j->n ? isnan(v) : v == want;
                if (!ok)
                    harness_fail(&j->fail, "rank %d: %s %s: element %zu is %Lg, expected %s", rank,
                                 ringd_dtype_name(t), ringd_op_name(ops[oi]), i, v,
                                 i < (size_t)j->n ? "NaN" : "its input");
            }
        }
    }
    ringd_close(c);
    return 0;
}

Test(allreduce, a_nan_in_any_input_gives_nan_for_min_and_max)
{
    enum { N = 3 };
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("nan"), 50), 0, "%s", H.err);
    ring_job j;
    job_init(&j, &H, 0, NULL, 0);
    nan_job nj = {&H, &j};
    int rc = harness_run_threads(&H, N, nan_thread, &nj, 120000);
    cr_assert_eq(atomic_load(&j.fail.count), 0, "%s", j.fail.first);
    cr_assert_eq(rc, 0, "%s", H.err);
    job_destroy(&j);
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- bad configs ---------------------------------------------------------------------------- */

/* True if msg contains "file:line:" (any line number when line is 0). */
static bool has_file_line(const char *msg, const char *file, int line)
{
    size_t fl = strlen(file);
    for (const char *p = strstr(msg, file); p; p = strstr(p + 1, file)) {
        const char *q = p + fl;
        if (*q != ':') continue;
        char *end;
        long v = strtol(q + 1, &end, 10);
        if (end > q + 1 && *end == ':' && (line == 0 || v == line)) return true;
    }
    return false;
}

/* Runs ringd on config (as --host host) and asserts that it exits with status
 * 2 and a single line on stderr that contains want (if not NULL). */
static void expect_rejected(const char *config, const char *host, const char *file, int line,
                            const char *want)
{
    char *argv[] = {(char *)RINGD_BIN, (char *)"--config", (char *)config,
                    (char *)"--host",  (char *)host,       NULL};
    char out[4096], err[8192];
    int status;
    cr_assert_eq(harness_run(&H, argv, 20000, &status, out, sizeof out, err, sizeof err), 0, "%s",
                 H.err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2,
              "ringd on %s: expected exit status 2, got %s %d; stderr:\n%s", file,
              WIFEXITED(status) ? "exit status" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), err);
    fprintf(stderr, "ringd on %s: %s", file, err);
    size_t len = strlen(err);
    while (len > 0 && err[len - 1] == '\n')
        err[--len] = '\0';
    cr_assert(len > 0, "ringd on %s: exit status 2 but nothing on stderr", file);
    cr_assert_null(strchr(err, '\n'), "ringd on %s: expected a one-line message, got:\n%s", file,
                   err);
    if (line >= 0)
        cr_assert(has_file_line(err, file, line), "ringd on %s: message lacks \"%s:%d:\": %s", file,
                  file, line, err);
    if (want)
        cr_assert_not_null(strstr(err, want), "ringd on %s: message lacks \"%s\": %s", file, want,
                           err);
}

Test(ringd, rejects_a_bad_config_with_status_2_and_a_file_line_message)
{
    cr_assert_eq(harness_init(&H, 1, NULL), 0, "%s", H.err);
    char host_block[512], text[1024], path[PATH_MAX];
    snprintf(host_block, sizeof host_block,
             "hosts:\n  - name: h0\n    address: 127.0.0.1:%u\n    socket: %s\n",
             (unsigned)H.d[0].port, H.d[0].socket);

    /* An unknown key on line 3. */
    snprintf(text, sizeof text, "cluster: test\nlocal_clients: 1\nsegment_sise: 64KiB\n%s",
             host_block);
    cr_assert_eq(harness_write_file(&H, "unknown-key.yaml", text, path, sizeof path), 0, "%s",
                 H.err);
    expect_rejected(path, "h0", "unknown-key.yaml", 3, "segment_sise");

    /* An address without a port on line 6. */
    snprintf(text, sizeof text,
             "cluster: test\nlocal_clients: 1\nhosts:\n  - name: h0\n    socket: %s\n"
             "    address: 127.0.0.1\n",
             H.d[0].socket);
    cr_assert_eq(harness_write_file(&H, "no-port.yaml", text, path, sizeof path), 0, "%s", H.err);
    expect_rejected(path, "h0", "no-port.yaml", 6, NULL);

    /* A size with an unknown unit on line 2. */
    snprintf(text, sizeof text, "cluster: test\nsegment_size: 12 parsecs\n%s", host_block);
    cr_assert_eq(harness_write_file(&H, "bad-size.yaml", text, path, sizeof path), 0, "%s", H.err);
    expect_rejected(path, "h0", "bad-size.yaml", 2, NULL);

    /* Not YAML at all: an unclosed flow sequence. */
    snprintf(text, sizeof text, "cluster: test\nhosts: [ {name: h0\n");
    cr_assert_eq(harness_write_file(&H, "syntax.yaml", text, path, sizeof path), 0, "%s", H.err);
    expect_rejected(path, "h0", "syntax.yaml", 0, NULL);
}

Test(ringd, rejects_a_host_name_missing_from_the_config_with_status_2)
{
    cr_assert_eq(harness_init(&H, 2, RING_YAML), 0, "%s", H.err);
    expect_rejected(H.config, "nosuchhost", "ringd.yaml", -1, "nosuchhost");
}

/* ---- ringctl ------------------------------------------------------------------------------------
 */

/* Finds the line "<side> <name>: <state>" of ringctl status output. */
static bool find_link(const char *out, const char *side, char *name, size_t namelen, char *state,
                      size_t statelen)
{
    size_t sl = strlen(side);
    const char *p = out;
    for (int i = 0; i < 100 && p && *p; i++) {
        size_t n = strcspn(p, "\n");
        if (n > sl && strncmp(p, side, sl) == 0 && p[sl] == ' ') {
            const char *q = p + sl + strspn(p + sl, " ");
            const char *colon = memchr(q, ':', n - (size_t)(q - p));
            if (!colon) return false;
            snprintf(name, namelen, "%.*s", (int)(colon - q), q);
            /* "up for 2m 3s", "down for 5s: connection refused": the first word. */
            const char *v = colon + 1 + strspn(colon + 1, " ");
            size_t w = strcspn(v, " :\n");
            snprintf(state, statelen, "%.*s", (int)w, v);
            return true;
        }
        p = p[n] ? p + n + 1 : NULL;
    }
    return false;
}

Test(ringctl, status_shows_both_neighbours_up_on_a_formed_ring)
{
    enum { N = 3 };
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("ringctl status"), 50), 0, "%s", H.err);
    /* One collective proves the ring has formed. */
    ring_case cases[1] = {{1, RINGD_INT32, RINGD_SUM, false, 0}};
    ring_job j;
    job_init(&j, &H, 1, cases, 1);
    run_job(&j, 120000);
    job_destroy(&j);

    for (int i = 0; i < N; i++) {
        char *argv[] = {(char *)RINGCTL_BIN, (char *)"--socket", H.d[i].socket, (char *)"status",
                        NULL};
        char out[8192], err[4096];
        int status;
        cr_assert_eq(harness_run(&H, argv, 20000, &status, out, sizeof out, err, sizeof err), 0,
                     "%s", H.err);
        fprintf(stderr, "ringctl status of %s:\n%s", H.d[i].name, out);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ringctl status on %s failed: %s",
                  H.d[i].name, err);
        /* The left neighbour of hi is h(i-1), the right one h(i+1), mod N;
         * ringctl prints them as "left  h2: up for 3s" and "right h1: up for 3s". */
        const char *sides[2] = {"left", "right"};
        const char *names[2] = {H.d[(i + N - 1) % N].name, H.d[(i + 1) % N].name};
        for (int s = 0; s < 2; s++) {
            char name[64] = "", state[32] = "";
            if (!find_link(out, sides[s], name, sizeof name, state, sizeof state))
                cr_assert_fail("ringctl status of %s: no \"%s\" line:\n%s", H.d[i].name, sides[s],
                               out);
            cr_assert_str_eq(name, names[s],
                             "ringctl status of %s: %s neighbour is %s, expected %s", H.d[i].name,
                             sides[s], name, names[s]);
            cr_assert_str_eq(state, "up",
                             "ringctl status of %s: %s neighbour %s is %s, expected up",
                             H.d[i].name, sides[s], name, state);
        }
    }
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

/* ---- stragglers ---- */

#define LATE_HOST 2
#define LATE_MS 300

typedef struct {
    harness_barrier bar;
    char why[HARNESS_MAX_HOSTS][256];
} late_run;

/* Every rank allreduces twice (the ring forms, then the measured one); rank
 * LATE_HOST submits the second LATE_MS after the others. */
static int late_thread(int idx, void *arg)
{
    late_run *lr = arg;
    ringd_client *c = NULL;
    if (ringd_connect(H.d[idx].socket, &c) < 0) {
        snprintf(lr->why[idx], sizeof lr->why[idx], "cannot connect");
        harness_barrier_wait(&lr->bar, true, 60000);
        return -1;
    }
    float *buf = ringd_alloc(c, 4096 * sizeof *buf);
    int rc = buf ? 0 : -1;
    for (int round = 0; round < 2 && rc == 0; round++) {
        for (size_t k = 0; k < 4096; k++)
            buf[k] = (float)idx;
        if (harness_barrier_wait(&lr->bar, false, 60000) != 0) rc = -1;
        if (rc == 0 && round == 1 && idx == LATE_HOST) harness_sleep_ms(LATE_MS);
        if (rc == 0) rc = ringd_allreduce(c, buf, 4096, RINGD_FLOAT32, RINGD_SUM);
        if (rc != 0)
            snprintf(lr->why[idx], sizeof lr->why[idx], "round %d: %s", round, ringd_last_error(c));
    }
    ringd_close(c);
    return rc;
}

Test(ringctl, status_names_the_host_that_came_last_on_every_host)
{
    enum { N = 4 };
    static late_run lr;
    cr_assert_eq(harness_init(&H, N, RING_YAML), 0, "%s", H.err);
    cr_assert_eq(harness_start(&H, harness_seed("straggler"), 50), 0, "%s", H.err);
    harness_barrier_init(&lr.bar, N);
    int rc = harness_run_threads(&H, N, late_thread, &lr, 120000);
    for (int i = 0; i < N; i++)
        cr_expect_str_empty(lr.why[i], "rank %d: %s", i, lr.why[i]);
    cr_assert_eq(rc, 0);
    harness_barrier_destroy(&lr.bar);

    /* Every host worked out the same straggler, from every host's wait. */
    for (int i = 0; i < N; i++) {
        char *argv[] = {(char *)RINGCTL_BIN, (char *)"--socket", H.d[i].socket,
                        (char *)"status",    (char *)"--json",   NULL};
        char out[8192], err[4096];
        int status;
        cr_assert_eq(harness_run(&H, argv, 20000, &status, out, sizeof out, err, sizeof err), 0,
                     "%s", H.err);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", err);
        /* The measured allreduce is the last of "recent". */
        const char *last = strstr(out, "\"seq\":1,");
        cr_assert_not_null(last, "%s: no collective #1 in %s", H.d[i].name, out);
        cr_expect_not_null(strstr(last, "\"last\":\"h2\""), "%s: %s", H.d[i].name, last);
        const char *sp = strstr(last, "\"spread_us\":");
        cr_assert_not_null(sp);
        long spread = atol(sp + strlen("\"spread_us\":"));
        cr_expect(spread >= (LATE_MS - 100) * 1000L && spread < 10L * LATE_MS * 1000,
                  "%s: h2 came %ld us after the first, expected about %d ms", H.d[i].name, spread,
                  LATE_MS);
    }
    cr_assert_eq(harness_stop(&H), 0, "%s", H.err);
}

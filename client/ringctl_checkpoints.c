/*
 * ringctl_checkpoints.c - `ringctl checkpoints DIR`: reads the layout
 * ringd.checkpoint writes (client/python/ringd/_ckpt_files.py): DIR/step-N/
 * holds each rank's part, rank-RRRRR.ckpt, and one manifest per host,
 * manifest-ranks-FFFFF-LLLLL, written last, listing the size and SHA-256 of
 * the parts of ranks F..L:
 *
 *   ringd-checkpoint-manifest 1
 *   step 120
 *   world 4
 *   ranks 2 3
 *   hostname node2
 *   file rank-00002.ckpt 2 1048640 9f86d081884c7d65...
 *   file rank-00003.ckpt 3 1048640 60303ae22b998861...
 *   end
 *
 * A step is complete when manifests cover every rank and every file they
 * list matches; with one directory per host, only this host's manifest is
 * here, and the step is complete here. It talks to no daemon; SHA-256 comes
 * from libcrypto.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "ringctl.h"
#include "ringctl_checkpoints.h"

static const char usage_checkpoints[] =
    "Usage: ringctl checkpoints [--sizes] DIR\n"
    "\n"
    "Lists the steps saved in DIR by ringd.checkpoint, newest first, each with\n"
    "what this host can tell of it:\n"
    "  complete       manifests cover every rank and every file matches them\n"
    "  complete here  the manifests here (this host's, when each host has its own\n"
    "                 directory) cover their ranks and their files match\n"
    "  incomplete     no manifest, or parts of ranks that no manifest lists: a\n"
    "                 save that did not finish, never a recovery point\n"
    "  damaged        the first file that does not match its manifest, and how\n"
    "Each file's size and SHA-256 are checked against its manifest. Talks to no\n"
    "daemon.\n"
    "\n"
    "Options:\n"
    "  -z, --sizes        check sizes only, not SHA-256 (fast on large checkpoints)\n"
    "  -h, --help         show this help\n"
    "\n"
    "Exit status: 0 listed (whatever the steps' state), 1 DIR unreadable, 2 usage.\n";

#define CKPT_MAX_WORLD (1 << 20)
#define CKPT_MAX_MANIFEST (1 << 20)
#define CKPT_PROBLEM 512

typedef struct {
    uint64_t step;
    int world;      /* ranks of the job, from the manifests; 0: none read */
    uint8_t *ranks; /* per rank: CKPT_NONE, CKPT_PART (a file, no manifest), CKPT_COMMITTED */
    int files;
    uint64_t bytes;
    char problem[CKPT_PROBLEM]; /* the first file that is wrong, and how */
} ckpt_step;

enum { CKPT_NONE, CKPT_PART, CKPT_COMMITTED };

static void ckpt_fail(ckpt_step *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ckpt_fail(ckpt_step *st, const char *fmt, ...)
{
    if (st->problem[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->problem, sizeof st->problem, fmt, ap);
    va_end(ap);
}

/* The number that s holds in full (digits only), or -1. */
static int64_t ckpt_number(const char *s, size_t len)
{
    uint64_t v = 0;
    if (len == 0 || len > 18) return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    return (int64_t)v;
}

/* dir/name into path; -1 and ENAMETOOLONG if it does not fit. */
static int ckpt_join(char *path, size_t size, const char *dir, const char *name)
{
    int n = snprintf(path, size, "%s/%s", dir, name);
    if (n >= 0 && (size_t)n < size) return 0;
    errno = ENAMETOOLONG;
    return -1;
}

/* SHA-256 of the file at path as 64 hex digits, and its size; -1 and errno. */
static int ckpt_hash(const char *path, char hex[65], uint64_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    static unsigned char buf[1 << 20];
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    size_t n;
    int rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0 : -1;
    *size = 0;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0) {
        *size += n;
        if (!EVP_DigestUpdate(ctx, buf, n)) rc = -1;
    }
    if (rc == 0 && ferror(f)) rc = -1;
    if (rc == 0 && !EVP_DigestFinal_ex(ctx, md, &mdlen)) rc = -1;
    int saved = errno;
    EVP_MD_CTX_free(ctx);
    fclose(f);
    for (unsigned i = 0; rc == 0 && i < mdlen; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    errno = saved;
    return rc;
}

/* Checks one file line of a manifest ("NAME RANK SIZE SHA256") against the
 * file in sdir; marks its rank committed. */
static void ckpt_check_file(ckpt_step *st, const char *sdir, const char *mname, const char *line,
                            int first, int last, int hash)
{
    char name[64], sha[65], path[4096], got[65] = "";
    int rank;
    uint64_t size, have;
    struct stat sb;
    if (sscanf(line, "%63s %d %" SCNu64 " %64s", name, &rank, &size, sha) != 4 ||
        strlen(sha) != 64 || strchr(name, '/') || rank < first || rank > last) {
        ckpt_fail(st, "%s/%s: bad line 'file %s'", sdir, mname, line);
        return;
    }
    if (ckpt_join(path, sizeof path, sdir, name) < 0 || stat(path, &sb) < 0) {
        ckpt_fail(st, "%s: %s", path, strerror(errno));
        return;
    }
    have = (uint64_t)sb.st_size;
    if (have == size && hash && ckpt_hash(path, got, &have) < 0) {
        ckpt_fail(st, "%s: %s", path, strerror(errno));
        return;
    }
    if (have != size)
        ckpt_fail(st, "%s: %" PRIu64 " bytes, %s says %" PRIu64, path, have, mname, size);
    else if (hash && strcmp(got, sha) != 0)
        ckpt_fail(st, "%s: SHA-256 %.16s... differs from %.16s... in %s", path, got, sha, mname);
    st->ranks[rank] = CKPT_COMMITTED;
    st->files++;
    st->bytes += size;
}

/* Reads the manifest mname of sdir into st. */
static void ckpt_read_manifest(ckpt_step *st, const char *sdir, const char *mname, int hash)
{
    char path[4096];
    FILE *f = ckpt_join(path, sizeof path, sdir, mname) == 0 ? fopen(path, "r") : NULL;
    char *text = malloc(CKPT_MAX_MANIFEST + 1);
    size_t len = f && text ? fread(text, 1, CKPT_MAX_MANIFEST, f) : 0;
    if (!f || !text) {
        ckpt_fail(st, "%s: %s", path, f ? "out of memory" : strerror(errno));
        goto out;
    }
    text[len] = '\0';
    uint64_t step = UINT64_MAX;
    int world = -1, first = -1, last = -1, ended = 0, lineno = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && !ended;
         line = strtok_r(NULL, "\n", &save), lineno++) {
        if (lineno == 0) {
            if (strcmp(line, "ringd-checkpoint-manifest 1") != 0) break;
        } else if (strcmp(line, "end") == 0) {
            ended = 1;
        } else if (sscanf(line, "step %" SCNu64, &step) == 1 ||
                   sscanf(line, "world %d", &world) == 1 || strncmp(line, "hostname ", 9) == 0) {
            continue;
        } else if (sscanf(line, "ranks %d %d", &first, &last) == 2) {
            if (world < 1 || world > CKPT_MAX_WORLD || first < 0 || last < first || last >= world)
                break;
            if (!st->ranks) {
                st->world = world;
                st->ranks = calloc((size_t)world, 1);
                if (!st->ranks) break;
            } else if (world != st->world) {
                break;
            }
        } else if (strncmp(line, "file ", 5) == 0 && st->ranks && first >= 0) {
            ckpt_check_file(st, sdir, mname, line + 5, first, last, hash);
        } else {
            break;
        }
    }
    if (!ended)
        ckpt_fail(st, "%s: not a complete ringd checkpoint manifest (line %d)", path, lineno + 1);
    else if (step != st->step)
        ckpt_fail(st, "%s: written for step %" PRIu64, path, step);
    for (int r = first; ended && st->ranks && r >= 0 && r <= last; r++)
        if (st->ranks[r] != CKPT_COMMITTED) ckpt_fail(st, "%s: lists no file of rank %d", path, r);
out:
    if (f) fclose(f);
    free(text);
}

/* Prints the ranks r with st->ranks[r] == want as "0, 2-3". */
static void ckpt_put_ranks(const ckpt_step *st, int want)
{
    const char *sep = "";
    for (int r = 0; r < st->world; r++) {
        if (st->ranks[r] != want) continue;
        int end = r;
        while (end + 1 < st->world && st->ranks[end + 1] == want)
            end++;
        printf(end > r ? "%s%d-%d" : "%s%d", sep, r, end);
        sep = ", ";
        r = end;
    }
}

/* Reads step directory sdir and prints its line. */
static void ckpt_list_step(const char *sdir, uint64_t step, int hash)
{
    ckpt_step st = {.step = step};
    DIR *d = opendir(sdir);
    struct dirent *e;
    if (!d) ckpt_fail(&st, "%s: %s", sdir, strerror(errno));
    /* The manifests first: they say how many ranks there are. */
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "manifest-ranks-", 15) == 0 && !strstr(e->d_name, ".tmp-"))
            ckpt_read_manifest(&st, sdir, e->d_name, hash);
    if (d) rewinddir(d);
    /* Then the parts, finished or not, of ranks that no manifest lists. */
    while (d && st.ranks && (e = readdir(d))) {
        const char *num = e->d_name + 5;
        size_t len = strcspn(num, ".");
        int64_t r = strncmp(e->d_name, "rank-", 5) == 0 && strncmp(num + len, ".ckpt", 5) == 0
                        ? ckpt_number(num, len)
                        : -1;
        if (r >= 0 && r < st.world && st.ranks[r] == CKPT_NONE) st.ranks[r] = CKPT_PART;
    }
    if (d) closedir(d);

    int committed = 0, partial = 0;
    for (int r = 0; r < st.world; r++) {
        committed += st.ranks[r] == CKPT_COMMITTED;
        partial += st.ranks[r] == CKPT_PART;
    }
    printf("step %" PRIu64 ": ", step);
    if (st.problem[0]) {
        printf("damaged: ");
        ringctl_put_text(st.problem);
    } else if (!st.ranks) {
        printf("incomplete: no manifest (a save that did not finish)");
    } else if (partial) {
        printf("incomplete: ranks ");
        ckpt_put_ranks(&st, CKPT_COMMITTED);
        printf(" of %d committed; no manifest for rank%s ", st.world, partial > 1 ? "s" : "");
        ckpt_put_ranks(&st, CKPT_PART);
    } else {
        printf(committed == st.world ? "complete: ranks " : "complete here: ranks ");
        ckpt_put_ranks(&st, CKPT_COMMITTED);
        printf(" of %d, %d file%s, ", st.world, st.files, st.files == 1 ? "" : "s");
        ringctl_put_bytes(st.bytes);
        if (committed < st.world) printf("; the other ranks' manifests are on their hosts");
    }
    putchar('\n');
    free(st.ranks);
}

typedef struct {
    uint64_t step;
    char name[32]; /* step-N, as found */
} ckpt_entry;

static int cmp_step_desc(const void *a, const void *b)
{
    uint64_t x = ((const ckpt_entry *)a)->step, y = ((const ckpt_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_command(int argc, char **argv)
{
    static const struct option opts[] = {
        {"sizes", no_argument, NULL, 'z'}, {"help", no_argument, NULL, 'h'}, {0}};
    int hash = 1, ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+zh", opts, NULL)) != -1) {
        switch (ch) {
        case 'z':
            hash = 0;
            break;
        case 'h':
            fputs(usage_checkpoints, stdout);
            return EXIT_OK;
        default:
            return ringctl_usage_error("checkpoints", "invalid option for checkpoints");
        }
    }
    if (optind >= argc) return ringctl_usage_error("checkpoints", "missing DIR");
    if (optind + 1 < argc)
        return ringctl_usage_error("checkpoints", "unexpected argument '%s'", argv[optind + 1]);
    const char *dir = argv[optind];
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "ringctl: checkpoints: cannot open %s: %s\n", dir, strerror(errno));
        return EXIT_FAIL;
    }
    ckpt_entry *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t step = strncmp(e->d_name, "step-", 5) == 0
                           ? ckpt_number(e->d_name + 5, strlen(e->d_name + 5))
                           : -1;
        if (step < 0 || strlen(e->d_name) >= sizeof steps->name) continue;
        if (n == cap) {
            ckpt_entry *more = realloc(steps, (cap = cap ? 2 * cap : 64) * sizeof *steps);
            if (!more) {
                fprintf(stderr, "ringctl: checkpoints: out of memory\n");
                free(steps);
                closedir(d);
                return EXIT_FAIL;
            }
            steps = more;
        }
        steps[n].step = (uint64_t)step;
        memcpy(steps[n++].name, e->d_name, strlen(e->d_name) + 1);
    }
    closedir(d);
    if (n == 0) printf("no checkpoints in %s\n", dir);
    qsort(steps, n, sizeof *steps, cmp_step_desc);
    for (size_t i = 0; i < n; i++) {
        char sdir[4096];
        if (ckpt_join(sdir, sizeof sdir, dir, steps[i].name) < 0) {
            fprintf(stderr, "ringctl: checkpoints: %s: path too long\n", dir);
            free(steps);
            return EXIT_FAIL;
        }
        ckpt_list_step(sdir, steps[i].step, hash);
    }
    free(steps);
    return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
}

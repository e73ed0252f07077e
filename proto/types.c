/*
 * types.c - names and sizes of the public enums of ringd.h: error codes,
 * dtypes, ops. Linked into both the daemon and the client library, so that
 * both print and parse the same names.
 */
#include <strings.h>

#include "ringd.h"

const char *ringd_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define X(name, value, desc)                                                                       \
    case value:                                                                                    \
        return desc;
        RINGD_ERRNO_MAP(X)
#undef X
    }
    return "unknown error";
}

const char *ringd_errname(int err)
{
    switch (err) {
    case 0:
        return "RINGD_OK";
#define X(name, value, desc)                                                                       \
    case value:                                                                                    \
        return "RINGD_" #name;
        RINGD_ERRNO_MAP(X)
#undef X
    }
    return "RINGD_E?";
}

/* Indexed by ringd_dtype and ringd_op; the first name is the canonical one. */
static const struct {
    const char *name;
    size_t size;
} dtypes[RINGD_DTYPE_COUNT] = {
    [RINGD_INT8] = {"int8", 1},       [RINGD_UINT8] = {"uint8", 1},
    [RINGD_INT32] = {"int32", 4},     [RINGD_INT64] = {"int64", 8},
    [RINGD_FLOAT16] = {"float16", 2}, [RINGD_BFLOAT16] = {"bfloat16", 2},
    [RINGD_FLOAT32] = {"float32", 4}, [RINGD_FLOAT64] = {"float64", 8},
};

static const char *const ops[RINGD_OP_COUNT] = {
    [RINGD_SUM] = "sum", [RINGD_MEAN] = "mean", [RINGD_MIN] = "min",
    [RINGD_MAX] = "max", [RINGD_PROD] = "prod", [RINGD_WMEAN] = "wmean",
};

static const char *const colls[] = {
    [RINGD_COLL_ALLREDUCE] = "allreduce", [RINGD_COLL_BROADCAST] = "broadcast",
    [RINGD_COLL_ALLGATHER] = "allgather", [RINGD_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [RINGD_COLL_BARRIER] = "barrier",
};

/* Spellings users bring from numpy, PyTorch and C. */
typedef struct {
    const char *name;
    int value;
} alias;

static const alias dtype_aliases[] = {
    {"i8", RINGD_INT8},       {"u8", RINGD_UINT8},     {"i32", RINGD_INT32},
    {"int", RINGD_INT32},     {"i64", RINGD_INT64},    {"long", RINGD_INT64},
    {"f16", RINGD_FLOAT16},   {"half", RINGD_FLOAT16}, {"fp16", RINGD_FLOAT16},
    {"bf16", RINGD_BFLOAT16}, {"f32", RINGD_FLOAT32},  {"float", RINGD_FLOAT32},
    {"fp32", RINGD_FLOAT32},  {"f64", RINGD_FLOAT64},  {"double", RINGD_FLOAT64},
    {"fp64", RINGD_FLOAT64},
};

static const alias op_aliases[] = {
    {"avg", RINGD_MEAN},
};

static int find_alias(const alias *a, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(a[i].name, name) == 0) return a[i].value;
    return RINGD_EINVAL;
}

size_t ringd_dtype_size(ringd_dtype dtype)
{
    return (unsigned)dtype < RINGD_DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *ringd_dtype_name(ringd_dtype dtype)
{
    return (unsigned)dtype < RINGD_DTYPE_COUNT ? dtypes[dtype].name : NULL;
}

const char *ringd_op_name(ringd_op op)
{
    return (unsigned)op < RINGD_OP_COUNT ? ops[op] : NULL;
}

const char *ringd_coll_name(ringd_coll kind)
{
    return (unsigned)kind < sizeof colls / sizeof *colls ? colls[kind] : NULL;
}

int ringd_dtype_parse(const char *name)
{
    if (!name) return RINGD_EINVAL;
    for (int i = 0; i < RINGD_DTYPE_COUNT; i++)
        if (strcasecmp(dtypes[i].name, name) == 0) return i;
    return find_alias(dtype_aliases, sizeof dtype_aliases / sizeof *dtype_aliases, name);
}

int ringd_op_parse(const char *name)
{
    if (!name) return RINGD_EINVAL;
    for (int i = 0; i < RINGD_OP_COUNT; i++)
        if (strcasecmp(ops[i], name) == 0) return i;
    return find_alias(op_aliases, sizeof op_aliases / sizeof *op_aliases, name);
}

/*
 * test_types.c - names and sizes of the public enums (proto/types.c): error
 * codes, dtypes and ops, as ringd.h documents them.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "ringd.h"

static const int codes[] = {
#define X(name, value, desc) RINGD_##name,
    RINGD_ERRNO_MAP(X)
#undef X
};
#define N_CODES (sizeof codes / sizeof *codes)

Test(types, every_error_code_has_its_own_description)
{
    for (size_t i = 0; i < N_CODES; i++) {
        const char *s = ringd_strerror(codes[i]);

        cr_assert(s != NULL && s[0] != '\0', "code %d", codes[i]);
        cr_assert_str_neq(s, "unknown error", "code %d", codes[i]);
        cr_assert_str_neq(s, ringd_strerror(0), "code %d", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(s, ringd_strerror(codes[j]), "codes %d and %d", codes[i], codes[j]);
    }
}

Test(types, every_error_code_has_its_own_name)
{
    for (size_t i = 0; i < N_CODES; i++) {
        const char *s = ringd_errname(codes[i]);

        cr_assert_eq(strncmp(s, "RINGD_E", 7), 0, "code %d is named %s", codes[i], s);
        cr_assert_str_neq(s, "RINGD_E?", "code %d", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(s, ringd_errname(codes[j]), "codes %d and %d", codes[i], codes[j]);
    }
}

Test(types, error_names_follow_the_errno_map)
{
    cr_assert_str_eq(ringd_errname(RINGD_ETIMEDOUT), "RINGD_ETIMEDOUT");
    cr_assert_str_eq(ringd_strerror(RINGD_ETIMEDOUT), "collective timed out");
    cr_assert_str_eq(ringd_errname(RINGD_ESHUTDOWN), "RINGD_ESHUTDOWN");
}

Test(types, the_newest_codes_keep_their_wire_values)
{
    /* Peers send these in WELCOME, ABORT and EPOCH frames: never renumber. */
    cr_assert_eq(RINGD_EAUTH, -18);
    cr_assert_str_eq(ringd_errname(-18), "RINGD_EAUTH");
    cr_assert_str_eq(ringd_strerror(-18), "authentication failed");
    cr_assert_eq(RINGD_ECORRUPT, -19);
    cr_assert_str_eq(ringd_errname(-19), "RINGD_ECORRUPT");
    cr_assert_str_eq(ringd_strerror(-19), "data corrupted in transit");
}

Test(types, error_codes_are_contiguous_from_minus_one)
{
    int lowest = 0;

    for (size_t i = 0; i < N_CODES; i++)
        if (codes[i] < lowest) lowest = codes[i];
    cr_assert_eq(lowest, -(int)N_CODES);
    for (int c = -1; c >= lowest; c--)
        cr_assert_str_neq(ringd_errname(c), "RINGD_E?", "code %d", c);
    cr_assert_str_eq(ringd_errname(lowest - 1), "RINGD_E?");
}

Test(types, zero_is_success)
{
    cr_assert_str_eq(ringd_strerror(0), "success");
    cr_assert_str_eq(ringd_errname(0), "RINGD_OK");
}

Test(types, unknown_codes_have_a_placeholder_never_null)
{
    /* The codes run from -1 to -21 (RINGD_ERESIZED); -22 is the first unused. */
    static const int unknown[] = {1, 42, -22, -99, -1000, -2147483647 - 1, 2147483647};

    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        cr_assert_str_eq(ringd_strerror(unknown[i]), "unknown error");
        cr_assert_str_eq(ringd_errname(unknown[i]), "RINGD_E?");
    }
}

Test(types, dtype_sizes)
{
    cr_assert_eq(ringd_dtype_size(RINGD_INT8), 1);
    cr_assert_eq(ringd_dtype_size(RINGD_UINT8), 1);
    cr_assert_eq(ringd_dtype_size(RINGD_INT32), 4);
    cr_assert_eq(ringd_dtype_size(RINGD_INT64), 8);
    cr_assert_eq(ringd_dtype_size(RINGD_FLOAT16), 2);
    cr_assert_eq(ringd_dtype_size(RINGD_BFLOAT16), 2);
    cr_assert_eq(ringd_dtype_size(RINGD_FLOAT32), 4);
    cr_assert_eq(ringd_dtype_size(RINGD_FLOAT64), 8);
}

Test(types, unknown_dtype_has_size_zero_and_no_name)
{
    cr_assert_eq(ringd_dtype_size(RINGD_DTYPE_COUNT), 0);
    cr_assert_eq(ringd_dtype_size((ringd_dtype)-1), 0);
    cr_assert_null(ringd_dtype_name(RINGD_DTYPE_COUNT));
    cr_assert_null(ringd_dtype_name((ringd_dtype)-1));
    cr_assert_null(ringd_op_name(RINGD_OP_COUNT));
    cr_assert_null(ringd_op_name((ringd_op)-1));
}

Test(types, names_are_the_documented_ones)
{
    static const char *const dtypes[] = {"int8",    "uint8",    "int32",   "int64",
                                         "float16", "bfloat16", "float32", "float64"};
    static const char *const ops[] = {"sum", "mean", "min", "max", "prod", "wmean"};

    cr_assert_eq(sizeof dtypes / sizeof *dtypes, RINGD_DTYPE_COUNT);
    cr_assert_eq(sizeof ops / sizeof *ops, RINGD_OP_COUNT);
    for (int i = 0; i < RINGD_DTYPE_COUNT; i++)
        cr_assert_str_eq(ringd_dtype_name((ringd_dtype)i), dtypes[i]);
    for (int i = 0; i < RINGD_OP_COUNT; i++)
        cr_assert_str_eq(ringd_op_name((ringd_op)i), ops[i]);
}

Test(types, parse_inverts_name)
{
    for (int i = 0; i < RINGD_DTYPE_COUNT; i++)
        cr_assert_eq(ringd_dtype_parse(ringd_dtype_name((ringd_dtype)i)), i);
    for (int i = 0; i < RINGD_OP_COUNT; i++)
        cr_assert_eq(ringd_op_parse(ringd_op_name((ringd_op)i)), i);
}

Test(types, parse_ignores_case)
{
    cr_assert_eq(ringd_dtype_parse("FLOAT32"), RINGD_FLOAT32);
    cr_assert_eq(ringd_dtype_parse("BFloat16"), RINGD_BFLOAT16);
    cr_assert_eq(ringd_dtype_parse("FP16"), RINGD_FLOAT16);
    cr_assert_eq(ringd_op_parse("Sum"), RINGD_SUM);
    cr_assert_eq(ringd_op_parse("AVG"), RINGD_MEAN);
}

Test(types, parse_accepts_common_aliases)
{
    static const struct {
        const char *name;
        int dtype;
    } aliases[] = {
        {"f32", RINGD_FLOAT32},   {"float", RINGD_FLOAT32},  {"fp32", RINGD_FLOAT32},
        {"f64", RINGD_FLOAT64},   {"double", RINGD_FLOAT64}, {"fp64", RINGD_FLOAT64},
        {"f16", RINGD_FLOAT16},   {"half", RINGD_FLOAT16},   {"fp16", RINGD_FLOAT16},
        {"bf16", RINGD_BFLOAT16}, {"i8", RINGD_INT8},        {"u8", RINGD_UINT8},
        {"i32", RINGD_INT32},     {"int", RINGD_INT32},      {"i64", RINGD_INT64},
        {"long", RINGD_INT64},
    };

    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        cr_assert_eq(ringd_dtype_parse(aliases[i].name), aliases[i].dtype, "%s", aliases[i].name);
    cr_assert_eq(ringd_op_parse("avg"), RINGD_MEAN);
}

Test(types, parse_rejects_unknown_names)
{
    static const char *const bad[] = {"", "float33", "float32 ", " sum", "int16", "f", "su"};

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(ringd_dtype_parse(bad[i]), RINGD_EINVAL, "dtype \"%s\"", bad[i]);
        cr_assert_eq(ringd_op_parse(bad[i]), RINGD_EINVAL, "op \"%s\"", bad[i]);
    }
    cr_assert_eq(ringd_dtype_parse(NULL), RINGD_EINVAL);
    cr_assert_eq(ringd_op_parse(NULL), RINGD_EINVAL);
    cr_assert_eq(ringd_op_parse("float32"), RINGD_EINVAL);
    cr_assert_eq(ringd_dtype_parse("sum"), RINGD_EINVAL);
}

Test(types, collectives_have_the_documented_names)
{
    cr_assert_str_eq(ringd_coll_name(RINGD_COLL_ALLREDUCE), "allreduce");
    cr_assert_str_eq(ringd_coll_name(RINGD_COLL_BROADCAST), "broadcast");
    cr_assert_str_eq(ringd_coll_name(RINGD_COLL_ALLGATHER), "allgather");
    cr_assert_str_eq(ringd_coll_name(RINGD_COLL_REDUCE_SCATTER), "reduce_scatter");
    cr_assert_str_eq(ringd_coll_name(RINGD_COLL_BARRIER), "barrier");
    cr_assert_null(ringd_coll_name((ringd_coll)0));
    cr_assert_null(ringd_coll_name((ringd_coll)6));
}

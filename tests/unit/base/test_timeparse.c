/* Tests for base/timeparse.c (segd replay --from-time/--to-time): a table
 * of accepted inputs with their exact milliseconds, and of refused ones:
 * impossible dates that timegm would normalise, malformed zones, overflow,
 * no zone; plus the "looks like seconds" flag for small bare numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "base/timeparse.h"

#define T0 1795435200000LL /* 2026-11-23T12:00:00Z */

static void test_good(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t ms;
        int secs;
    } good[] = {
        {"0", 0, 1},
        {"2026", 2026, 1},
        {"99999999999", 99999999999LL, 1},
        {"100000000000", 100000000000LL, 0},
        {"1795435200000", T0, 0},
        {"9223372036854775807", INT64_MAX, 0},
        {"2026-11-23T12:00:00Z", T0, 0},
        {"2026-11-23t12:00:00z", T0, 0},
        {"2026-11-23T12:00:00.5Z", T0 + 500, 0},
        {"2026-11-23T12:00:00.123Z", T0 + 123, 0},
        {"2026-11-23T12:00:00.123999999Z", T0 + 123, 0},
        {"2026-11-23T13:30:00+01:30", T0, 0},
        {"2026-11-23T13:30:00+0130", T0, 0},
        {"2026-11-23T13:00:00+01", T0, 0},
        {"2026-11-23T10:00:00-02:00", T0, 0},
        {"2026-11-23T12:00:00.250-00:00", T0 + 250, 0},
        {"2024-02-29T00:00:00Z", 1709164800000LL, 0},
        {"1970-01-01T00:00:00Z", 0, 0},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        int64_t ms = -1;
        int secs = -1;
        if (segd_time_parse_ms(good[i].s, &ms, &secs))
            fail_msg("refused %s", good[i].s);
        if (ms != good[i].ms || secs != good[i].secs)
            fail_msg("%s: %lld (seconds-like %d), want %lld (%d)", good[i].s, (long long)ms,
                     secs, (long long)good[i].ms, good[i].secs);
    }
}

static void test_bad(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "-5", "+5", " 5", "5 ", "5x", "99999999999999999999",
        "2026-02-31T00:00:00Z",      /* timegm: March 3 */
        "2025-02-29T00:00:00Z",      /* not a leap year */
        "2026-11-23T24:00:00Z",      /* the next day */
        "2026-11-23T12:60:00Z", "2026-11-23T12:00:60Z", "2026-13-01T00:00:00Z",
        "2026-00-10T00:00:00Z", "2026-11-00T00:00:00Z",
        "2026-11-23T12:00:00",       /* no zone */
        "2026-11-23 12:00:00Z", "2026-11-23T12:00Z", "26-11-23T12:00:00Z",
        "2026-1-23T12:00:00Z", "2026-11-23T12:00:00.Z", "2026-11-23T12:00:00ZZ",
        "2026-11-23T12:00:00+-1:00", "2026-11-23T12:00:00+01:+5",
        "2026-11-23T12:00:00+1:00", "2026-11-23T12:00:00+01:0", "2026-11-23T12:00:00+24:00",
        "2026-11-23T12:00:00+01:60", "2026-11-23T12:00:00+013", "2026-11-23T12:00:00+01:00x",
        "2026-11-23T12:00:00+", "2026-11-23T12:00:00 +01:00",
        "1969-12-31T23:59:59Z",      /* before the epoch */
        "1970-01-01T00:30:00+01:00",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ms = 42;
        if (!segd_time_parse_ms(bad[i], &ms, NULL))
            fail_msg("accepted %s as %lld", bad[i], (long long)ms);
        assert_int_equal(ms, 42);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tests for base/progress.c: the ETA of a bar whose estimate is absurd (one
 * unit done of 2^64 after a second) is clamped before the int conversions
 * that print it, so it reads 99 days instead of undefined behaviour. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/progress.h"

static void test_eta_is_clamped(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    segd_progress_t p;
    segd_progress_init(&p, f, "messages", UINT64_MAX, 0);
    p.out = f;               /* a memory stream is no terminal: draw anyway */
    p.t0 = segd_mono_s() - 2; /* two seconds for one unit of 2^64 */
    segd_progress_update(&p, 1, 1, 1);
    fclose(f);
    assert_non_null(strstr(text, "ETA 142560m00s"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eta_is_clamped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

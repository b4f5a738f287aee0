/* Command-line helpers; see args.h. */
#include "base/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int segd_arg_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
                 int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "segd %s: bad %s '%s' (want an integer in [%lld, %lld])\n", cmd, flag,
                s ? s : "", (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

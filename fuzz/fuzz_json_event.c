/* libFuzzer target: the JSON-lines event parser and the run-config parser's
 * key = value setter, both trust boundaries. The fast event parser must take
 * the reference (jansson) parser's decision on every input and, when both
 * accept, decode the same event: any difference aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "wire/json_event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_event(const segd_event_t *a, const segd_event_t *b)
{
    if (a->user_id_len != b->user_id_len || memcmp(a->user_id, b->user_id, a->user_id_len) ||
        a->ts_ms != b->ts_ms || a->op != b->op || a->n_segments != b->n_segments ||
        strcmp(a->source, b->source))
        return 0;
    for (size_t i = 0; i < a->n_segments; i++) {
        const segd_seg_update_t *x = &a->segments[i], *y = &b->segments[i];
        if (x->segment_id != y->segment_id || x->ttl_s != y->ttl_s || x->flags != y->flags ||
            x->partner_id != y->partner_id)
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segd_event_t ev, ref;
    segd_limits_t lim;
    char err[256], ref_err[256];
    segd_event_init(&ev);
    segd_event_init(&ref);
    segd_limits_default(&lim);
    segd_err_t fast = segd_json_event_parse((const char *)data, size, &ev, err, sizeof(err));
    segd_err_t slow = segd_json_event_parse_reference((const char *)data, size, &ref, ref_err,
                                                      sizeof(ref_err));
    if ((fast == SEGD_OK) != (slow == SEGD_OK) || (fast == SEGD_OK && !same_event(&ev, &ref))) {
        fprintf(stderr, "json_event: fast parser %s (%s), reference %s (%s) on %.*s\n",
                fast ? "refused" : "accepted", fast ? err : "-", slow ? "refused" : "accepted",
                slow ? ref_err : "-", (int)(size > 400 ? 400 : size), (const char *)data);
        abort();
    }
    if (fast == SEGD_OK)
        segd_event_validate(&ev, &lim, err, sizeof(err));
    segd_event_free(&ev);
    segd_event_free(&ref);
    /* the same bytes as "key=value" for the config setter */
    char *s = strndup((const char *)data, size);
    segd_config_t c;
    segd_config_init(&c);
    char *eq = s ? strchr(s, '=') : NULL;
    if (eq) {
        *eq = 0;
        segd_config_set(&c, s, eq + 1, err, sizeof(err));
    }
    segd_config_free(&c);
    free(s);
    return 0;
}

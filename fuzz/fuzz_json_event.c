/* libFuzzer target: the JSON-lines event parser and the run-config parser's
 * key = value setter, both trust boundaries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consumer/config.h"
#include "wire/json_event.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    segd_event_t ev;
    segd_limits_t lim;
    char err[256];
    segd_event_init(&ev);
    segd_limits_default(&lim);
    if (segd_json_event_parse((const char *)data, size, &ev, err, sizeof(err)) == SEGD_OK)
        segd_event_validate(&ev, &lim, err, sizeof(err));
    segd_event_free(&ev);
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

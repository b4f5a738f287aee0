/* JSON shape of live entries; see profile_json.h. */
#include "wire/profile_json.h"

#include <inttypes.h>
#include <stdio.h>

json_t *segd_entries_json(const segd_entry_t *e, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:I,s:I,s:I,s:i,s:i}", "id", (json_int_t)e[i].segment_id,
                           "expires_at", (json_int_t)e[i].expiry_s, "ts_ms",
                           (json_int_t)e[i].ts_ms, "flags", e[i].flags, "partner_id",
                           e[i].partner_id));
    return arr;
}

/* One entry is at most 5 keys and 3 int64 + 2 int32 numbers: < 160 bytes. */
#define ENTRY_MAX 160

segd_err_t segd_entries_json_text(segd_buf_t *out, const segd_entry_t *e, size_t n)
{
    if (segd_buf_reserve(out, 2 + n * ENTRY_MAX))
        return SEGD_ERR_NOMEM;
    char *p = (char *)out->data + out->len;
    *p++ = '[';
    for (size_t i = 0; i < n; i++)
        p += sprintf(p,
                     "%s{\"id\":%" PRId64 ",\"expires_at\":%" PRId64 ",\"ts_ms\":%" PRId64
                     ",\"flags\":%" PRId32 ",\"partner_id\":%" PRId32 "}",
                     i ? "," : "", e[i].segment_id, e[i].expiry_s, e[i].ts_ms, e[i].flags,
                     e[i].partner_id);
    *p++ = ']';
    out->len = (size_t)(p - (char *)out->data);
    return SEGD_OK;
}

segd_err_t segd_json_string_text(segd_buf_t *out, const char *s, size_t len)
{
    if (segd_buf_reserve(out, 2 + 6 * len))
        return SEGD_ERR_NOMEM;
    char *p = (char *)out->data + out->len;
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : NULL;
        if (esc) {
            *p++ = esc[0];
            *p++ = esc[1];
        } else if (c < 0x20) {
            p += sprintf(p, "\\u%04X", c);
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    out->len = (size_t)(p - (char *)out->data);
    return SEGD_OK;
}

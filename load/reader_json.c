/* JSON lines for the file reader (reader_int.h). The producer cuts the
 * stream into blocks of whole lines; a line too long for any block is
 * reported and skipped without being held in memory. A worker then parses
 * each line of a block into an event. Lines are numbered from 1 in reports. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "load/reader_int.h"
#include "wire/json_event.h"

/* ---------- producer: cutting the stream into blocks ---------- */

static size_t count_lines(const uint8_t *p, size_t len)
{
    size_t k = 0;
    const uint8_t *end = p + len;
    while ((p = memchr(p, '\n', (size_t)(end - p)))) {
        k++;
        p++;
    }
    return k;
}

/* Skips a line that does not fit a block, which makes it longer than
 * max_message for sure. Reads to the line's end and reports it, and puts
 * what follows the line into *carry. Returns 0 when the line ended, 1 at the
 * end of input, and -1 at a read error (why set). */
static int skip_long_line(loader_t *l, segd_source_t *src, const char *path, slot_t *s,
                          int64_t line, segd_buf_t *carry, char *why, size_t n)
{
    uint64_t total = s->in_len;
    int rc;
    for (;;) {
        ssize_t r = segd_source_read(src, s->in, s->in_cap, why, n);
        if (r <= 0) {
            rc = r < 0 ? -1 : 1;
            break;
        }
        uint8_t *nl = memchr(s->in, '\n', (size_t)r);
        if (!nl) {
            total += (uint64_t)r;
            continue;
        }
        total += (uint64_t)(nl - s->in);
        carry->len = 0;
        rc = segd_buf_append(carry, nl + 1, (size_t)(r - (nl + 1 - s->in))) ? -1 : 0;
        if (rc)
            snprintf(why, n, "out of memory");
        break;
    }
    fprintf(l->o->errors, "%s:%lld: line of %llu bytes exceeds %zu\n", path, (long long)line,
            (unsigned long long)total, l->o->limits.max_message);
    segd_loader_count_skip(l);
    return rc;
}

/* Cuts the stream into blocks of whole lines. Returns -1 when stopping. */
static int produce_json(loader_t *l, segd_source_t *src, const char *path, uint64_t *accounted)
{
    segd_buf_t carry = {0};
    int64_t line = 1;
    char why[256];
    int rc = 0, at_end = 0;
    while (!at_end) {
        slot_t *s = segd_loader_take_free(l);
        if (!s) {
            rc = -1;
            break;
        }
        s->kind = UNIT_JSON;
        s->file = path;
        if (segd_loader_grow_in(s, l->json_block)) {
            fprintf(l->o->errors, "%s: out of memory\n", path);
            segd_loader_count_skip(l);
            segd_loader_give_back(l, s);
            rc = -1;
            break;
        }
        if (carry.len) /* carry.data is NULL before the first block */
            memcpy(s->in, carry.data, carry.len);
        s->in_len = carry.len;
        carry.len = 0;
        ssize_t r = 1;
        while (s->in_len < s->in_cap &&
               (r = segd_source_read(src, s->in + s->in_len, s->in_cap - s->in_len, why,
                                     sizeof(why))) > 0)
            s->in_len += (size_t)r;
        if (r <= 0) {
            at_end = 1;
        } else {
            uint8_t *last = memrchr(s->in, '\n', s->in_len);
            if (!last) { /* a full block without a line end */
                int k = skip_long_line(l, src, path, s, line, &carry, why, sizeof(why));
                line++;
                segd_loader_give_back(l, s);
                if (k == 0)
                    continue;
                if (k < 0) {
                    fprintf(l->o->errors, "%s: %s (after line %lld)\n", path, why,
                            (long long)(line - 1));
                    segd_loader_count_skip(l);
                }
                break;
            }
            size_t keep = (size_t)(last + 1 - s->in);
            if (segd_buf_append(&carry, last + 1, s->in_len - keep)) {
                fprintf(l->o->errors, "%s: out of memory\n", path);
                segd_loader_count_skip(l);
                segd_loader_give_back(l, s);
                rc = -1;
                break;
            }
            s->in_len = keep;
        }
        s->first_line = line;
        line += (int64_t)count_lines(s->in, s->in_len);
        uint64_t consumed = segd_source_consumed(src);
        s->bytes = consumed - *accounted;
        *accounted = consumed;
        if (s->in_len)
            segd_loader_push_work(l, s);
        else
            segd_loader_give_back(l, s);
        if (r < 0) { /* what was read is applied; the tail is reported */
            fprintf(l->o->errors, "%s: %s (after line %lld)\n", path, why,
                    (long long)(line - 1));
            segd_loader_count_skip(l);
        }
    }
    segd_buf_free(&carry);
    return rc;
}

/* ---------- workers: parsing a block's lines ---------- */

/* Whole lines, numbered from s->first_line; empty lines are skipped. */
static int decode_json(worker_t *w, slot_t *s)
{
    const segd_load_opts_t *o = w->l->o;
    const char *p = (const char *)s->in, *end = p + s->in_len;
    int64_t no = s->first_line;
    char why[256];
    for (; p < end; no++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        size_t len = (size_t)(stop - p);
        while (len > 0 && p[len - 1] == '\r')
            len--;
        if (len > o->limits.max_message) {
            snprintf(why, sizeof(why), "line of %zu bytes exceeds %zu", len,
                     o->limits.max_message);
            segd_loader_report(w, s, no, why);
        } else if (len > 0) {
            segd_err_t e = segd_json_event_parse(p, len, &w->ev, why, sizeof(why));
            if (e == SEGD_ERR_NOMEM)
                return -1;
            if (e)
                segd_loader_report(w, s, no, why);
            else if (segd_loader_add_event(w, s, no))
                return -1;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

const reader_format_t segd_loader_format_json = {.produce = produce_json, .decode = decode_json};

/* The logger of the long-running commands (`segd run`, `segd cache`): one
 * line per event on a stream (stderr), logfmt or JSON, with ts (RFC 3339
 * UTC, ms), level, component, msg and key=value fields. The program owns
 * the logger and hands it to its components (config, options structs, and
 * librdkafka's opaque pointers); NULL means "info and up, logfmt, stderr",
 * so a component used without one (tests, benchmarks) still logs and no
 * global state exists. Thread-safe: a line is built in a buffer and written
 * with one call, so lines from different threads never interleave. */
#ifndef SEGD_LOG_H
#define SEGD_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "base/err.h"

typedef enum segd_log_level {
    SEGD_LOG_DEBUG = 0,
    SEGD_LOG_INFO = 1,
    SEGD_LOG_WARN = 2,
    SEGD_LOG_ERROR = 3,
} segd_log_level_t;

typedef enum segd_log_format {
    SEGD_LOG_LOGFMT = 0,
    SEGD_LOG_JSON = 1,
} segd_log_format_t;

typedef struct segd_log segd_log_t;

/* out is borrowed (stderr for the daemons) and must outlive the logger;
 * events below min are dropped. */
segd_err_t segd_log_new(segd_log_t **out_log, FILE *out, segd_log_level_t min,
                        segd_log_format_t format);
void segd_log_destroy(segd_log_t *l);

/* "debug" | "info" | "warn" | "error"; -1 for anything else. */
int segd_log_level_parse(const char *s, segd_log_level_t *out);
const char *segd_log_level_name(segd_log_level_t lv);
/* "logfmt" | "json"; -1 for anything else. */
int segd_log_format_parse(const char *s, segd_log_format_t *out);
const char *segd_log_format_name(segd_log_format_t f);

/* The least level written (l may be NULL: info). */
segd_log_level_t segd_log_min(const segd_log_t *l);
int segd_log_enabled(const segd_log_t *l, segd_log_level_t lv);

/* One event whose msg is printf-formatted. */
void segd_log(const segd_log_t *l, segd_log_level_t lv, const char *component,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* One event with a fixed msg and fields printf-formatted as
 * "key=value key=value". A field starts where a space is followed by a key
 * ([A-Za-z_][A-Za-z0-9_.]*) and '=', so a value may hold spaces but not
 * " word=". Prose such as an error text therefore belongs in msg. In JSON a
 * value that is a JSON number is written as one, anything else as a string. */
void segd_log_kv(const segd_log_t *l, segd_log_level_t lv, const char *component,
                 const char *msg, const char *fields_fmt, ...)
    __attribute__((format(printf, 5, 6)));
void segd_log_vkv(const segd_log_t *l, segd_log_level_t lv, const char *component,
                  const char *msg, const char *fields_fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

#endif

/* Consistent snapshots (DESIGN §6), the reading half: fetch a manifest
 * from a directory, http(s):// or s3:// source and load or verify its
 * bucket files (the edge cache's start, `segd snapshot verify`). Not
 * thread-safe per call; calls on different threads are independent. */
#ifndef SEGD_SNAPSHOT_READ_H
#define SEGD_SNAPSHOT_READ_H

#include <stddef.h>
#include <stdint.h>

#include "core/record.h"
#include "transport/dest.h"
#include "wire/manifest.h"

/* Fetches and parses SRC's manifest. */
segd_err_t segd_snapshot_manifest(const char *src_url, const segd_dest_opts_t *dopts,
                                  segd_manifest_t *m, char *errstr, size_t errstr_size);

/* Calls cb for every record of every bucket, after checking each file's size
 * and SHA-256 against the manifest and each bucket's record count; a
 * mismatch is SEGD_ERR_CORRUPT naming the file. cb == NULL only verifies.
 * The profile and user are borrowed for the call; cb returns non-zero to
 * stop (an error: SEGD_ERR_INVALID). */
typedef int (*segd_snapshot_cb)(void *ctx, uint32_t bucket, const char *user,
                                size_t user_len, const segd_profile_t *p);
segd_err_t segd_snapshot_load(const char *src_url, const segd_dest_opts_t *dopts,
                              const segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

/* segd_snapshot_manifest + segd_snapshot_load, starting over (up to 3
 * times) when a file went missing or changed because a newer snapshot
 * replaced the one being read. m receives the manifest that loaded. */
segd_err_t segd_snapshot_read(const char *src_url, const segd_dest_opts_t *dopts,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t errstr_size);

#endif

/* `segd version` (and `segd --version`): segd's version and the versions of
 * the libraries it runs with, one "name version" line each, so a bug report
 * or a fleet check can say what a binary is. A library that can say its own
 * version at run time does (the shared object actually loaded); RocksDB and
 * avro-c cannot from C, so theirs is the one segd was built against, marked
 * "(built against)". */
#include <curl/curl.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>

#include "cli/cli.h"
#include "segd_git_version.h"

/* SEGD_VERSION, SEGD_ROCKSDB_VERSION and SEGD_AVRO_VERSION come from
 * CMakeLists.txt (the project's version, pkg-config's); SEGD_GIT_DESCRIBE
 * from scripts/git_version.cmake at build time, empty outside a git tree. */
#ifndef SEGD_VERSION
#error "SEGD_VERSION is defined by CMakeLists.txt"
#endif

static void usage(FILE *f)
{
    fprintf(f, "usage: segd version\n"
               "  segd's version (and `git describe` of the tree it was built from, when\n"
               "  it was built in one), then one line per library: librdkafka, libcurl,\n"
               "  jansson, zstd, zlib, OpenSSL, libmicrohttpd and xxHash as loaded at run\n"
               "  time; RocksDB and avro-c as built against (they have no C call for\n"
               "  it). segd --version prints the same.\n");
}

int segd_version_print(FILE *f)
{
    unsigned xxh = XXH_versionNumber();
    if (SEGD_GIT_DESCRIBE[0])
        fprintf(f, "segd %s (git %s)\n", SEGD_VERSION, SEGD_GIT_DESCRIBE);
    else
        fprintf(f, "segd %s\n", SEGD_VERSION);
    fprintf(f, "librdkafka %s\n", rd_kafka_version_str());
    fprintf(f, "rocksdb %s (built against)\n", SEGD_ROCKSDB_VERSION);
    fprintf(f, "avro-c %s (built against)\n", SEGD_AVRO_VERSION);
    fprintf(f, "libcurl %s\n", curl_version_info(CURLVERSION_NOW)->version);
    fprintf(f, "jansson %s\n", jansson_version_str());
    fprintf(f, "zstd %s\n", ZSTD_versionString());
    fprintf(f, "zlib %s\n", zlibVersion());
    fprintf(f, "openssl %s\n", OpenSSL_version(OPENSSL_VERSION_STRING));
    fprintf(f, "libmicrohttpd %s\n", MHD_get_version());
    fprintf(f, "xxhash %u.%u.%u\n", xxh / 10000, xxh / 100 % 100, xxh % 100);
    return SEGD_EXIT_OK;
}

int segd_cmd_version(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    optind = 1;
    while ((c = segd_args_next("version", argc, argv, "h", opts)) != -1)
        if (c == 'h')
            return usage(stdout), SEGD_EXIT_OK;
        else
            return SEGD_EXIT_USAGE;
    if (optind < argc) {
        fprintf(stderr, "segd version: unexpected argument '%s'\n", argv[optind]);
        return SEGD_EXIT_USAGE;
    }
    return segd_version_print(stdout);
}

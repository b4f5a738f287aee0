/* SHA-256 hex digests; see digest.h. */
#include "wire/digest.h"

#include <openssl/evp.h>

#include "base/hex.h"

void segd_sha256_hex(const void *data, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    segd_hex(md, 32, hex);
}

int segd_sha256_file_hex(FILE *f, char hex[65])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    size_t r;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    while (ok && (r = fread(buf, 1, sizeof(buf), f)) > 0)
        ok = EVP_DigestUpdate(ctx, buf, r);
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32 &&
         !fseek(f, 0, SEEK_SET);
    EVP_MD_CTX_free(ctx);
    if (ok)
        segd_hex(md, 32, hex);
    return ok ? 0 : -1;
}

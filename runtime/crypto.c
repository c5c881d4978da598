#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "runtime/crypto.h"
#include "runtime/log.h"

/* Fetching an algorithm walks the provider tables; do it once per process. */
static EVP_MAC *hmac_alg;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
    hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

static void log_openssl(const char *what)
{
    char buf[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, buf, sizeof(buf));
    SHS_ERROR("%s: %s", what, e != 0 ? buf : "unknown libcrypto error");
    ERR_clear_error();
}

shs_status_t shs__mac_begin(shs__mac_t *m, const void *key, size_t key_len)
{
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
        OSSL_PARAM_construct_end(),
    };

    m->ctx = NULL;
    pthread_once(&hmac_once, hmac_fetch);
    if (hmac_alg == NULL) {
        log_openssl("libcrypto has no HMAC");
        return SHS_ERR_UNSUPPORTED;
    }
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(hmac_alg);
    if (c == NULL) {
        log_openssl("EVP_MAC_CTX_new");
        return SHS_ERR_NO_MEMORY;
    }
    if (EVP_MAC_init(c, key, key_len, params) != 1) {
        log_openssl("EVP_MAC_init (HMAC-SHA256)");
        EVP_MAC_CTX_free(c);
        return SHS_ERR_UNSUPPORTED;
    }
    m->ctx = c;
    return SHS_OK;
}

void shs__mac_update(shs__mac_t *m, const void *data, size_t len)
{
    /* EVP_MAC_update only fails on a context that failed to initialise,
     * which begin already reported; end then reports the failure. */
    if (m->ctx != NULL && len > 0 && EVP_MAC_update(m->ctx, data, len) != 1) {
        EVP_MAC_CTX_free(m->ctx);
        m->ctx = NULL;
    }
}

shs_status_t shs__mac_end(shs__mac_t *m, uint8_t out[SHS_MAC_LEN])
{
    size_t n = 0;
    if (m->ctx == NULL)
        return SHS_ERR_UNSUPPORTED;
    int ok = EVP_MAC_final(m->ctx, out, &n, SHS_MAC_LEN);
    EVP_MAC_CTX_free(m->ctx);
    m->ctx = NULL;
    if (ok != 1 || n != SHS_MAC_LEN) {
        log_openssl("EVP_MAC_final (HMAC-SHA256)");
        return SHS_ERR_UNSUPPORTED;
    }
    return SHS_OK;
}

void shs__mac_abort(shs__mac_t *m)
{
    EVP_MAC_CTX_free(m->ctx);
    m->ctx = NULL;
}

shs_status_t shs__hmac(const void *key, size_t key_len, const void *const *parts,
                       const size_t *lens, size_t nparts, uint8_t out[SHS_MAC_LEN])
{
    shs__mac_t m;
    shs_status_t st = shs__mac_begin(&m, key, key_len);
    if (st != SHS_OK)
        return st;
    for (size_t i = 0; i < nparts; i++)
        shs__mac_update(&m, parts[i], lens[i]);
    return shs__mac_end(&m, out);
}

bool shs__mac_equal(const uint8_t a[SHS_MAC_LEN], const uint8_t b[SHS_MAC_LEN])
{
    return CRYPTO_memcmp(a, b, SHS_MAC_LEN) == 0;
}

shs_status_t shs__random(void *buf, size_t len)
{
    if (len > 0 && RAND_bytes(buf, (int)len) != 1) {
        log_openssl("RAND_bytes");
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

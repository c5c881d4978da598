/* The bootstrap wire encoding: untrusted input, fuzzed by
 * tests/fuzz/fuzz_boot_frame.c. Decoders check every length before reading. */
#include <stdint.h>
#include <string.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

void shs__boot_hdr_encode(const shs__boot_hdr_t *hdr, uint8_t out[SHS_BOOT_HDR_LEN])
{
    shs__put_u32(out, hdr->magic);
    shs__put_u16(out + 4, hdr->version);
    shs__put_u16(out + 6, hdr->type);
    shs__put_u32(out + 8, hdr->length);
}

shs_status_t shs__boot_hdr_decode(const uint8_t *in, size_t in_len, uint32_t max_len,
                                  shs__boot_hdr_t *hdr_p)
{
    shs__boot_hdr_t h;

    if (in == NULL || in_len < SHS_BOOT_HDR_LEN)
        return SHS_ERR_PROTOCOL;
    h.magic = shs__get_u32(in);
    h.version = shs__get_u16(in + 4);
    h.type = shs__get_u16(in + 6);
    h.length = shs__get_u32(in + 8);
    if (h.magic != SHS_BOOT_MAGIC)
        return SHS_ERR_PROTOCOL;
    if (h.version != SHS_BOOT_PROTOCOL_VERSION)
        return SHS_ERR_VERSION_MISMATCH;
    if (h.length > max_len)
        return SHS_ERR_PROTOCOL;
    *hdr_p = h;
    return SHS_OK;
}

void shs__boot_hello_encode(const shs__boot_hello_t *hello, uint8_t out[SHS_BOOT_HELLO_LEN])
{
    shs__put_u32(out, hello->rank);
    shs__put_u32(out + 4, hello->size);
    memcpy(out + 8, hello->nonce, SHS_BOOT_NONCE_LEN);
}

shs_status_t shs__boot_hello_decode(const uint8_t *in, size_t len, shs__boot_hello_t *hello_p)
{
    if (in == NULL || len != SHS_BOOT_HELLO_LEN)
        return SHS_ERR_PROTOCOL;
    hello_p->rank = shs__get_u32(in);
    hello_p->size = shs__get_u32(in + 4);
    memcpy(hello_p->nonce, in + 8, SHS_BOOT_NONCE_LEN);
    return SHS_OK;
}

shs_status_t shs__boot_error_decode(const uint8_t *in, size_t len, shs__boot_error_t *err_p)
{
    if (in == NULL || len < ERROR_FIXED || len > ERROR_FIXED + ERROR_TEXT_MAX)
        return SHS_ERR_PROTOCOL;
    int32_t code = (int32_t)shs__get_u32(in);
    /* Only an error status may travel in an error frame; anything else would
     * let a confused peer turn a failure into success. */
    if (code >= 0 || code < -99)
        return SHS_ERR_PROTOCOL;
    err_p->status = code;
    err_p->culprit = (int32_t)shs__get_u32(in + 4);
    size_t n = len - ERROR_FIXED;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = in[ERROR_FIXED + i];
        /* the text goes to a log line: no terminal escapes, no line breaks */
        err_p->text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    err_p->text[n] = '\0';
    return SHS_OK;
}

shs_status_t shs__boot_contrib_decode(const uint8_t *in, size_t len, shs__boot_contrib_t *c_p)
{
    if (in == NULL || len < CONTRIB_FIXED)
        return SHS_ERR_PROTOCOL;
    c_p->len = shs__get_u64(in);
    c_p->root = shs__get_u32(in + 8);
    return SHS_OK;
}

shs_status_t shs__boot_proof(const char *token, shs__boot_proof_kind_t kind,
                             const shs__boot_hello_t *hello,
                             const uint8_t nonce_root[SHS_BOOT_NONCE_LEN],
                             uint8_t out[SHS_BOOT_PROOF_LEN])
{
    /* Labels include their NUL so that no label is a prefix of another. */
    static const char *const labels[] = {"join", "root", "session"};
    static const char ctx[] = "shadowsync-boot";
    uint8_t fixed[2 + SHS_BOOT_HELLO_LEN];

    if (token == NULL || hello == NULL || nonce_root == NULL || (unsigned)kind > 2)
        return SHS_ERR_INVALID_ARG;
    shs__put_u16(fixed, SHS_BOOT_PROTOCOL_VERSION);
    shs__boot_hello_encode(hello, fixed + 2);
    const void *parts[] = {labels[kind], ctx, fixed, nonce_root};
    const size_t lens[] = {strlen(labels[kind]) + 1, sizeof(ctx), sizeof(fixed),
                           SHS_BOOT_NONCE_LEN};
    return shs__hmac(token, strlen(token), parts, lens, 4, out);
}

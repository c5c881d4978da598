/*
 * libFuzzer target: everything the bootstrap decodes from the network. The
 * input is a byte stream of frames as a peer (or a stranger) would send them:
 * each header is decoded with the runtime's limit, and the payload goes to
 * the decoder of its type (hello, error, collective contribution); a hello
 * also feeds the proof computation, and every frame is checked against a
 * frame MAC the way an authenticated link checks it.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/bootstrap.h"
#include "runtime/crypto.h"
#include "runtime/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t key[SHS_MAC_LEN] = {1, 2, 3};
    shs__log_set_level(-1);
    while (size >= SHS_BOOT_HDR_LEN) {
        shs__boot_hdr_t h;
        shs_status_t st = shs__boot_hdr_decode(data, size, SHS_BOOT_MAX_MSG, &h);
        if (st != SHS_OK)
            return 0;
        const uint8_t *payload = data + SHS_BOOT_HDR_LEN;
        size_t avail = size - SHS_BOOT_HDR_LEN;
        size_t len = h.length < avail ? h.length : avail;
        switch (h.type) {
        case SHS_BOOT_FT_HELLO: {
            shs__boot_hello_t hello;
            uint8_t proof[SHS_BOOT_PROOF_LEN], nonce[SHS_BOOT_NONCE_LEN] = {0};
            if (shs__boot_hello_decode(payload, len, &hello) == SHS_OK &&
                shs__boot_proof("fuzz-token", SHS_BOOT_PROOF_JOIN, &hello, nonce, proof) !=
                    SHS_OK)
                __builtin_trap();
            break;
        }
        case SHS_BOOT_FT_ERROR: {
            shs__boot_error_t e;
            if (shs__boot_error_decode(payload, len, &e) == SHS_OK &&
                (e.status >= 0 || strlen(e.text) > SHS_BOOT_ERROR_TEXT_MAX))
                __builtin_trap();
            break;
        }
        case SHS_BOOT_FT_ALLGATHER:
        case SHS_BOOT_FT_BCAST:
        case SHS_BOOT_FT_BARRIER: {
            shs__boot_contrib_t c;
            (void)shs__boot_contrib_decode(payload, len, &c);
            break;
        }
        default:
            break;
        }
        /* the trailer check of an authenticated link */
        if (avail >= len + SHS_BOOT_FRAME_MAC_LEN) {
            shs__mac_t m;
            uint8_t tag[SHS_MAC_LEN];
            if (shs__mac_begin(&m, key, sizeof(key)) == SHS_OK) {
                shs__mac_update(&m, data, SHS_BOOT_HDR_LEN + len);
                if (shs__mac_end(&m, tag) == SHS_OK)
                    (void)shs__mac_equal(tag, payload + len);
            }
            len += SHS_BOOT_FRAME_MAC_LEN;
        }
        data = payload + len;
        size = avail - len;
    }
    return 0;
}

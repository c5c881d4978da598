/* Create and destroy the bootstrap: rank 0 admits, the others join. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

shs_status_t shs__boot_create(const shs__config_t *cfg, shs__boot_t **boot_p)
{
    char host[256], port[8];
    shs_status_t st;

    if (cfg == NULL || boot_p == NULL)
        return SHS_ERR_INVALID_ARG;
    if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size) {
        SHS_ERROR("bootstrap needs a rank and a size (rank %d, size %d): set SHS_RANK and "
                  "SHS_SIZE or start under a launcher", cfg->rank, cfg->size);
        return SHS_ERR_CONFIG;
    }
    if (cfg->size > 1 &&
        (shs__hostport_count(cfg->bootstrap) < 1 ||
         shs__hostport_entry(cfg->bootstrap, 0, host, sizeof(host), port, sizeof(port)) !=
             SHS_OK)) {
        SHS_ERROR("bootstrap address \"%s\" is not host:port or a list of them",
                  cfg->bootstrap);
        return SHS_ERR_CONFIG;
    }
    if (cfg->size > 1 && cfg->job_token[0] == '\0') {
        SHS_ERROR("bootstrap needs a job token (SHS_JOB_TOKEN)");
        return SHS_ERR_CONFIG;
    }
    shs__boot_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return SHS_ERR_NO_MEMORY;
    b->rank = cfg->rank;
    b->size = cfg->size;
    b->timeout_ms = cfg->bootstrap_timeout_ms;
    /* unset (a zeroed config): a handshake may take the whole rendezvous */
    b->handshake_ms = cfg->bootstrap_handshake_ms > 0 ? cfg->bootstrap_handshake_ms
                                                      : cfg->bootstrap_timeout_ms;
    shs__boot_link_init(&b->root, -1, false);
    snprintf(b->token, sizeof(b->token), "%s", cfg->job_token);
    snprintf(b->addrs, sizeof(b->addrs), "%s", cfg->bootstrap);
    shs__deadline_t dl = shs__deadline_in_ms(b->timeout_ms);

    if (b->size == 1) {
        *boot_p = b;
        return SHS_OK;
    }
    if (cfg->rejoin) {
        st = shs__boot_rejoin(b, dl);
        if (st != SHS_OK)
            goto err_destroy;
        *boot_p = b;
        return SHS_OK;
    }
    if (b->rank != 0) {
        st = shs__boot_join(b, host, port, dl);
        if (st != SHS_OK)
            goto err_destroy;
        *boot_p = b;
        return SHS_OK;
    }
    b->peer = malloc((size_t)b->size * sizeof(*b->peer));
    if (b->peer == NULL) {
        st = SHS_ERR_NO_MEMORY;
        goto err_destroy;
    }
    for (int r = 0; r < b->size; r++)
        shs__boot_link_init(&b->peer[r], -1, true);
    int lfd;
    st = shs__boot_warm_up(b->token);
    if (st != SHS_OK)
        goto err_destroy;
    st = shs__boot_listen(host, port, &lfd);
    if (st != SHS_OK)
        goto err_destroy;
    st = shs__boot_rendezvous(b, lfd, dl);
    /* Every rank is in; the port is freed for the next job. */
    close(lfd);
    if (st != SHS_OK)
        goto err_destroy;
    *boot_p = b;
    return SHS_OK;

err_destroy:
    shs__boot_destroy(b);
    return st;
}

void shs__boot_destroy(shs__boot_t *b)
{
    if (b == NULL)
        return;
    shs__boot_link_close(&b->root);
    if (b->peer != NULL)
        for (int r = 1; r < b->size; r++)
            shs__boot_link_close(&b->peer[r]);
    free(b->peer);
    memset(b->token, 0, sizeof(b->token));
    free(b->dir);
    free(b);
}

int shs__boot_rank(const shs__boot_t *b)
{
    return b->rank;
}

int shs__boot_size(const shs__boot_t *b)
{
    return b->size;
}

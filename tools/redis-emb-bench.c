/*
 * redis-emb-bench: the peer of shs-emb-bench that a team without RDMA would
 * pick: embedding rows as binary values in Redis (key "e:<row>", dim x 4
 * bytes), a batch looked up with one MGET (one round trip, the pipelined
 * form), over TCP. Same ids as shs-emb-bench for the same --seed, rank and
 * worker (tools/idgen.h). Run one process per rank beside a redis-server:
 *
 *   redis-emb-bench --load --rows R --dim D            once, fills the rows
 *   redis-emb-bench --rank I --rows R --dim D --batch B [--dist zipf] --json
 *
 * Prints ids per second and the median and 99th percentile MGET time of
 * this process; the comparison script sums the ranks. Rows are checked
 * against their loaded pattern (--check).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "idgen.h"

#define KEY_MAX 32
#define LOAD_PIPELINE 512

typedef struct opts {
    const char *host;
    int port, rank, iters, warmup;
    uint64_t rows, seed;
    uint32_t dim, batch;
    bool zipf, load, json, check;
    double zipf_s;
} opts_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float value_of(uint64_t row, uint32_t j)
{
    return (float)(row % 100003u) + (float)j * 0.25f;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        {"host", 1, 0, 'H'}, {"port", 1, 0, 'P'}, {"rank", 1, 0, 'R'}, {"rows", 1, 0, 'r'},
        {"dim", 1, 0, 'd'}, {"batch", 1, 0, 'b'}, {"dist", 1, 0, 't'}, {"zipf-s", 1, 0, 'z'},
        {"iters", 1, 0, 'n'}, {"warmup", 1, 0, 'w'}, {"seed", 1, 0, 's'}, {"load", 0, 0, 'l'},
        {"json", 0, 0, 'j'}, {"check", 0, 0, 'c'}, {0, 0, 0, 0}};
    *o = (opts_t){.host = "127.0.0.1", .port = 6379, .iters = 200, .warmup = 20,
                  .rows = 1000000, .seed = 1, .dim = 64, .batch = 512, .zipf_s = 1.05};
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'H': o->host = optarg; break;
        case 'P': o->port = atoi(optarg); break;
        case 'R': o->rank = atoi(optarg); break;
        case 'r': o->rows = strtoull(optarg, NULL, 10); break;
        case 'd': o->dim = (uint32_t)atoi(optarg); break;
        case 'b': o->batch = (uint32_t)atoi(optarg); break;
        case 't': o->zipf = strcmp(optarg, "zipf") == 0; break;
        case 'z': o->zipf_s = atof(optarg); break;
        case 'n': o->iters = atoi(optarg); break;
        case 'w': o->warmup = atoi(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        case 'l': o->load = true; break;
        case 'j': o->json = true; break;
        case 'c': o->check = true; break;
        default: return 2;
        }
    }
    return o->rows == 0 || o->dim == 0 || o->batch == 0 || o->iters < 1 ? 2 : 0;
}

static int load(redisContext *rc, const opts_t *o)
{
    float *val = malloc(o->dim * sizeof(float));
    if (val == NULL)
        return 1;
    for (uint64_t r = 0; r < o->rows; r++) {
        char key[KEY_MAX];
        for (uint32_t j = 0; j < o->dim; j++)
            val[j] = value_of(r, j);
        snprintf(key, sizeof(key), "e:%llu", (unsigned long long)r);
        redisAppendCommand(rc, "SET %s %b", key, (const void *)val, (size_t)o->dim * sizeof(float));
        if ((r + 1) % LOAD_PIPELINE == 0 || r + 1 == o->rows) {
            uint64_t n = (r % LOAD_PIPELINE) + 1;
            for (uint64_t k = 0; k < n; k++) {
                redisReply *rep;
                if (redisGetReply(rc, (void **)&rep) != REDIS_OK) {
                    fprintf(stderr, "redis-emb-bench: load: %s\n", rc->errstr);
                    free(val);
                    return 1;
                }
                freeReplyObject(rep);
            }
        }
    }
    free(val);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One MGET of batch keys; rows checked against their pattern with --check. */
static int mget(redisContext *rc, const opts_t *o, const char **argv, const size_t *argl,
                const uint64_t *ids)
{
    redisReply *rep = redisCommandArgv(rc, (int)o->batch + 1, argv, argl);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != o->batch) {
        fprintf(stderr, "redis-emb-bench: MGET failed: %s\n", rep == NULL ? rc->errstr : "reply");
        if (rep != NULL)
            freeReplyObject(rep);
        return 1;
    }
    int bad = 0;
    for (size_t k = 0; o->check && k < o->batch && !bad; k++) {
        const redisReply *e = rep->element[k];
        float v;
        bad = e->type != REDIS_REPLY_STRING || e->len != (size_t)o->dim * sizeof(float);
        if (!bad) {
            memcpy(&v, e->str + (o->dim - 1) * sizeof(float), sizeof(v));
            bad = v != value_of(ids[k], o->dim - 1);
        }
        if (bad)
            fprintf(stderr, "redis-emb-bench: row %llu wrong or missing\n",
                    (unsigned long long)ids[k]);
    }
    freeReplyObject(rep);
    return bad;
}

static int run(redisContext *rc, const opts_t *o)
{
    size_t total = (size_t)(o->warmup + o->iters) * o->batch;
    uint64_t *ids = malloc(total * sizeof(uint64_t));
    char (*keys)[KEY_MAX] = malloc(total * KEY_MAX);
    const char **argv = malloc((o->batch + 1) * sizeof(char *));
    size_t *argl = malloc((o->batch + 1) * sizeof(size_t));
    double *lat = malloc((size_t)o->iters * sizeof(double));
    if (ids == NULL || keys == NULL || argv == NULL || argl == NULL || lat == NULL)
        return 1;
    idgen_t g;
    idgen_init(&g, o->rows, o->zipf, o->zipf_s, idgen_seed(o->seed, o->rank, 0));
    for (size_t i = 0; i < total; i++) {
        ids[i] = idgen_next(&g);
        snprintf(keys[i], KEY_MAX, "e:%llu", (unsigned long long)ids[i]);
    }
    argv[0] = "MGET";
    argl[0] = 4;
    int rc_ = 0;
    double t0 = now_s();
    for (int it = 0; it < o->warmup + o->iters && rc_ == 0; it++) {
        if (it == o->warmup)
            t0 = now_s();
        for (uint32_t k = 0; k < o->batch; k++) {
            argv[k + 1] = keys[(size_t)it * o->batch + k];
            argl[k + 1] = strlen(argv[k + 1]);
        }
        double c0 = now_s();
        rc_ = mget(rc, o, argv, argl, ids + (size_t)it * o->batch);
        if (it >= o->warmup)
            lat[it - o->warmup] = (now_s() - c0) * 1e6;
    }
    double secs = now_s() - t0;
    if (rc_ == 0) {
        qsort(lat, (size_t)o->iters, sizeof(double), cmp_double);
        double p50 = lat[o->iters / 2], p99 = lat[(size_t)(o->iters * 99) / 100];
        double ids_s = (double)o->iters * o->batch / secs;
        if (o->json)
            printf("{\"tool\": \"redis\", \"rank\": %d, \"rows\": %llu, \"dist\": \"%s\", "
                   "\"dim\": %u, \"batch\": %u, \"calls_per_s\": %.6g, \"ids_per_s\": %.6g, "
                   "\"mb_per_s\": %.6g, \"p50_us\": %.6g, \"p99_us\": %.6g, \"calls\": %d}\n",
                   o->rank, (unsigned long long)o->rows, o->zipf ? "zipf" : "uniform", o->dim,
                   o->batch, o->iters / secs, ids_s, ids_s * o->dim * 4 / 1e6, p50, p99,
                   o->iters);
        else
            printf("rank %d dim %u batch %u: %.5g ids/s, MGET p50 %.1f us p99 %.1f us\n",
                   o->rank, o->dim, o->batch, ids_s, p50, p99);
    }
    free(ids);
    free(keys);
    free(argv);
    free(argl);
    free(lat);
    return rc_;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: redis-emb-bench [--host H] [--port P] [--load] [--rank I] "
                        "[--rows R] [--dim D] [--batch B] [--dist uniform|zipf] [--zipf-s S] "
                        "[--iters N] [--warmup N] [--seed S] [--check] [--json]\n");
        return 2;
    }
    redisContext *rc = redisConnect(o.host, o.port);
    if (rc == NULL || rc->err) {
        fprintf(stderr, "redis-emb-bench: connect %s:%d: %s\n", o.host, o.port,
                rc != NULL ? rc->errstr : "out of memory");
        return 1;
    }
    int r = o.load ? load(rc, &o) : run(rc, &o);
    redisFree(rc);
    return r;
}

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shadowsync/collective.h>

#include "algorithms/knobs.h"
#include "runtime/config.h"
#include "runtime/knob.h"
#include "runtime/log.h"
#include "transport/services.h"
#include "transport/transport.h"
#include "log_capture.h"
#include "unit.h"

/* A fake environment: NULL-terminated name, value pairs. */
static const char *const *fake_env;

static const char *fake_getenv(const char *name)
{
    for (const char *const *e = fake_env; e != NULL && e[0] != NULL; e += 2)
        if (strcmp(e[0], name) == 0)
            return e[1];
    return NULL;
}

static shs_status_t load(shs__config_t *cfg, const char *const *env)
{
    fake_env = env;
    return shs__config_load_from(cfg, fake_getenv);
}

START_TEST(test_defaults)
{
    shs__config_t c;
    const char *const env[] = {NULL};
    ck_assert_int_eq(load(&c, env), SHS_OK);
    ck_assert_int_eq(c.log_level, SHS_LOG_LVL_WARN);
    ck_assert_int_eq(c.rank, -1);
    ck_assert_int_eq(c.size, -1);
    ck_assert_str_eq(c.bootstrap, "127.0.0.1:18520");
    ck_assert_str_eq(c.job_token, "default");
    ck_assert_int_eq(c.bootstrap_timeout_ms, 60000);
    ck_assert_int_eq(c.bootstrap_handshake_ms, 10000);
    ck_assert_str_eq(c.device, "");
    ck_assert_int_eq(c.ib_port, 0);
    ck_assert_int_eq(c.gid_index, -1);
    ck_assert_int_eq(c.connect_mode, SHS_CONNECT_AUTO);
    ck_assert_int_eq(c.qps_per_peer, 1);
    ck_assert_int_eq(c.connect_timeout_ms, 15000);
    ck_assert_int_eq(c.qp_timeout, -1); /* auto: chosen per device */
    ck_assert_int_eq(c.qp_retry_cnt, 7);
    ck_assert_int_eq(c.qp_rnr_retry, 6);
    ck_assert_int_eq(c.sq_depth, 256);
    ck_assert_int_eq(c.rq_depth, 256);
    ck_assert_int_eq(c.signal_every, 16);
    ck_assert_uint_eq(c.max_chunk, 1u << 20);
    ck_assert_uint_eq(c.read_chunk, 1u << 20);
    ck_assert_uint_eq(c.read_inflight, 4u << 20);
    ck_assert_uint_eq(c.msg_size, 0);
    ck_assert_int_eq(c.op_timeout_ms, 10000);
    ck_assert_int_eq(c.hugepages, SHS_TRI_AUTO);
    ck_assert_str_eq(captured(), "");
}
END_TEST

/* Every knob set to a value other than its default, all at once. */
static const char *const every_knob[] = {
    "SHS_LOG", "error",
    "SHS_RANK", "5",
    "SHS_SIZE", "9",
    "SHS_BOOTSTRAP", "[fe80::2]:4242,node2:4243",
    "SHS_REJOIN", "1",
    "SHS_JOB_TOKEN", "job-77",
    "SHS_BOOTSTRAP_TIMEOUT_MS", "1234",
    "SHS_BOOTSTRAP_HANDSHAKE_TIMEOUT_MS", "321",
    "SHS_DEVICE", "mlx5_1",
    "SHS_IB_PORT", "2",
    "SHS_GID_INDEX", "3",
    "SHS_CONNECT", "OOB",
    "SHS_QPS_PER_PEER", "4",
    "SHS_CONNECT_TIMEOUT_MS", "2500",
    "SHS_QP_TIMEOUT", "18",
    "SHS_QP_RETRY", "3",
    "SHS_QP_RNR_RETRY", "0",
    "SHS_SQ_DEPTH", "1024",
    "SHS_RQ_DEPTH", "64",
    "SHS_SIGNAL_EVERY", "1024",
    "SHS_MAX_CHUNK", "64k",
    "SHS_READ_CHUNK", "256k",
    "SHS_READ_INFLIGHT", "0",
    "SHS_MSG_SIZE", "4k",
    "SHS_OP_TIMEOUT_MS", "77",
    "SHS_HUGEPAGES", "on",
    "SHS_SHADOW_PIN", "2-3",
    "SHS_SHADOW_WAIT_MS", "4321",
    "SHS_SHADOW_CHUNK", "256k",
    "SHS_SHADOW_CHANNEL", "7",
    "SHS_SHADOW_NAP", "0",
    "SHS_SHADOW_WIRE", "bf16",
    "SHS_SHADOW_STRAGGLER_MS", "750",
    "SHS_SHADOW_REJOIN_SEED", "Own",
    "SHS_COLL_CHUNK", "64k",
    "SHS_COLL_SLOTS", "8",
    "SHS_COLL_STAGE", "0",
    "SHS_COLL_CHANNEL", "7",
    "SHS_COLL_EAGER", "0",
    "SHS_COLL_MIN_CHUNK", "4k",
    "SHS_COLL_WIRE", "BF16",
    "SHS_EMB_OWNER_READS", "9",
    "SHS_EMB_APPLY_NAP_US", "15",
    "SHS_EMB_SLOTS", "12",
    "SHS_EMB_READ_TRIES", "7",
    "SHS_EMB_CACHE_ROWS", "5000",
    "SHS_EMB_CACHE_AGE", "9",
    "SHS_EMB_CACHE_OWN", "keep",
    "SHS_POLL_SPIN", "123456",
    NULL,
};

START_TEST(test_every_knob_parses)
{
    shs__config_t c;
    ck_assert_int_eq(load(&c, every_knob), SHS_OK);
    ck_assert_int_eq(c.log_level, SHS_LOG_LVL_ERROR);
    ck_assert_int_eq(c.rank, 5);
    ck_assert_int_eq(c.size, 9);
    ck_assert_str_eq(c.bootstrap, "[fe80::2]:4242,node2:4243");
    ck_assert_str_eq(c.job_token, "job-77");
    ck_assert_int_eq(c.bootstrap_timeout_ms, 1234);
    ck_assert_int_eq(c.bootstrap_handshake_ms, 321);
    ck_assert_str_eq(c.device, "mlx5_1");
    ck_assert_int_eq(c.ib_port, 2);
    ck_assert_int_eq(c.gid_index, 3);
    ck_assert_int_eq(c.connect_mode, SHS_CONNECT_OOB);
    ck_assert_int_eq(c.qps_per_peer, 4);
    ck_assert_int_eq(c.connect_timeout_ms, 2500);
    ck_assert_int_eq(c.qp_timeout, 18);
    ck_assert_int_eq(c.qp_retry_cnt, 3);
    ck_assert_int_eq(c.qp_rnr_retry, 0);
    ck_assert_int_eq(c.sq_depth, 1024);
    ck_assert_int_eq(c.rq_depth, 64);
    ck_assert_int_eq(c.signal_every, 1024);
    ck_assert_uint_eq(c.max_chunk, 65536);
    ck_assert_uint_eq(c.read_chunk, 256 * 1024);
    ck_assert_uint_eq(c.read_inflight, 0);
    ck_assert_uint_eq(c.msg_size, 4096);
    ck_assert_int_eq(c.op_timeout_ms, 77);
    ck_assert_int_eq(c.hugepages, SHS_TRI_ON);
    ck_assert_str_eq(c.shadow_pin, "2-3");
    ck_assert_int_eq(c.shadow_wait_ms, 4321);
    ck_assert_uint_eq(c.shadow_chunk, 256 * 1024);
    ck_assert_int_eq(c.shadow_channel, 7);
    ck_assert_int_eq(c.shadow_nap, 0);
    ck_assert_int_eq(c.shadow_wire, SHS_WIRE_BF16);
    ck_assert_int_eq(c.shadow_straggler_ms, 750);
    ck_assert_int_eq(c.shadow_rejoin_seed, 1); /* own */
    ck_assert_uint_eq(c.coll_chunk, 65536);
    ck_assert_int_eq(c.coll_slots, 8);
    ck_assert_uint_eq(c.coll_stage, 0);
    ck_assert_int_eq(c.coll_channel, 7);
    ck_assert_uint_eq(c.coll_eager, 0);
    ck_assert_uint_eq(c.coll_min_chunk, 4096);
    ck_assert_int_eq(c.coll_wire, SHS_WIRE_BF16);
    ck_assert_int_eq(c.emb_owner_reads, 9);
    ck_assert_int_eq(c.emb_apply_nap_us, 15);
    ck_assert_int_eq(c.emb_slots, 12);
    ck_assert_int_eq(c.emb_read_tries, 7);
    ck_assert_int_eq(c.emb_cache_rows, 5000);
    ck_assert_int_eq(c.emb_cache_age, 9);
    ck_assert_int_eq(c.emb_cache_own, 1);
    ck_assert_int_eq(c.poll_spin, 123456);
}
END_TEST

/* A knob added to the table without a line above fails here. */
START_TEST(test_every_table_entry_is_covered)
{
    size_t n = shs__config_knob_count();
    size_t listed = 0;
    for (const char *const *e = every_knob; e[0] != NULL; e += 2)
        listed++;
    ck_assert_uint_eq(n, listed);
    for (size_t i = 0; i < n; i++) {
        fake_env = every_knob;
        const char *name = shs__config_knob_name(i);
        ck_assert_msg(fake_getenv(name) != NULL, "knob %s has no test value", name);
        ck_assert_str_ne(fake_getenv(name), shs__config_knob_default(i));
        ck_assert_int_eq(shs__config_knob_index_n(name, strlen(name)), (int)i);
    }
    ck_assert_ptr_null(shs__config_knob_name(n));
    ck_assert_int_eq(shs__config_knob_index_n("SHS_QP_TIMEOUTX", 15), -1);
    ck_assert_int_eq(shs__config_knob_index_n("SHS_QP_TIMEOUT", 13), -1);
}
END_TEST

START_TEST(test_sizes_and_words)
{
    shs__config_t c;
    const char *const env1[] = {"SHS_MAX_CHUNK", "8M", "SHS_HUGEPAGES", "0",
                                "SHS_LOG", "4", "SHS_GID_INDEX", "auto", NULL};
    ck_assert_int_eq(load(&c, env1), SHS_OK);
    ck_assert_uint_eq(c.max_chunk, 8u << 20);
    ck_assert_int_eq(c.hugepages, SHS_TRI_OFF);
    ck_assert_int_eq(c.log_level, SHS_LOG_LVL_TRACE);
    ck_assert_int_eq(c.gid_index, -1);
    const char *const env2[] = {"SHS_MAX_CHUNK", "2g", "SHS_CONNECT", "rdmacm", NULL};
    ck_assert_int_eq(load(&c, env2), SHS_OK);
    ck_assert_uint_eq(c.max_chunk, 1ull << 31);
    ck_assert_int_eq(c.connect_mode, SHS_CONNECT_RDMACM);
}
END_TEST

static const char *const bad_values[][2] = {
    {"SHS_QP_TIMEOUT", "abc"},
    {"SHS_QP_TIMEOUT", "0"},
    {"SHS_QP_TIMEOUT", "32"},
    {"SHS_QP_TIMEOUT", "14x"},
    {"SHS_QP_TIMEOUT", " 14"},
    {"SHS_QP_TIMEOUT", "+14"},
    {"SHS_QP_TIMEOUT", ""},
    {"SHS_QP_RETRY", "8"},
    {"SHS_QP_RNR_RETRY", "7"},
    {"SHS_RANK", "-1"},
    {"SHS_SIZE", "0"},
    {"SHS_IB_PORT", "99999999999999999999"},
    {"SHS_CONNECT", "tcp"},
    {"SHS_HUGEPAGES", "maybe"},
    {"SHS_LOG", "loud"},
    {"SHS_MAX_CHUNK", "1T"},
    {"SHS_MAX_CHUNK", "3g"},
    {"SHS_MAX_CHUNK", "-1"},
    {"SHS_MAX_CHUNK", "k"},
    {"SHS_BOOTSTRAP", "host"},
    {"SHS_BOOTSTRAP", "host:0"},
    {"SHS_BOOTSTRAP", "host:70000"},
    {"SHS_BOOTSTRAP", "::1:5"},
    {"SHS_BOOTSTRAP", "[::1]5"},
    {"SHS_BOOTSTRAP", ":80"},
    {"SHS_BOOTSTRAP", "host:8o"},
    {"SHS_BOOTSTRAP", "host:80,"},
    {"SHS_BOOTSTRAP", "host:80,other"},
    {"SHS_REJOIN", "2"},
    {"SHS_JOB_TOKEN", "a b"},
    {"SHS_JOB_TOKEN", ""},
    {"SHS_DEVICE", "a-device-name-that-is-far-longer-than-the-sixty-four-bytes-it-may-use"},
    {"SHS_OP_TIMEOUT_MS", "0"},
};

START_TEST(test_bad_value_rejected_and_named)
{
    const char *name = bad_values[_i][0], *value = bad_values[_i][1];
    const char *const env[] = {name, value, NULL};
    shs__config_t c;
    memset(&c, 0x5a, sizeof(c));
    ck_assert_int_eq(load(&c, env), SHS_ERR_CONFIG);
    /* Written only on success. */
    ck_assert_int_eq(c.rank, 0x5a5a5a5a);
    const char *out = captured();
    char want[160];
    /* the job token is a secret: named, never shown */
    bool secret = strcmp(name, "SHS_JOB_TOKEN") == 0;
    snprintf(want, sizeof(want), "invalid %s=\"%s\"", name, secret ? "(hidden)" : value);
    ck_assert_msg(strstr(out, want) != NULL, "log \"%s\" lacks \"%s\"", out, want);
    if (secret && value[0] != '\0')
        ck_assert_msg(strstr(out, value) == NULL, "log \"%s\" shows the token", out);
}
END_TEST

/* Every numeric knob that takes no negative value refuses one, named,
 * rather than wrapping it (strtoull takes "-1" for ULLONG_MAX) or reading
 * it as its "auto": each table's knobs, the ones added later included. */
START_TEST(test_negative_refused_by_every_unsigned_knob)
{
    static const char *const negatives[] = {"-1", "-0", "-4k", "-9223372036854775808"};
    size_t checked = 0;
    for (const shs__knob_table_t *const *t = shs__knob_tables; *t != NULL; t++) {
        for (size_t i = 0; i < (*t)->count; i++) {
            const shs__knob_t *k = &(*t)->knobs[i];
            bool numeric = k->parse == shs__knob_parse_int ||
                           k->parse == shs__knob_parse_int_auto ||
                           k->parse == shs__knob_parse_size;
            if (!numeric || k->min < 0)
                continue;
            for (size_t v = 0; v < sizeof(negatives) / sizeof(negatives[0]); v++) {
                /* "-0" is zero: a knob whose range holds 0 may take it */
                if (strcmp(negatives[v], "-0") == 0 && k->min == 0)
                    continue;
                const char *const env[] = {k->name, negatives[v], NULL};
                shs__config_t c;
                char want[160];
                ck_assert_msg(load(&c, env) == SHS_ERR_CONFIG, "%s=%s accepted", k->name,
                              negatives[v]);
                snprintf(want, sizeof(want), "invalid %s=\"%s\"", k->name, negatives[v]);
                ck_assert_msg(strstr(captured(), want) != NULL, "log \"%s\" lacks \"%s\"",
                              captured(), want);
                capture_stop(); /* a fresh log for the next value */
                capture_start();
                checked++;
            }
        }
    }
    /* the tables hold dozens of such knobs: a loop that saw none checked nothing */
    ck_assert_uint_gt(checked, 60);
}
END_TEST

/* A token set in the environment is listed at SHS_LOG=info, never shown. */
START_TEST(test_token_never_logged)
{
    const char *const env[] = {"SHS_LOG", "info", "SHS_JOB_TOKEN", "s3cret-Tok3n", NULL};
    shs__config_t c;
    ck_assert_int_eq(load(&c, env), SHS_OK);
    ck_assert_str_eq(c.job_token, "s3cret-Tok3n");
    ck_assert_ptr_nonnull(strstr(captured(), "SHS_JOB_TOKEN=(hidden)"));
    ck_assert_ptr_null(strstr(captured(), "s3cret"));
}
END_TEST

START_TEST(test_every_bad_knob_reported)
{
    const char *const env[] = {"SHS_QP_TIMEOUT", "x", "SHS_SQ_DEPTH", "y", NULL};
    shs__config_t c;
    ck_assert_int_eq(load(&c, env), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "SHS_QP_TIMEOUT"));
    ck_assert_ptr_nonnull(strstr(captured(), "SHS_SQ_DEPTH"));
}
END_TEST

START_TEST(test_cross_field_checks)
{
    shs__config_t c;
    const char *const env1[] = {"SHS_SIGNAL_EVERY", "512", NULL};
    ck_assert_int_eq(load(&c, env1), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "SHS_SIGNAL_EVERY=512 exceeds SHS_SQ_DEPTH=256"));
    const char *const env2[] = {"SHS_RANK", "4", "SHS_SIZE", "4", NULL};
    ck_assert_int_eq(load(&c, env2), SHS_ERR_CONFIG);
    /* One of the pair may stay unknown for a parameter struct to fill. */
    const char *const env3[] = {"SHS_RANK", "4", NULL};
    ck_assert_int_eq(load(&c, env3), SHS_OK);
    ck_assert_int_eq(c.rank, 4);
    ck_assert_int_eq(c.size, -1);
}
END_TEST

static const struct {
    const char *env[16];
    int rank, size;
} launcher_cases[] = {
    {{"OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "8", NULL}, 3, 8},
    {{"PMI_RANK", "1", "PMI_SIZE", "2", NULL}, 1, 2},
    {{"PMIX_RANK", "6", "PMIX_SIZE", "7", NULL}, 6, 7},
    /* srun --mpi=pmix: size from Slurm, which agrees on the rank */
    {{"PMIX_RANK", "2", "SLURM_PROCID", "2", "SLURM_NTASKS", "16", NULL}, 2, 16},
    /* PMIx rank with an unrelated Slurm rank: size stays unknown */
    {{"PMIX_RANK", "2", "SLURM_PROCID", "0", "SLURM_NTASKS", "4", NULL}, 2, -1},
    {{"SLURM_PROCID", "11", "SLURM_NTASKS", "12", NULL}, 11, 12},
    {{"RANK", "4", "WORLD_SIZE", "5", NULL}, 4, 5},
    /* mpirun inside a Slurm allocation: SLURM_PROCID numbers the daemons */
    {{"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "OMPI_COMM_WORLD_RANK", "5",
      "OMPI_COMM_WORLD_SIZE", "6", NULL}, 5, 6},
    /* torchrun under srun: RANK counts workers, SLURM_PROCID nodes */
    {{"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "RANK", "9", "WORLD_SIZE", "16",
      "TORCHELASTIC_RUN_ID", "abc", NULL}, 9, 16},
    /* without torchrun's marker, a stray RANK loses to Slurm */
    {{"SLURM_PROCID", "1", "SLURM_NTASKS", "2", "RANK", "9", "WORLD_SIZE", "16", NULL}, 1, 2},
    /* SHS_* wins over the launcher */
    {{"SHS_RANK", "2", "SHS_SIZE", "8", "OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE",
      "16", NULL}, 2, 8},
    /* and each one separately */
    {{"SHS_SIZE", "32", "OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "16", NULL}, 5, 32},
    {{"SHS_RANK", "auto", "OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "16", NULL}, 5, 16},
    /* an empty variable counts as unset */
    {{"OMPI_COMM_WORLD_RANK", "", "PMI_RANK", "0", "PMI_SIZE", "3", NULL}, 0, 3},
};

START_TEST(test_launcher_detection)
{
    shs__config_t c;
    ck_assert_int_eq(load(&c, launcher_cases[_i].env), SHS_OK);
    ck_assert_int_eq(c.rank, launcher_cases[_i].rank);
    ck_assert_int_eq(c.size, launcher_cases[_i].size);
}
END_TEST

START_TEST(test_launcher_bad_values)
{
    shs__config_t c;
    const char *const env1[] = {"OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_SIZE", "2", NULL};
    ck_assert_int_eq(load(&c, env1), SHS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(captured(), "OMPI_COMM_WORLD_RANK=\"x\""));
    const char *const env2[] = {"SLURM_PROCID", "3", "SLURM_NTASKS", "3", NULL};
    ck_assert_int_eq(load(&c, env2), SHS_ERR_CONFIG);
}
END_TEST

START_TEST(test_bootstrap_address)
{
    shs__config_t c;
    const char *const env1[] = {"MASTER_ADDR", "node7", "MASTER_PORT", "29500", NULL};
    ck_assert_int_eq(load(&c, env1), SHS_OK);
    ck_assert_str_eq(c.bootstrap, "node7:29501");
    const char *const env2[] = {"MASTER_ADDR", "10.0.0.4", NULL};
    ck_assert_int_eq(load(&c, env2), SHS_OK);
    ck_assert_str_eq(c.bootstrap, "10.0.0.4:18520");
    const char *const env3[] = {"MASTER_ADDR", "fe80::1", "MASTER_PORT", "1000", NULL};
    ck_assert_int_eq(load(&c, env3), SHS_OK);
    ck_assert_str_eq(c.bootstrap, "[fe80::1]:1001");
    const char *const env4[] = {"SHS_BOOTSTRAP", "head:5000", "MASTER_ADDR", "node7", NULL};
    ck_assert_int_eq(load(&c, env4), SHS_OK);
    ck_assert_str_eq(c.bootstrap, "head:5000");
    const char *const env5[] = {"MASTER_ADDR", "node7", "MASTER_PORT", "65535", NULL};
    ck_assert_int_eq(load(&c, env5), SHS_ERR_CONFIG);
    const char *const env6[] = {"MASTER_ADDR", "node7", "MASTER_PORT", "http", NULL};
    ck_assert_int_eq(load(&c, env6), SHS_ERR_CONFIG);
}
END_TEST

START_TEST(test_job_token)
{
    shs__config_t c;
    const char *const env1[] = {"SLURM_JOB_ID", "123", "SLURM_STEP_ID", "4", NULL};
    ck_assert_int_eq(load(&c, env1), SHS_OK);
    ck_assert_str_eq(c.job_token, "slurm-123.4");
    const char *const env2[] = {"OMPI_MCA_ess_base_jobid", "4711", NULL};
    ck_assert_int_eq(load(&c, env2), SHS_OK);
    ck_assert_str_eq(c.job_token, "ompi-4711");
    const char *const env3[] = {"OMPI_MCA_orte_ess_jobid", "99", NULL};
    ck_assert_int_eq(load(&c, env3), SHS_OK);
    ck_assert_str_eq(c.job_token, "ompi-99");
    const char *const env4[] = {"PMIX_NAMESPACE", "prterun-host-1@1", NULL};
    ck_assert_int_eq(load(&c, env4), SHS_OK);
    ck_assert_str_eq(c.job_token, "pmix-prterun-host-1@1");
    const char *const env5[] = {"SHS_JOB_TOKEN", "mine", "SLURM_JOB_ID", "123", NULL};
    ck_assert_int_eq(load(&c, env5), SHS_OK);
    ck_assert_str_eq(c.job_token, "mine");
    const char *const env6[] = {"TORCHELASTIC_RUN_ID", "none", NULL};
    ck_assert_int_eq(load(&c, env6), SHS_OK);
    ck_assert_str_eq(c.job_token, "default");
    const char *const env7[] = {"PMIX_NAMESPACE", "a b", NULL};
    ck_assert_int_eq(load(&c, env7), SHS_OK);
    ck_assert_str_eq(c.job_token, "pmix-a_b");
}
END_TEST

START_TEST(test_info_prints_changed_knobs_only)
{
    shs__config_t c;
    const char *const env[] = {"SHS_LOG", "info", "SHS_QP_TIMEOUT", "16", "SHS_QP_RETRY", "7",
                               "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", NULL};
    ck_assert_int_eq(load(&c, env), SHS_OK);
    const char *out = captured();
    ck_assert_ptr_nonnull(strstr(out, "info: SHS_QP_TIMEOUT=16 (default auto)\n"));
    ck_assert_ptr_nonnull(strstr(out, "info: SHS_LOG=info (default warn)\n"));
    ck_assert_ptr_null(strstr(out, "SHS_QP_RETRY"));
    ck_assert_ptr_nonnull(strstr(out, "launcher open mpi"));
}
END_TEST

START_TEST(test_silent_at_warn)
{
    shs__config_t c;
    const char *const env[] = {"SHS_QP_TIMEOUT", "16", NULL};
    ck_assert_int_eq(load(&c, env), SHS_OK);
    ck_assert_str_eq(captured(), "");
}
END_TEST

START_TEST(test_default_token_noted_at_debug)
{
    shs__config_t c;
    const char *const env[] = {"SHS_LOG", "debug", NULL};
    ck_assert_int_eq(load(&c, env), SHS_OK);
    ck_assert_ptr_nonnull(strstr(captured(), "debug: no SHS_JOB_TOKEN and no launcher job id"));
}
END_TEST

/* The real environment: this runs in Check's forked child, so setenv stays there. */
START_TEST(test_load_from_process_env)
{
    shs__config_t c;
    setenv("SHS_LOG", "warn", 1);
    setenv("SHS_RANK", "1", 1);
    setenv("SHS_SIZE", "2", 1);
    setenv("SHS_QP_TIMOUT", "3", 1);
    /* what tools/shs-vm and tools/run-tests put in the environment */
    static const char *const harness[] = {
        "SHS_VM_DEV", "SHS_VM_ADDR", "SHS_VM_GID_INDEX", "SHS_VM_INDEX", "SHS_VM_COUNT",
        "SHS_VM_PEERS", "SHS_VM_OUT", "SHS_VM_MTU", "SHS_VM_CWD", "SHS_VM_TIMEOUT",
        "SHS_VM_MEM", "SHS_VM_SMP", "SHS_VM_CACHE", "SHS_VM_MODULES", "SHS_VM_KERNEL_PKG",
        "SHS_VM_GRACE", "SHS_TEST_DEVICE", "SHS_WERROR", NULL};
    for (const char *const *h = harness; *h != NULL; h++)
        setenv(*h, "1", 1);
    ck_assert_int_eq(shs__config_load(&c), SHS_OK);
    ck_assert_int_eq(c.rank, 1);
    ck_assert_int_eq(shs__log_level(), SHS_LOG_LVL_WARN);
    const char *out = captured();
    ck_assert_ptr_nonnull(strstr(out, "shadowsync[rank 1] warn: SHS_QP_TIMOUT is not a knob "
                                      "(ignored); did you mean SHS_QP_TIMEOUT?\n"));
    for (const char *const *h = harness; *h != NULL; h++)
        ck_assert_msg(strstr(out, *h) == NULL, "%s warns: %s", *h, out);
    setenv("SHS_LOG", "error", 1);
    ck_assert_int_eq(shs__config_load(&c), SHS_OK);
    ck_assert_int_eq(shs__log_level(), SHS_LOG_LVL_ERROR);
    setenv("SHS_QP_RNR_RETRY", "7", 1);
    ck_assert_int_eq(shs__config_load(&c), SHS_ERR_CONFIG);
    shs__log_set_rank(-1);
}
END_TEST

/* The printed knob table, NUL-terminated, in a static buffer; *len_p its length. */
static const char *printed_table(size_t *len_p)
{
    static char buf[16384];
    FILE *f = tmpfile();
    ck_assert_ptr_nonnull(f);
    shs__config_print_table(f);
    rewind(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    ck_assert_msg(feof(f), "the knob table outgrew the test's buffer");
    buf[n] = '\0';
    fclose(f);
    *len_p = n;
    return buf;
}

START_TEST(test_print_table)
{
    size_t n;
    const char *buf = printed_table(&n);
    size_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    ck_assert_uint_eq(lines, shs__config_knob_count() + 2);
    ck_assert_int_eq(strncmp(buf, "| knob | default | meaning |\n| --- | --- | --- |\n", 48), 0);
    ck_assert_ptr_nonnull(strstr(buf, "\n| `SHS_QP_RNR_RETRY` | `6` | "));
    ck_assert_ptr_nonnull(strstr(buf, "\n| `SHS_DEVICE` | `\"\"` | "));
}
END_TEST

static bool table_has(const shs__knob_table_t *t, const char *name)
{
    for (size_t i = 0; i < t->count; i++)
        if (strcmp(t->knobs[i].name, name) == 0)
            return true;
    return false;
}

/* Knobs declared by the tables of the layers above the runtime
 * (transport/knobs.c, algorithms/coll_knobs.c) reach the misspelling check,
 * the table printer and the resolution through the registered list, and a
 * context parameter still wins over the environment. Runs in Check's forked
 * child, so setenv stays there. */
START_TEST(test_layer_tables_registered)
{
    ck_assert(table_has(&shs__transport_knob_table, "SHS_RQ_DEPTH"));
    ck_assert(table_has(&shs__coll_knob_table, "SHS_COLL_SLOTS"));
    ck_assert(!table_has(&shs__runtime_knob_table, "SHS_RQ_DEPTH"));
    ck_assert(!table_has(&shs__runtime_knob_table, "SHS_COLL_SLOTS"));

    shs__config_t c;
    setenv("SHS_RQ_DEPHT", "8", 1);
    setenv("SHS_COLL_SLOT", "2", 1);
    ck_assert_int_eq(shs__config_load(&c), SHS_OK);
    const char *out = captured();
    ck_assert_ptr_nonnull(strstr(out, "warn: SHS_RQ_DEPHT is not a knob (ignored); did you "
                                      "mean SHS_RQ_DEPTH?\n"));
    ck_assert_ptr_nonnull(strstr(out, "warn: SHS_COLL_SLOT is not a knob (ignored); did you "
                                      "mean SHS_COLL_SLOTS?\n"));

    size_t n;
    const char *buf = printed_table(&n);
    ck_assert_ptr_nonnull(
        strstr(buf, "\n| `SHS_RQ_DEPTH` | `256` | receive queue depth per QP |\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\n| `SHS_COLL_SLOTS` | `4` | "));

    char sysfs[256];
    const char *const env[] = {"SHS_RANK", "1", "SHS_SIZE", "4", "SHS_RQ_DEPTH", "64",
                               "SHS_OP_TIMEOUT_MS", "77", "SHS_COLL_SLOTS", "9", NULL};
    ck_assert_int_eq(load(&c, env), SHS_OK);
    ck_assert_int_eq(c.rq_depth, 64);
    ck_assert_int_eq(c.coll_slots, 9);
    shs_ctx_params_t p = {
        .field_mask = SHS_CTX_PARAM_RQ_DEPTH | SHS_CTX_PARAM_OP_TIMEOUT,
        .rq_depth = 8,
        .op_timeout_ms = 500,
    };
    ck_assert_int_eq(shs__ctx_params_apply(&p, &c, sysfs, sizeof(sysfs)), SHS_OK);
    ck_assert_int_eq(c.rq_depth, 8);
    ck_assert_int_eq(c.op_timeout_ms, 500);
    ck_assert_int_eq(c.coll_slots, 9);
}
END_TEST

START_TEST(test_hostport_split)
{
    char h[64], p[8];
    ck_assert_int_eq(shs__hostport_split("node1:18520", h, sizeof(h), p, sizeof(p)), SHS_OK);
    ck_assert_str_eq(h, "node1");
    ck_assert_str_eq(p, "18520");
    ck_assert_int_eq(shs__hostport_split("[::1]:7", h, sizeof(h), p, sizeof(p)), SHS_OK);
    ck_assert_str_eq(h, "::1");
    ck_assert_str_eq(p, "7");
    ck_assert_int_eq(shs__hostport_split("h:65536", h, sizeof(h), p, sizeof(p)),
                     SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__hostport_split("h:", h, sizeof(h), p, sizeof(p)), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__hostport_split("[]:1", h, sizeof(h), p, sizeof(p)),
                     SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__hostport_split("abcdef:1", h, 4, p, sizeof(p)), SHS_ERR_INVALID_ARG);
    ck_assert_int_eq(shs__hostport_split(NULL, h, sizeof(h), p, sizeof(p)), SHS_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_hostport_list)
{
    char h[64], p[8];
    const char *list = "a:1,[::1]:2,c:3";
    ck_assert_int_eq(shs__hostport_count(list), 3);
    ck_assert_int_eq(shs__hostport_entry(list, 1, h, sizeof(h), p, sizeof(p)), SHS_OK);
    ck_assert_str_eq(h, "::1");
    ck_assert_str_eq(p, "2");
    ck_assert_int_eq(shs__hostport_entry(list, 2, h, sizeof(h), p, sizeof(p)), SHS_OK);
    ck_assert_str_eq(h, "c");
    ck_assert_int_eq(shs__hostport_entry(list, 3, h, sizeof(h), p, sizeof(p)),
                     SHS_ERR_OUT_OF_BOUNDS);
    ck_assert_int_eq(shs__hostport_count("a:1"), 1);
    ck_assert_int_eq(shs__hostport_count("a:1,"), -1);
    ck_assert_int_eq(shs__hostport_count("a:1,,b:2"), -1);
    ck_assert_int_eq(shs__hostport_count("a:1,b"), -1);
    ck_assert_int_eq(shs__hostport_count(""), -1);
    ck_assert_int_eq(shs__hostport_entry(list, -1, h, sizeof(h), p, sizeof(p)),
                     SHS_ERR_INVALID_ARG);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, capture_start, capture_stop);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_hostport_list);
    tcase_add_test(tc, test_every_knob_parses);
    tcase_add_test(tc, test_token_never_logged);
    tcase_add_test(tc, test_every_table_entry_is_covered);
    tcase_add_test(tc, test_sizes_and_words);
    tcase_add_loop_test(tc, test_bad_value_rejected_and_named, 0,
                        (int)(sizeof(bad_values) / sizeof(bad_values[0])));
    tcase_add_test(tc, test_every_bad_knob_reported);
    tcase_add_test(tc, test_negative_refused_by_every_unsigned_knob);
    tcase_add_test(tc, test_cross_field_checks);
    tcase_add_loop_test(tc, test_launcher_detection, 0,
                        (int)(sizeof(launcher_cases) / sizeof(launcher_cases[0])));
    tcase_add_test(tc, test_launcher_bad_values);
    tcase_add_test(tc, test_bootstrap_address);
    tcase_add_test(tc, test_job_token);
    tcase_add_test(tc, test_info_prints_changed_knobs_only);
    tcase_add_test(tc, test_silent_at_warn);
    tcase_add_test(tc, test_default_token_noted_at_debug);
    tcase_add_test(tc, test_load_from_process_env);
    tcase_add_test(tc, test_print_table);
    tcase_add_test(tc, test_hostport_split);
    tcase_add_test(tc, test_layer_tables_registered);
    suite_add_tcase(s, tc);
    return s;
}

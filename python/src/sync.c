/*
 * shadowsync.Collective (ring allreduce, in place) and shadowsync.Shadow
 * (the shadow engine: background or foreground model averaging).
 */
#include <string.h>

#include "shspy.h"

/* ---- Collective ---- */

typedef struct {
    PyObject_HEAD
    shspy_ctx_t *owner;
    shs_coll_t *coll;
} shspy_coll_t;

static int opt_size(PyObject *o, size_t *out, uint64_t bit, uint64_t *mask)
{
    if (o == Py_None)
        return 0;
    Py_ssize_t v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "sizes are not negative");
        return -1;
    }
    *out = (size_t)v;
    *mask |= bit;
    return 0;
}

static int opt_int(PyObject *o, int *out, uint64_t bit, uint64_t *mask)
{
    if (o == Py_None)
        return 0;
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int)v;
    *mask |= bit;
    return 0;
}

/* None (the knob's), "native" or "bf16" as an shs_wire_t field */
static int opt_wire(const char *who, const char *s, int *out, uint64_t bit, uint64_t *mask)
{
    if (s == NULL)
        return 0;
    if (strcmp(s, "native") == 0 || strcmp(s, "bf16") == 0) {
        *out = strcmp(s, "bf16") == 0 ? SHS_WIRE_BF16 : SHS_WIRE_NATIVE;
        *mask |= bit;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s: wire is 'native' or 'bf16', not '%s'", who, s);
    return -1;
}

static int coll_init(shspy_coll_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"context", "stage_bytes", "slot_bytes", "slots", "timeout_ms",
                             "wire", NULL};
    PyObject *ctx, *stage = Py_None, *slot = Py_None, *slots = Py_None, *tmo = Py_None;
    const char *wire = NULL;
    if (self->coll != NULL) {
        PyErr_SetString(PyExc_TypeError, "Collective: already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|$OOOOz", kwlist, &shspy_ctx_type, &ctx,
                                     &stage, &slot, &slots, &tmo, &wire))
        return -1;
    shspy_ctx_t *c = (shspy_ctx_t *)ctx;
    if (shspy_ctx_open(c, "Collective: the context is closed") != 0)
        return -1;
    shs_coll_params_t p;
    memset(&p, 0, sizeof(p));
    if (opt_size(stage, &p.stage_bytes, SHS_COLL_PARAM_STAGE_BYTES, &p.field_mask) != 0 ||
        opt_size(slot, &p.slot_bytes, SHS_COLL_PARAM_SLOT_BYTES, &p.field_mask) != 0 ||
        opt_int(slots, &p.slots, SHS_COLL_PARAM_SLOTS, &p.field_mask) != 0 ||
        opt_int(tmo, &p.timeout_ms, SHS_COLL_PARAM_TIMEOUT, &p.field_mask) != 0 ||
        opt_wire("Collective", wire, &p.wire, SHS_COLL_PARAM_WIRE, &p.field_mask) != 0)
        return -1;
    shs_status_t st;
    shs_coll_t *coll = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_coll_create(c->ctx, &p, &coll);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK) {
        shspy_raise(st, "Collective (collective: every rank passes the same parameters)");
        return -1;
    }
    Py_INCREF(c);
    self->owner = c;
    self->coll = coll;
    c->children++;
    return 0;
}

static void coll_release(shspy_coll_t *self)
{
    if (self->coll != NULL) {
        shs_coll_destroy(self->coll);
        self->coll = NULL;
        self->owner->children--;
    }
}

static void coll_dealloc(shspy_coll_t *self)
{
    coll_release(self);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *coll_close(shspy_coll_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"barrier", NULL};
    int barrier = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &barrier))
        return NULL;
    if (self->coll == NULL)
        Py_RETURN_NONE;
    shs_status_t st = SHS_OK;
    if (barrier && self->owner->ctx != NULL) {
        Py_BEGIN_ALLOW_THREADS
        st = shs_ctx_barrier(self->owner->ctx);
        Py_END_ALLOW_THREADS
    }
    coll_release(self);
    if (st != SHS_OK)
        return shspy_raise(st, "Collective.close: the barrier before it");
    Py_RETURN_NONE;
}

/* group: None (every rank) or a sequence of ranks that holds this rank */
static int parse_group(PyObject *o, int rank, int size, shs_group_t *g, int *has)
{
    *has = 0;
    if (o == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(o, "group: a sequence of ranks");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > SHS_GROUP_MAX) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "group: 1 to %d ranks, not %zd", SHS_GROUP_MAX, n);
        return -1;
    }
    memset(g, 0, sizeof(*g));
    g->size = (int)n;
    g->index = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (v < 0 || v >= size || (i > 0 && v <= g->ranks[i - 1])) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError,
                         "group: ascending distinct ranks of 0..%d, got %ld at position %zd",
                         size - 1, v, i);
            return -1;
        }
        g->ranks[i] = (int)v;
        if (v == rank)
            g->index = (int)i;
    }
    Py_DECREF(seq);
    if (g->index < 0) {
        PyErr_Format(PyExc_ValueError, "group: this rank (%d) is not in it", rank);
        return -1;
    }
    *has = 1;
    return 0;
}

static PyObject *coll_allreduce(shspy_coll_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer", "op", "group", NULL};
    PyObject *obj, *group = Py_None;
    const char *op = "sum";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s$O", kwlist, &obj, &op, &group))
        return NULL;
    if (self->coll == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "Collective.allreduce: closed");
    if (shspy_ctx_open(self->owner, "Collective.allreduce: the context is closed") != 0)
        return NULL;
    shs_reduce_t rop;
    if (strcmp(op, "sum") == 0)
        rop = SHS_REDUCE_SUM;
    else if (strcmp(op, "avg") == 0 || strcmp(op, "mean") == 0)
        rop = SHS_REDUCE_AVG;
    else {
        PyErr_Format(PyExc_ValueError, "Collective.allreduce: op is 'sum' or 'avg', not '%s'", op);
        return NULL;
    }
    shs_group_t g;
    int has_group;
    shs_ctx_t *ctx = self->owner->ctx;
    if (parse_group(group, shs_ctx_rank(ctx), shs_ctx_size(ctx), &g, &has_group) != 0)
        return NULL;
    Py_buffer view;
    char f;
    if (shspy_get_buffer(obj, &view, "fd", 1, "Collective.allreduce", &f) != 0)
        return NULL;
    shs_dtype_t dt = f == 'f' ? SHS_DTYPE_FLOAT32 : SHS_DTYPE_FLOAT64;
    size_t count = (size_t)view.len / (size_t)view.itemsize;
    shspy_region_t *r = shspy_find_region(self->owner, view.buf, (size_t)view.len);
    shs_status_t st;
    const shs_group_t *gp = has_group ? &g : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (r != NULL)
        st = shs_allreduce_region(self->coll, gp, r->region, (size_t)((char *)view.buf - r->addr),
                                  count, dt, rop);
    else
        st = shs_allreduce(self->coll, gp, view.buf, count, dt, rop);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (st == SHS_ERR_UNSUPPORTED)
        return shspy_raise(st, "Collective.allreduce: the buffer is not in a registered region "
                               "and the collective has no staging area (stage_bytes=0)");
    if (st != SHS_OK)
        return shspy_raise(st, "Collective.allreduce");
    return Py_NewRef(obj);
}

static PyObject *coll_stats(shspy_coll_t *self, PyObject *unused)
{
    if (self->coll == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "Collective.stats: closed");
    shs_coll_stats_t s;
    shs_status_t st = shs_coll_get_stats(self->coll, &s);
    if (st != SHS_OK)
        return shspy_raise(st, "Collective.stats");
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "calls", (unsigned long long)s.calls, "bytes_sent",
                         (unsigned long long)s.bytes_sent, "chunks_sent",
                         (unsigned long long)s.chunks_sent, "idle_polls",
                         (unsigned long long)s.idle_polls);
}

static PyMethodDef coll_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))coll_allreduce, METH_VARARGS | METH_KEYWORDS,
     "allreduce(buffer, op='sum', *, group=None) -> buffer: reduce a writable contiguous "
     "float32 or float64 buffer over the ranks (or the ascending ranks of group, which "
     "holds this rank), in place, 'sum' or 'avg'. Zero-copy when the buffer lies in a "
     "Region of the context, staged otherwise. Collective: every member passes the same "
     "count, type, op and group (SizeMismatch otherwise). Releases the GIL."},
    {"stats", (PyCFunction)coll_stats, METH_NOARGS,
     "stats() -> dict: calls, bytes_sent, chunks_sent, idle_polls."},
    {"close", (PyCFunction)(void (*)(void))coll_close, METH_VARARGS | METH_KEYWORDS,
     "close(barrier=True): release the collective, after a barrier so that no peer is "
     "still in a call with this rank."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject shspy_coll_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.Collective",
    .tp_basicsize = sizeof(shspy_coll_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Collective(context, *, stage_bytes=None, slot_bytes=None, slots=None, "
              "timeout_ms=None)\n\nRing allreduce over RC queue pairs (collective to "
              "create: every rank passes the same parameters). stage_bytes sizes the "
              "registered staging area for buffers outside a Region (default: the "
              "SHS_COLL_STAGE knob); the others are the SHS_COLL_* knobs.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)coll_init,
    .tp_dealloc = (destructor)coll_dealloc,
    .tp_methods = coll_methods,
};

/* ---- Shadow ---- */

typedef struct {
    PyObject_HEAD
    shspy_ctx_t *owner;
    shspy_region_t *model;
    shs_shadow_t *sh;
} shspy_shadow_t;

static int pick(const char *what, const char *s, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    PyErr_Format(PyExc_ValueError, "Shadow: unknown %s '%s'", what, s);
    return -1;
}

/* None, or (kind, group_size[, seed]) with kind all|hypercube|general|random */
static int parse_schedule(PyObject *o, shs_schedule_t *s)
{
    static const char *const kinds[] = {"all", "hypercube", "general", "random"};
    const char *kind;
    unsigned long long seed = 0;
    int g = 0, k;
    if (!PyArg_ParseTuple(o, "si|K;schedule: (kind, group_size[, seed])", &kind, &g, &seed))
        return -1;
    if (pick("schedule kind", kind, kinds, 4, &k) != 0)
        return -1;
    memset(s, 0, sizeof(*s));
    s->kind = (shs_schedule_kind_t)k;
    s->group_size = g;
    s->seed = seed;
    return 0;
}

static int shadow_init(shspy_shadow_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"context", "region", "offset", "count", "algorithm", "schedule",
                             "path", "min_interval", "pin_cpus", "bmuf_eta", "bmuf_zeta",
                             "bmuf_nesterov", "easgd_alpha", "wait_timeout_ms", "chunk_bytes",
                             "wire", NULL};
    static const char *const algs[] = {"ma", "bmuf", "easgd"};
    static const char *const paths[] = {"pull", "ring", "live"};
    PyObject *ctx, *region, *count = Py_None, *sched = Py_None, *eta = Py_None,
                           *zeta = Py_None, *nest = Py_None, *alpha = Py_None,
                           *wait = Py_None, *chunk = Py_None;
    Py_ssize_t offset = 0;
    const char *alg = "ma", *path = "pull", *pin = NULL, *wire = NULL;
    double interval = 0;
    if (self->sh != NULL) {
        PyErr_SetString(PyExc_TypeError, "Shadow: already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|$nOsOsdzOOOOOOz", kwlist,
                                     &shspy_ctx_type, &ctx, &shspy_region_type, &region, &offset,
                                     &count, &alg, &sched, &path, &interval, &pin, &eta, &zeta,
                                     &nest, &alpha, &wait, &chunk, &wire))
        return -1;
    shspy_ctx_t *c = (shspy_ctx_t *)ctx;
    shspy_region_t *r = (shspy_region_t *)region;
    if (shspy_ctx_open(c, "Shadow: the context is closed") != 0)
        return -1;
    if (r->owner != c || r->region == NULL) {
        PyErr_SetString(PyExc_ValueError, "Shadow: the region is closed or of another context");
        return -1;
    }
    shs_shadow_params_t p;
    memset(&p, 0, sizeof(p));
    int k;
    if (pick("algorithm", alg, algs, 3, &k) != 0)
        return -1;
    p.algorithm = (shs_shadow_algorithm_t)k;
    if (pick("path", path, paths, 3, &k) != 0)
        return -1;
    p.path = (shs_shadow_path_t)k;
    p.field_mask = SHS_SHADOW_PARAM_ALGORITHM | SHS_SHADOW_PARAM_PATH;
    if (sched != Py_None) {
        if (parse_schedule(sched, &p.schedule) != 0)
            return -1;
        p.field_mask |= SHS_SHADOW_PARAM_SCHEDULE;
    }
    if (interval < 0 || interval > 4000) {
        PyErr_Format(PyExc_ValueError, "Shadow: min_interval is 0..4000 seconds, not %g", interval);
        return -1;
    }
    if (interval > 0) {
        p.min_interval_us = (uint32_t)(interval * 1e6);
        p.field_mask |= SHS_SHADOW_PARAM_MIN_INTERVAL;
    }
    if (pin != NULL) {
        p.pin_cpus = pin;
        p.field_mask |= SHS_SHADOW_PARAM_PIN_CPUS;
    }
    struct {
        PyObject *o;
        float *f;
        uint64_t bit;
    } floats[] = {{eta, &p.bmuf_eta, SHS_SHADOW_PARAM_BMUF_ETA},
                  {zeta, &p.bmuf_zeta, SHS_SHADOW_PARAM_BMUF_ZETA},
                  {alpha, &p.easgd_alpha, SHS_SHADOW_PARAM_EASGD_ALPHA}};
    for (size_t i = 0; i < 3; i++) {
        if (floats[i].o == Py_None)
            continue;
        double v = PyFloat_AsDouble(floats[i].o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        *floats[i].f = (float)v;
        p.field_mask |= floats[i].bit;
    }
    if (nest != Py_None) {
        int v = PyObject_IsTrue(nest);
        if (v < 0)
            return -1;
        p.bmuf_nesterov = v;
        p.field_mask |= SHS_SHADOW_PARAM_BMUF_NESTEROV;
    }
    if (opt_int(wait, &p.wait_timeout_ms, SHS_SHADOW_PARAM_WAIT_TIMEOUT, &p.field_mask) != 0 ||
        opt_size(chunk, &p.chunk_bytes, SHS_SHADOW_PARAM_CHUNK, &p.field_mask) != 0 ||
        opt_wire("Shadow", wire, &p.wire, SHS_SHADOW_PARAM_WIRE, &p.field_mask) != 0)
        return -1;
    if (offset < 0 || offset % 4 != 0 || (size_t)offset >= r->len) {
        PyErr_Format(PyExc_ValueError,
                     "Shadow: offset %zd is not a multiple of 4 inside the region (%zu bytes)",
                     offset, r->len);
        return -1;
    }
    size_t n = (r->len - (size_t)offset) / 4;
    if (count != Py_None) {
        Py_ssize_t v = PyLong_AsSsize_t(count);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v <= 0 || (size_t)v > n) {
            PyErr_Format(PyExc_ValueError,
                         "Shadow: count %zd float32 values do not fit the region after offset "
                         "%zd (%zu fit)", v, offset, n);
            return -1;
        }
        n = (size_t)v;
    }
    shs_status_t st;
    shs_shadow_t *sh = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_shadow_create(c->ctx, r->region, (size_t)offset, n, &p, &sh);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK) {
        shspy_raise(st, "Shadow (collective: every rank passes the same parameters)");
        return -1;
    }
    Py_INCREF(c);
    Py_INCREF(r);
    self->owner = c;
    self->model = r;
    self->sh = sh;
    r->users++;
    c->children++;
    return 0;
}

static void shadow_release(shspy_shadow_t *self)
{
    if (self->sh == NULL)
        return;
    shs_shadow_t *sh = self->sh;
    self->sh = NULL;
    Py_BEGIN_ALLOW_THREADS
    shs_shadow_destroy(sh);
    Py_END_ALLOW_THREADS
    self->model->users--;
    self->owner->children--;
}

static void shadow_dealloc(shspy_shadow_t *self)
{
    shadow_release(self);
    Py_XDECREF(self->model);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

typedef shs_status_t (*shadow_fn)(shs_shadow_t *);

static PyObject *shadow_call(shspy_shadow_t *self, shadow_fn fn, const char *what)
{
    if (self->sh == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, what);
    shs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = fn(self->sh);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK)
        return shspy_raise(st, what);
    Py_RETURN_NONE;
}

static PyObject *shadow_start(shspy_shadow_t *self, PyObject *unused)
{
    return shadow_call(self, shs_shadow_start, "Shadow.start");
}

static PyObject *shadow_stop(shspy_shadow_t *self, PyObject *unused)
{
    return shadow_call(self, shs_shadow_stop, "Shadow.stop");
}

static PyObject *shadow_sync(shspy_shadow_t *self, PyObject *unused)
{
    return shadow_call(self, shs_shadow_sync, "Shadow.sync");
}

static PyObject *shadow_finish(shspy_shadow_t *self, PyObject *unused)
{
    return shadow_call(self, shs_shadow_finish, "Shadow.finish");
}

static PyObject *shadow_close(shspy_shadow_t *self, PyObject *unused)
{
    shadow_release(self);
    Py_RETURN_NONE;
}

static PyObject *shadow_stats(shspy_shadow_t *self, PyObject *unused)
{
    if (self->sh == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "Shadow.stats: closed");
    shs_shadow_stats_t s;
    shs_status_t st = shs_shadow_stats(self->sh, &s);
    if (st != SHS_OK)
        return shspy_raise(st, "Shadow.stats");
    return Py_BuildValue(
        "{s:K,s:d,s:K,s:K,s:d,s:d,s:d,s:d,s:K,s:K,s:K,s:s,s:d,s:O,s:K,s:i,s:K,s:K}",
        "rounds", (unsigned long long)s.rounds, "syncs_per_min", s.syncs_per_min,
        "bytes_read", (unsigned long long)s.bytes_read, "bytes_written",
        (unsigned long long)s.bytes_written, "round_us_mean", s.round_us_mean, "round_us_last",
        s.round_us_last, "round_us_max", s.round_us_max, "wait_us_mean", s.wait_us_mean,
        "torn_retries", (unsigned long long)s.torn_retries, "peers_skipped",
        (unsigned long long)s.peers_skipped, "errors", (unsigned long long)s.errors,
        "last_error", shs_status_string(s.last_error), "staleness_ms_max", s.staleness_ms_max,
        "running", s.running ? Py_True : Py_False, "idle_rounds",
        (unsigned long long)s.idle_rounds, "failed_peers", s.failed_peers,
        "rounds_after_failure", (unsigned long long)s.rounds_after_failure,
        "first_failure_ns", (unsigned long long)s.first_failure_ns);
}

static PyObject *shadow_get_round(shspy_shadow_t *self, void *unused)
{
    if (self->sh == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "Shadow.round: closed");
    return PyLong_FromUnsignedLongLong(shs_shadow_round(self->sh));
}

static PyObject *shadow_enter(shspy_shadow_t *self, PyObject *unused)
{
    PyObject *r = shadow_start(self, NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(self);
}

static PyObject *shadow_exit(shspy_shadow_t *self, PyObject *args)
{
    PyObject *r = self->sh != NULL ? shadow_stop(self, NULL) : Py_NewRef(Py_None);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyMethodDef shadow_methods[] = {
    {"start", (PyCFunction)shadow_start, METH_NOARGS,
     "start(): start the shadow thread (rounds back to back, at most one per min_interval). "
     "The thread is the library's and never takes the GIL."},
    {"stop", (PyCFunction)shadow_stop, METH_NOARGS,
     "stop(): finish the current round and join the thread (bounded). Not collective."},
    {"sync", (PyCFunction)shadow_sync, METH_NOARGS,
     "sync(): one foreground round on this thread (FR-* modes; pause the workers first). "
     "Every member of the group calls it for the same round; not after a start()."},
    {"finish", (PyCFunction)shadow_finish, METH_NOARGS,
     "finish(): collective end of the run (the thread stopped on every rank): MA and BMUF "
     "leave every rank with the exact mean of the models."},
    {"stats", (PyCFunction)shadow_stats, METH_NOARGS,
     "stats() -> dict: rounds, syncs_per_min, round and wait times (us), bytes, errors, "
     "last_error, staleness_ms_max, running, failed_peers..."},
    {"close", (PyCFunction)shadow_close, METH_NOARGS,
     "close(): stop the thread if it runs and release the engine (collective: a barrier)."},
    {"__enter__", (PyCFunction)shadow_enter, METH_NOARGS, "start()"},
    {"__exit__", (PyCFunction)shadow_exit, METH_VARARGS, "stop()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef shadow_getset[] = {
    {"round", (getter)shadow_get_round, NULL, "the next round this rank will run", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shspy_shadow_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.Shadow",
    .tp_basicsize = sizeof(shspy_shadow_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shadow(context, region, *, offset=0, count=None, algorithm='ma', schedule=None, "
              "path='pull', min_interval=0.0, pin_cpus=None, bmuf_eta=None, bmuf_zeta=None, "
              "bmuf_nesterov=None, easgd_alpha=None, wait_timeout_ms=None, chunk_bytes=None)"
              "\n\nThe shadow engine on count float32 values at byte offset of region "
              "(default: the rest of it). algorithm 'ma', 'bmuf' or 'easgd'; schedule None "
              "(every rank) or (kind, group_size[, seed]) with kind 'all', 'hypercube', "
              "'general' or 'random' (DS-Sync groups); path 'pull' or 'ring' ('live' is refused); "
              "min_interval in seconds. Collective to create. A context manager: start() on "
              "entry, stop() on exit. Use shadowsync.ShadowSync for modules and tensors.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)shadow_init,
    .tp_dealloc = (destructor)shadow_dealloc,
    .tp_methods = shadow_methods,
    .tp_getset = shadow_getset,
};

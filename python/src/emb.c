/*
 * shadowsync.EmbeddingTable and its workers: a table sharded over the
 * ranks, rows looked up with one-sided READs (or from their holder) and row
 * gradients sent to the holders, which apply the optimizer.
 */
#include <string.h>

#include "shspy.h"

typedef struct {
    PyObject_HEAD
    shspy_ctx_t *owner;
    shs_emb_t *emb;
    uint64_t rows;
    uint32_t dim, max_batch;
    int workers;
    int busy; /* worker calls in progress with the GIL released */
} shspy_table_t;

typedef struct {
    PyObject_HEAD
    shspy_table_t *table;
    shs_emb_worker_t *w;
    int index;
    Py_ssize_t started; /* ids of a lookup started and not waited for, or -1 */
} shspy_worker_t;

static int table_init(shspy_table_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"context", "rows", "dim", "optimizer", "lr", "eps", "init_scale",
                             "seed", "max_batch", "workers", "path", "map", "slots", NULL};
    static const char *const opts[] = {"sgd", "adagrad"};
    static const char *const paths[] = {"auto", "read", "owner"};
    static const char *const maps[] = {"modulo", "range"};
    PyObject *ctx, *lr = Py_None, *eps = Py_None, *scale = Py_None, *mb = Py_None,
                   *workers = Py_None, *slots = Py_None;
    unsigned long long rows, seed = 0;
    unsigned int dim;
    const char *opt = "sgd", *path = "auto", *map = "modulo";
    if (self->emb != NULL) {
        PyErr_SetString(PyExc_TypeError, "EmbeddingTable: already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!KI|$sOOOKOOssO", kwlist, &shspy_ctx_type,
                                     &ctx, &rows, &dim, &opt, &lr, &eps, &scale, &seed, &mb,
                                     &workers, &path, &map, &slots))
        return -1;
    shspy_ctx_t *c = (shspy_ctx_t *)ctx;
    if (shspy_ctx_open(c, "EmbeddingTable: the context is closed") != 0)
        return -1;
    shs_emb_params_t p;
    memset(&p, 0, sizeof(p));
    p.rows = rows;
    p.dim = dim;
    int k = -1;
    for (int i = 0; i < 2; i++)
        if (strcmp(opt, opts[i]) == 0)
            k = i;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "EmbeddingTable: optimizer 'sgd' or 'adagrad', not '%s'",
                     opt);
        return -1;
    }
    p.optimizer = (shs_emb_optimizer_t)k;
    p.field_mask |= SHS_EMB_PARAM_OPTIMIZER;
    k = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(path, paths[i]) == 0)
            k = i;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "EmbeddingTable: path 'auto', 'read' or 'owner', not '%s'",
                     path);
        return -1;
    }
    p.path = (shs_emb_path_t)k;
    p.field_mask |= SHS_EMB_PARAM_PATH;
    k = -1;
    for (int i = 0; i < 2; i++)
        if (strcmp(map, maps[i]) == 0)
            k = i;
    if (k < 0) {
        PyErr_Format(PyExc_ValueError, "EmbeddingTable: map 'modulo' or 'range', not '%s'", map);
        return -1;
    }
    p.map = (shs_emb_map_t)k;
    p.field_mask |= SHS_EMB_PARAM_MAP;
    if (lr != Py_None) {
        p.lr = (float)PyFloat_AsDouble(lr);
        p.field_mask |= SHS_EMB_PARAM_LR;
    }
    if (eps != Py_None) {
        p.eps = (float)PyFloat_AsDouble(eps);
        p.field_mask |= SHS_EMB_PARAM_EPS;
    }
    /* init_scale and seed travel together */
    p.init_scale = 0.01f;
    if (scale != Py_None)
        p.init_scale = (float)PyFloat_AsDouble(scale);
    p.seed = seed;
    p.field_mask |= SHS_EMB_PARAM_INIT;
    if (mb != Py_None) {
        p.max_batch = (uint32_t)PyLong_AsUnsignedLong(mb);
        p.field_mask |= SHS_EMB_PARAM_MAX_BATCH;
    }
    if (workers != Py_None) {
        p.workers = (int)PyLong_AsLong(workers);
        p.field_mask |= SHS_EMB_PARAM_WORKERS;
    }
    if (slots != Py_None) {
        p.slots = (int)PyLong_AsLong(slots);
        p.field_mask |= SHS_EMB_PARAM_SLOTS;
    }
    if (PyErr_Occurred())
        return -1;
    shs_status_t st;
    shs_emb_t *emb = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_create(c->ctx, &p, &emb);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK) {
        shspy_raise(st, "EmbeddingTable (collective: every rank passes the same parameters)");
        return -1;
    }
    Py_INCREF(c);
    self->owner = c;
    self->emb = emb;
    self->rows = rows;
    self->dim = dim;
    self->max_batch = (p.field_mask & SHS_EMB_PARAM_MAX_BATCH) ? p.max_batch : 4096;
    self->workers = (p.field_mask & SHS_EMB_PARAM_WORKERS) ? p.workers : 1;
    c->children++;
    return 0;
}

static void table_release(shspy_table_t *self)
{
    if (self->emb == NULL)
        return;
    shs_emb_t *emb = self->emb;
    self->emb = NULL;
    Py_BEGIN_ALLOW_THREADS
    shs_emb_destroy(emb);
    Py_END_ALLOW_THREADS
    self->owner->children--;
}

static void table_dealloc(shspy_table_t *self)
{
    table_release(self);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *table_close(shspy_table_t *self, PyObject *unused)
{
    if (self->busy > 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "EmbeddingTable.close: %d worker call(s) still running on other threads",
                     self->busy);
        return NULL;
    }
    table_release(self);
    Py_RETURN_NONE;
}

static PyObject *table_worker(shspy_table_t *self, PyObject *arg)
{
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (self->emb == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "EmbeddingTable.worker: closed");
    shs_emb_worker_t *w = shs_emb_worker(self->emb, (int)i);
    if (w == NULL) {
        PyErr_Format(PyExc_IndexError, "EmbeddingTable.worker: %ld is not 0..%d", i,
                     self->workers - 1);
        return NULL;
    }
    shspy_worker_t *o = PyObject_New(shspy_worker_t, &shspy_worker_type);
    if (o == NULL)
        return NULL;
    Py_INCREF(self);
    o->table = self;
    o->w = w;
    o->index = (int)i;
    o->started = -1;
    return (PyObject *)o;
}

static PyObject *table_stats(shspy_table_t *self, PyObject *unused)
{
    if (self->emb == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "EmbeddingTable.stats: closed");
    shs_emb_stats_t s;
    shs_status_t st = shs_emb_stats(self->emb, &s);
    if (st != SHS_OK)
        return shspy_raise(st, "EmbeddingTable.stats");
#define U(x) (unsigned long long)(x)
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,"
        "s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:K,s:K,s:K,s:K,s:K,s:d,s:K}",
        "lookups", U(s.lookups), "ids", U(s.ids), "dup_ids", U(s.dup_ids), "rows_local",
        U(s.rows_local), "rows_read", U(s.rows_read), "rows_owner", U(s.rows_owner), "reads",
        U(s.reads), "bytes_fetched", U(s.bytes_fetched), "updates", U(s.updates), "update_rows",
        U(s.update_rows), "slot_waits", U(s.slot_waits), "slot_wait_ms", s.slot_wait_ms,
        "peer_failures", U(s.peer_failures), "applied_batches", U(s.applied_batches),
        "applied_rows", U(s.applied_rows), "served_lookups", U(s.served_lookups), "served_rows",
        U(s.served_rows), "apply_lag_max", U(s.apply_lag_max), "apply_busy_ms", s.apply_busy_ms,
        "shard_rows", U(s.shard_rows), "shard_bytes", U(s.shard_bytes), "state_bytes",
        U(s.state_bytes), "registered_bytes", U(s.registered_bytes), "torn_retries",
        U(s.torn_retries), "torn_fallbacks", U(s.torn_fallbacks), "cache_rows", s.cache_rows,
        "cache_age", s.cache_age, "cache_hits", U(s.cache_hits), "cache_misses",
        U(s.cache_misses), "cache_expired", U(s.cache_expired), "cache_admitted",
        U(s.cache_admitted), "cache_rejected", U(s.cache_rejected), "cache_hit_age",
        s.cache_hit_age, "cache_bytes", U(s.cache_bytes));
#undef U
}

static PyObject *table_save_load(shspy_table_t *self, PyObject *arg, int load)
{
    const char *dir = PyUnicode_AsUTF8(arg);
    if (dir == NULL)
        return NULL;
    if (self->emb == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, load ? "EmbeddingTable.load: closed"
                                                   : "EmbeddingTable.save: closed");
    shs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = load ? shs_emb_load(self->emb, dir) : shs_emb_save(self->emb, dir);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK)
        return shspy_raise(st, load ? "EmbeddingTable.load" : "EmbeddingTable.save");
    Py_RETURN_NONE;
}

static PyObject *table_save(shspy_table_t *self, PyObject *arg)
{
    return table_save_load(self, arg, 0);
}

static PyObject *table_load(shspy_table_t *self, PyObject *arg)
{
    return table_save_load(self, arg, 1);
}

static PyObject *table_get(shspy_table_t *self, void *which)
{
    switch ((int)(intptr_t)which) {
    case 0: return PyLong_FromUnsignedLongLong(self->rows);
    case 1: return PyLong_FromUnsignedLong(self->dim);
    case 2: return PyLong_FromUnsignedLong(self->max_batch);
    case 3: return PyLong_FromLong(self->workers);
    default: return PyBool_FromLong(self->emb == NULL);
    }
}

static PyMethodDef table_methods[] = {
    {"worker", (PyCFunction)table_worker, METH_O,
     "worker(i) -> EmbeddingWorker: worker i (0..workers-1); one thread uses a worker at a "
     "time."},
    {"stats", (PyCFunction)table_stats, METH_NOARGS,
     "stats() -> dict: this rank's lookups, rows fetched, updates sent and applied, shard "
     "memory..."},
    {"save", (PyCFunction)table_save, METH_O,
     "save(dir): write the shards to dir (collective; flush every worker first)."},
    {"load", (PyCFunction)table_load, METH_O,
     "load(dir): replace the rows with a save of any number of holders (collective; all "
     "ranks take it or none)."},
    {"close", (PyCFunction)table_close, METH_NOARGS,
     "close(): release the table (collective: a barrier). Updates not flushed are lost."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"rows", (getter)table_get, NULL, "rows of the whole table", (void *)0},
    {"dim", (getter)table_get, NULL, "floats per row", (void *)1},
    {"max_batch", (getter)table_get, NULL, "most ids per call", (void *)2},
    {"workers", (getter)table_get, NULL, "workers made at create", (void *)3},
    {"closed", (getter)table_get, NULL, "True after close()", (void *)4},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shspy_table_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.EmbeddingTable",
    .tp_basicsize = sizeof(shspy_table_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "EmbeddingTable(context, rows, dim, *, optimizer='sgd', lr=None, eps=None, "
              "init_scale=None, seed=0, max_batch=None, workers=None, path='auto', "
              "map='modulo', slots=None)\n\nA float32 table of rows x dim sharded over the "
              "ranks (collective to create: every rank passes the same parameters). Rows "
              "start uniform in [-init_scale, init_scale) from seed; the holders apply "
              "'sgd' (w -= lr g) or row-wise 'adagrad'. Worker i does lookups and updates "
              "for one thread; shadowsync.torch.ShardedEmbeddingBag is the torch module.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)table_init,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
};

/* ---- EmbeddingWorker ---- */

static void worker_dealloc(shspy_worker_t *self)
{
    Py_XDECREF(self->table);
    PyObject_Free(self);
}

static int worker_open(shspy_worker_t *self, const char *what)
{
    if (self->table->emb != NULL)
        return 0;
    shspy_raise(SHS_ERR_BAD_STATE, what);
    return -1;
}

/* ids: 64-bit integers, at most max_batch of them */
static int get_ids(shspy_worker_t *self, PyObject *obj, Py_buffer *view, const char *what)
{
    if (shspy_get_buffer(obj, view, "qQlL", 0, what, NULL) != 0)
        return -1;
    size_t n = (size_t)(view->len / 8);
    if (n > self->table->max_batch) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: %zu ids, more than the table's max_batch %u", what,
                     n, self->table->max_batch);
        return -1;
    }
    return 0;
}

/* a float32 buffer of at least need floats */
static int get_rows(PyObject *obj, Py_buffer *view, size_t need, int writable, const char *what)
{
    if (shspy_get_buffer(obj, view, "f", writable, what, NULL) != 0)
        return -1;
    if ((size_t)(view->len / 4) < need) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s: %zd floats, %zu needed (ids x dim)", what,
                     view->len / 4, need);
        return -1;
    }
    return 0;
}

static PyObject *worker_done(shspy_worker_t *self, shs_status_t st, const char *what)
{
    self->table->busy--;
    if (st != SHS_OK)
        return shspy_raise(st, what);
    Py_RETURN_NONE;
}

static PyObject *worker_lookup(shspy_worker_t *self, PyObject *args)
{
    PyObject *ids_o, *out_o;
    if (!PyArg_ParseTuple(args, "OO", &ids_o, &out_o) ||
        worker_open(self, "EmbeddingWorker.lookup: the table is closed") != 0)
        return NULL;
    Py_buffer ids, out;
    if (get_ids(self, ids_o, &ids, "EmbeddingWorker.lookup") != 0)
        return NULL;
    size_t n = (size_t)ids.len / 8;
    if (get_rows(out_o, &out, n * self->table->dim, 1, "EmbeddingWorker.lookup") != 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_lookup(self->w, ids.buf, n, out.buf, (size_t)out.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&out);
    return worker_done(self, st, "EmbeddingWorker.lookup");
}

static PyObject *worker_lookup_start(shspy_worker_t *self, PyObject *ids_o)
{
    if (worker_open(self, "EmbeddingWorker.lookup_start: the table is closed") != 0)
        return NULL;
    Py_buffer ids;
    if (get_ids(self, ids_o, &ids, "EmbeddingWorker.lookup_start") != 0)
        return NULL;
    size_t n = (size_t)ids.len / 8;
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_lookup_start(self->w, ids.buf, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    if (st == SHS_OK)
        self->started = (Py_ssize_t)n;
    return worker_done(self, st, "EmbeddingWorker.lookup_start");
}

static PyObject *worker_lookup_wait(shspy_worker_t *self, PyObject *out_o)
{
    if (worker_open(self, "EmbeddingWorker.lookup_wait: the table is closed") != 0)
        return NULL;
    if (self->started < 0)
        return shspy_raise(SHS_ERR_BAD_STATE, "EmbeddingWorker.lookup_wait: no lookup started");
    Py_buffer out;
    if (get_rows(out_o, &out, (size_t)self->started * self->table->dim, 1,
                 "EmbeddingWorker.lookup_wait") != 0)
        return NULL; /* the lookup stays started: wait again with a larger buffer */
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_lookup_wait(self->w, out.buf, (size_t)out.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    self->started = -1;
    return worker_done(self, st, "EmbeddingWorker.lookup_wait");
}

static PyObject *worker_lookup_pooled(shspy_worker_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ids", "offsets", "out", "mean", NULL};
    PyObject *ids_o, *off_o, *out_o;
    int mean = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p", kwlist, &ids_o, &off_o, &out_o, &mean) ||
        worker_open(self, "EmbeddingWorker.lookup_pooled: the table is closed") != 0)
        return NULL;
    Py_buffer ids, off, out;
    if (get_ids(self, ids_o, &ids, "EmbeddingWorker.lookup_pooled") != 0)
        return NULL;
    if (shspy_get_buffer(off_o, &off, "I", 0, "EmbeddingWorker.lookup_pooled offsets", NULL)) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    size_t nbags = off.len / 4 > 0 ? (size_t)off.len / 4 - 1 : 0;
    if (off.len / 4 < 1) {
        PyBuffer_Release(&ids);
        PyBuffer_Release(&off);
        PyErr_SetString(PyExc_ValueError,
                        "EmbeddingWorker.lookup_pooled: offsets has nbags + 1 entries");
        return NULL;
    }
    if (get_rows(out_o, &out, nbags * self->table->dim, 1, "EmbeddingWorker.lookup_pooled")) {
        PyBuffer_Release(&ids);
        PyBuffer_Release(&off);
        return NULL;
    }
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_lookup_pooled(self->w, ids.buf, off.buf, nbags, mean, out.buf,
                               (size_t)out.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&off);
    PyBuffer_Release(&out);
    return worker_done(self, st, "EmbeddingWorker.lookup_pooled");
}

static PyObject *worker_update(shspy_worker_t *self, PyObject *args)
{
    PyObject *ids_o, *g_o;
    if (!PyArg_ParseTuple(args, "OO", &ids_o, &g_o) ||
        worker_open(self, "EmbeddingWorker.update: the table is closed") != 0)
        return NULL;
    Py_buffer ids, g;
    if (get_ids(self, ids_o, &ids, "EmbeddingWorker.update") != 0)
        return NULL;
    size_t n = (size_t)ids.len / 8;
    if (get_rows(g_o, &g, n * self->table->dim, 0, "EmbeddingWorker.update") != 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_update(self->w, ids.buf, n, g.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&g);
    return worker_done(self, st, "EmbeddingWorker.update");
}

static PyObject *worker_flush(shspy_worker_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout_ms", NULL};
    int tmo = SHS_TIMEOUT_DEFAULT;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i", kwlist, &tmo) ||
        worker_open(self, "EmbeddingWorker.flush: the table is closed") != 0)
        return NULL;
    shs_status_t st;
    self->table->busy++;
    Py_BEGIN_ALLOW_THREADS
    st = shs_emb_flush(self->w, tmo);
    Py_END_ALLOW_THREADS
    return worker_done(self, st, "EmbeddingWorker.flush");
}

static PyMethodDef worker_methods[] = {
    {"lookup", (PyCFunction)worker_lookup, METH_VARARGS,
     "lookup(ids, out): out[k*dim:(k+1)*dim] = row ids[k]. ids: int64/uint64, at most "
     "max_batch; out: writable float32 of at least len(ids)*dim. Releases the GIL."},
    {"lookup_start", (PyCFunction)worker_lookup_start, METH_O,
     "lookup_start(ids): post the lookup's transfers and return (ids may change after)."},
    {"lookup_wait", (PyCFunction)worker_lookup_wait, METH_O,
     "lookup_wait(out): complete the started lookup into out."},
    {"lookup_pooled", (PyCFunction)(void (*)(void))worker_lookup_pooled,
     METH_VARARGS | METH_KEYWORDS,
     "lookup_pooled(ids, offsets, out, mean=False): bag b = ids[offsets[b]:offsets[b+1]] "
     "(offsets uint32, nbags + 1 entries); out[b] = the sum (mean) of its rows."},
    {"update", (PyCFunction)worker_update, METH_VARARGS,
     "update(ids, grads): send the row gradients grads[k*dim:...] of ids[k] to their "
     "holders, which apply the optimizer. Returns once handed to the device."},
    {"flush", (PyCFunction)(void (*)(void))worker_flush, METH_VARARGS | METH_KEYWORDS,
     "flush(timeout_ms=-1): wait until every update of this worker is applied."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject shspy_worker_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.EmbeddingWorker",
    .tp_basicsize = sizeof(shspy_worker_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One worker of an EmbeddingTable (EmbeddingTable.worker(i)): lookups and "
              "updates for one thread at a time.",
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_methods = worker_methods,
};

/*
 * shadowsync.Context and shadowsync.Region: joining the job, and registered
 * memory that Python sees as a buffer (NumPy arrays and torch tensors view
 * it without a copy).
 */
#include <string.h>

#include "shspy.h"

int shspy_ctx_open(shspy_ctx_t *c, const char *what)
{
    if (c != NULL && c->ctx != NULL)
        return 0;
    shspy_raise(SHS_ERR_BAD_STATE, what);
    return -1;
}

shspy_region_t *shspy_find_region(shspy_ctx_t *c, const void *addr, size_t len)
{
    const char *p = addr;
    for (shspy_region_t *r = c->regions; r != NULL; r = r->next)
        if (r->region != NULL && p >= r->addr && p + len <= r->addr + r->len)
            return r;
    return NULL;
}

/* ---- Context ---- */

static int ctx_init(shspy_ctx_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"rank", "size", "bootstrap", "job_token", "device", "ib_port",
                             "gid_index", "connect_mode", "connect_timeout_ms",
                             "op_timeout_ms", NULL};
    PyObject *rank = Py_None, *size = Py_None, *port = Py_None, *gid = Py_None;
    PyObject *cto = Py_None, *oto = Py_None;
    const char *boot = NULL, *token = NULL, *device = NULL, *mode = NULL;
    if (self->ctx != NULL) {
        PyErr_SetString(PyExc_TypeError, "Context: already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOzzzOOzOO", kwlist, &rank, &size, &boot,
                                     &token, &device, &port, &gid, &mode, &cto, &oto))
        return -1;
    shs_ctx_params_t p;
    memset(&p, 0, sizeof(p));
    struct {
        PyObject *o;
        int *field;
        uint64_t bit;
    } ints[] = {
        {rank, &p.rank, SHS_CTX_PARAM_RANK},
        {size, &p.size, SHS_CTX_PARAM_SIZE},
        {port, &p.ib_port, SHS_CTX_PARAM_IB_PORT},
        {gid, &p.gid_index, SHS_CTX_PARAM_GID_INDEX},
        {cto, &p.connect_timeout_ms, SHS_CTX_PARAM_CONNECT_TIMEOUT},
        {oto, &p.op_timeout_ms, SHS_CTX_PARAM_OP_TIMEOUT},
    };
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        if (ints[i].o == Py_None)
            continue;
        int v = PyLong_AsLong(ints[i].o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        *ints[i].field = v;
        p.field_mask |= ints[i].bit;
    }
    if (boot != NULL) {
        p.bootstrap = boot;
        p.field_mask |= SHS_CTX_PARAM_BOOTSTRAP;
    }
    if (token != NULL) {
        p.job_token = token;
        p.field_mask |= SHS_CTX_PARAM_JOB_TOKEN;
    }
    if (device != NULL) {
        p.device = device;
        p.field_mask |= SHS_CTX_PARAM_DEVICE;
    }
    if (mode != NULL) {
        if (strcmp(mode, "rdmacm") != 0 && strcmp(mode, "oob") != 0) {
            PyErr_Format(PyExc_ValueError, "Context: connect_mode is 'rdmacm' or 'oob', not '%s'",
                         mode);
            return -1;
        }
        p.connect_mode = strcmp(mode, "oob") == 0 ? SHS_CONNECT_MODE_OOB : SHS_CONNECT_MODE_RDMACM;
        p.field_mask |= SHS_CTX_PARAM_CONNECT_MODE;
    }
    shs_status_t st;
    shs_ctx_t *ctx = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_ctx_create(&p, &ctx);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK) {
        shspy_raise(st, "Context: joining the job (shs_ctx_create; the log above says why)");
        return -1;
    }
    self->ctx = ctx;
    return 0;
}

static void ctx_dealloc(shspy_ctx_t *self)
{
    /* children hold references: none is open here */
    if (self->ctx != NULL)
        shs_ctx_destroy(self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ctx_close(shspy_ctx_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"barrier", NULL};
    int barrier = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &barrier))
        return NULL;
    if (self->ctx == NULL)
        Py_RETURN_NONE;
    if (self->children > 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Context.close: %d object(s) of this context are still open "
                     "(regions, collectives, engines, tables): close them first",
                     self->children);
        return NULL;
    }
    shs_status_t st = SHS_OK;
    if (barrier) {
        Py_BEGIN_ALLOW_THREADS
        st = shs_ctx_barrier(self->ctx);
        Py_END_ALLOW_THREADS
    }
    shs_ctx_destroy(self->ctx);
    self->ctx = NULL;
    if (st != SHS_OK)
        return shspy_raise(st, "Context.close: the final barrier");
    Py_RETURN_NONE;
}

static PyObject *ctx_barrier(shspy_ctx_t *self, PyObject *unused)
{
    if (shspy_ctx_open(self, "Context.barrier: the context is closed") != 0)
        return NULL;
    shs_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = shs_ctx_barrier(self->ctx);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK)
        return shspy_raise(st, "Context.barrier");
    Py_RETURN_NONE;
}

static unsigned access_flags(int remote_read, int remote_write)
{
    return SHS_ACCESS_LOCAL_WRITE | (remote_read ? SHS_ACCESS_REMOTE_READ : 0) |
           (remote_write ? SHS_ACCESS_REMOTE_WRITE : 0);
}

static PyObject *new_region(shspy_ctx_t *self, shs_region_t *region, Py_buffer *held)
{
    shspy_region_t *r = PyObject_New(shspy_region_t, &shspy_region_type);
    if (r == NULL) {
        shs_region_destroy(region);
        if (held != NULL)
            PyBuffer_Release(held);
        return NULL;
    }
    Py_INCREF(self);
    r->owner = self;
    r->region = region;
    r->addr = shs_region_addr(region);
    r->len = shs_region_len(region);
    r->has_held = held != NULL;
    if (held != NULL)
        r->held = *held;
    r->exports = 0;
    r->users = 0;
    r->next = self->regions;
    self->regions = r;
    self->children++;
    return (PyObject *)r;
}

static PyObject *ctx_alloc(shspy_ctx_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"nbytes", "remote_read", "remote_write", NULL};
    Py_ssize_t n;
    int rr = 1, rw = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|$pp", kwlist, &n, &rr, &rw))
        return NULL;
    if (shspy_ctx_open(self, "Context.alloc: the context is closed") != 0)
        return NULL;
    if (n <= 0) {
        PyErr_Format(PyExc_ValueError, "Context.alloc: nbytes must be positive, not %zd", n);
        return NULL;
    }
    shs_status_t st;
    shs_region_t *region = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_region_alloc(self->ctx, (size_t)n, access_flags(rr, rw), &region);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK)
        return shspy_raise(st, "Context.alloc (collective: every rank allocates the same size)");
    return new_region(self, region, NULL);
}

static PyObject *ctx_register(shspy_ctx_t *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"buffer", "remote_read", "remote_write", NULL};
    PyObject *obj;
    int rr = 1, rw = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$pp", kwlist, &obj, &rr, &rw))
        return NULL;
    if (shspy_ctx_open(self, "Context.register: the context is closed") != 0)
        return NULL;
    Py_buffer view;
    if (shspy_get_buffer(obj, &view, "bBhHiIlLqQfd?", 1, "Context.register", NULL) != 0)
        return NULL;
    if ((uintptr_t)view.buf % SHS_REGION_ALIGN != 0 || view.len == 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError,
                     "Context.register: the memory must be non-empty and %d-byte aligned "
                     "(NumPy's and torch's allocations are)", SHS_REGION_ALIGN);
        return NULL;
    }
    shs_status_t st;
    shs_region_t *region = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = shs_region_register(self->ctx, view.buf, (size_t)view.len, access_flags(rr, rw), &region);
    Py_END_ALLOW_THREADS
    if (st != SHS_OK) {
        PyBuffer_Release(&view);
        return shspy_raise(st, "Context.register (collective: every rank registers the same size)");
    }
    return new_region(self, region, &view);
}

static PyObject *ctx_enter(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *ctx_exit(shspy_ctx_t *self, PyObject *args)
{
    PyObject *type = PyTuple_GetItem(args, 0);
    if (type == NULL)
        return NULL;
    if (type != Py_None) {
        /* leaving on an exception: no barrier (peers may be gone); the
         * context goes when its last object does */
        if (self->children == 0 && self->ctx != NULL) {
            shs_ctx_destroy(self->ctx);
            self->ctx = NULL;
        }
        Py_RETURN_FALSE;
    }
    PyObject *kw = Py_BuildValue("{s:O}", "barrier", Py_True);
    PyObject *empty = PyTuple_New(0);
    PyObject *r = kw != NULL && empty != NULL ? ctx_close(self, empty, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(empty);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *ctx_get_rank(shspy_ctx_t *self, void *unused)
{
    if (shspy_ctx_open(self, "Context.rank: the context is closed") != 0)
        return NULL;
    return PyLong_FromLong(shs_ctx_rank(self->ctx));
}

static PyObject *ctx_get_size(shspy_ctx_t *self, void *unused)
{
    if (shspy_ctx_open(self, "Context.size: the context is closed") != 0)
        return NULL;
    return PyLong_FromLong(shs_ctx_size(self->ctx));
}

static PyObject *ctx_get_rejoined(shspy_ctx_t *self, void *unused)
{
    if (shspy_ctx_open(self, "Context.rejoined: the context is closed") != 0)
        return NULL;
    return PyBool_FromLong(shs_ctx_rejoined(self->ctx));
}

static PyObject *ctx_get_closed(shspy_ctx_t *self, void *unused)
{
    return PyBool_FromLong(self->ctx == NULL);
}

static PyMethodDef ctx_methods[] = {
    {"barrier", (PyCFunction)ctx_barrier, METH_NOARGS,
     "barrier(): wait until every rank reached it (collective). Raises PeerFailed, Timeout."},
    {"alloc", (PyCFunction)(void (*)(void))ctx_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(nbytes, *, remote_read=True, remote_write=False) -> Region: zeroed, page-aligned "
     "registered memory. Collective: every rank allocates the same size, in the same order."},
    {"register", (PyCFunction)(void (*)(void))ctx_register, METH_VARARGS | METH_KEYWORDS,
     "register(buffer, *, remote_read=True, remote_write=False) -> Region: register a "
     "writable, contiguous, 8-byte aligned buffer (a NumPy array, tensor.numpy()) in place; "
     "the buffer is kept alive until the region is closed. Collective."},
    {"close", (PyCFunction)(void (*)(void))ctx_close, METH_VARARGS | METH_KEYWORDS,
     "close(barrier=True): a final barrier (when barrier), then leave the job. Every region, "
     "collective, engine and table of the context must be closed first (RuntimeError "
     "otherwise). Closing twice does nothing."},
    {"__enter__", ctx_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)ctx_exit, METH_VARARGS,
     "close() on a normal exit; on an exception, no barrier."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ctx_getset[] = {
    {"rank", (getter)ctx_get_rank, NULL, "this process's rank", NULL},
    {"size", (getter)ctx_get_size, NULL, "the number of ranks in the job", NULL},
    {"rejoined", (getter)ctx_get_rejoined, NULL,
     "True when this process joined a running job as a rank started again "
     "(SHS_REJOIN=1, a job of more than one rank)", NULL},
    {"closed", (getter)ctx_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shspy_ctx_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.Context",
    .tp_basicsize = sizeof(shspy_ctx_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Context(*, rank=None, size=None, bootstrap=None, job_token=None, device=None, "
              "ib_port=None, gid_index=None, connect_mode=None, connect_timeout_ms=None, "
              "op_timeout_ms=None)\n\n"
              "Join the job and connect to every peer (collective). Without arguments the "
              "rank, size and rendezvous come from the launcher's environment: torchrun "
              "(RANK, WORLD_SIZE, MASTER_ADDR/PORT), Open MPI, Slurm, shs-launch or "
              "SHS_RANK/SHS_SIZE/SHS_BOOTSTRAP; an argument overrides its SHS_* knob. "
              "Raises NoDevice, ConnectFailed, Timeout, ConfigError... with the reason "
              "logged. A context manager: leaving the block closes it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ctx_init,
    .tp_dealloc = (destructor)ctx_dealloc,
    .tp_methods = ctx_methods,
    .tp_getset = ctx_getset,
};

/* ---- Region ---- */

static void region_unlink(shspy_region_t *r)
{
    shspy_region_t **pp = &r->owner->regions;
    while (*pp != NULL && *pp != r)
        pp = &(*pp)->next;
    if (*pp == r)
        *pp = r->next;
}

static PyObject *region_close(shspy_region_t *self, PyObject *unused)
{
    if (self->region == NULL)
        Py_RETURN_NONE;
    if (self->exports > 0 || self->users > 0) {
        PyErr_Format(PyExc_BufferError,
                     "Region.close: the region is still in use (%zd view(s) such as NumPy "
                     "arrays or tensors, %d engine(s)): delete them first",
                     self->exports, self->users);
        return NULL;
    }
    shs_region_destroy(self->region);
    self->region = NULL;
    if (self->has_held) {
        PyBuffer_Release(&self->held);
        self->has_held = 0;
    }
    region_unlink(self);
    self->owner->children--;
    Py_RETURN_NONE;
}

static void region_dealloc(shspy_region_t *self)
{
    /* no view or engine can be alive: they hold references */
    if (self->region != NULL) {
        shs_region_destroy(self->region);
        if (self->has_held)
            PyBuffer_Release(&self->held);
        region_unlink(self);
        self->owner->children--;
    }
    Py_XDECREF(self->owner);
    PyObject_Free(self);
}

static int region_getbuffer(shspy_region_t *self, Py_buffer *view, int flags)
{
    if (self->region == NULL) {
        PyErr_SetString(PyExc_BufferError, "Region: closed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->addr, (Py_ssize_t)self->len, 0,
                          flags) != 0)
        return -1;
    self->exports++;
    return 0;
}

static void region_releasebuffer(shspy_region_t *self, Py_buffer *view)
{
    self->exports--;
}

static PyBufferProcs region_as_buffer = {
    (getbufferproc)region_getbuffer,
    (releasebufferproc)region_releasebuffer,
};

static PyObject *region_check(shspy_region_t *self, PyObject *unused)
{
    if (self->region == NULL)
        return shspy_raise(SHS_ERR_BAD_STATE, "Region.check: closed");
    shs_status_t st = shs_region_check(self->region);
    if (st != SHS_OK)
        return shspy_raise(st, "Region.check: the memory is no longer mapped");
    Py_RETURN_NONE;
}

static PyObject *region_get_nbytes(shspy_region_t *self, void *unused)
{
    return PyLong_FromSize_t(self->region != NULL ? self->len : 0);
}

static PyObject *region_get_address(shspy_region_t *self, void *unused)
{
    return PyLong_FromVoidPtr(self->region != NULL ? self->addr : NULL);
}

static PyObject *region_get_closed(shspy_region_t *self, void *unused)
{
    return PyBool_FromLong(self->region == NULL);
}

static PyMethodDef region_methods[] = {
    {"close", (PyCFunction)region_close, METH_NOARGS,
     "close(): deregister (and free, for Context.alloc). Not collective, but peers must "
     "no longer access it. Raises BufferError while views (arrays, tensors) or an engine "
     "use it."},
    {"check", (PyCFunction)region_check, METH_NOARGS,
     "check(): raise BadState if the memory was unmapped while registered."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef region_getset[] = {
    {"nbytes", (getter)region_get_nbytes, NULL, "length in bytes (0 once closed)", NULL},
    {"address", (getter)region_get_address, NULL, "this rank's address of the memory", NULL},
    {"closed", (getter)region_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shspy_region_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shadowsync.Region",
    .tp_basicsize = sizeof(shspy_region_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Registered memory of a Context (made by Context.alloc or Context.register). "
              "It exports a writable buffer: numpy.frombuffer(region, numpy.float32) and "
              "torch.frombuffer(region, dtype=torch.float32) view it without a copy; "
              "shadowsync.as_array / shadowsync.torch.as_tensor do the same.",
    .tp_dealloc = (destructor)region_dealloc,
    .tp_as_buffer = &region_as_buffer,
    .tp_methods = region_methods,
    .tp_getset = region_getset,
};

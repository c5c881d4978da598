/*
 * shadowsync._core: the module, its exceptions and the buffer checks every
 * call shares.
 */
#include <string.h>

#include "shspy.h"

/* One exception per status. Each also derives from the Python exception a
 * user would catch for it (an invalid argument is a ValueError, a timeout a
 * TimeoutError), so that generic handlers keep working. */
static struct {
    shs_status_t st;
    const char *name;    /* Python name */
    const char *status;  /* the C enum's name */
    int builtin;         /* 0: none, 1: ValueError, 2: TimeoutError, 3: MemoryError,
                            4: ConnectionError, 5: OSError */
    PyObject *type;
} errors[] = {
    {SHS_ERR_NO_MEMORY, "NoMemory", "SHS_ERR_NO_MEMORY", 3, NULL},
    {SHS_ERR_NO_RESOURCE, "NoResource", "SHS_ERR_NO_RESOURCE", 0, NULL},
    {SHS_ERR_NO_DEVICE, "NoDevice", "SHS_ERR_NO_DEVICE", 0, NULL},
    {SHS_ERR_IO, "IOFailed", "SHS_ERR_IO", 5, NULL},
    {SHS_ERR_DEVICE, "DeviceError", "SHS_ERR_DEVICE", 0, NULL},
    {SHS_ERR_PEER_FAILED, "PeerFailed", "SHS_ERR_PEER_FAILED", 4, NULL},
    {SHS_ERR_CONNECT, "ConnectFailed", "SHS_ERR_CONNECT", 4, NULL},
    {SHS_ERR_REMOTE_ACCESS, "RemoteAccess", "SHS_ERR_REMOTE_ACCESS", 0, NULL},
    {SHS_ERR_TRANSPORT, "TransportError", "SHS_ERR_TRANSPORT", 0, NULL},
    {SHS_ERR_PROTOCOL, "ProtocolError", "SHS_ERR_PROTOCOL", 0, NULL},
    {SHS_ERR_CONFIG, "ConfigError", "SHS_ERR_CONFIG", 0, NULL},
    {SHS_ERR_TOKEN_MISMATCH, "TokenMismatch", "SHS_ERR_TOKEN_MISMATCH", 0, NULL},
    {SHS_ERR_VERSION_MISMATCH, "VersionMismatch", "SHS_ERR_VERSION_MISMATCH", 0, NULL},
    {SHS_ERR_SIZE_MISMATCH, "SizeMismatch", "SHS_ERR_SIZE_MISMATCH", 1, NULL},
    {SHS_ERR_UNSUPPORTED, "Unsupported", "SHS_ERR_UNSUPPORTED", 0, NULL},
    {SHS_ERR_INVALID_ARG, "InvalidArgument", "SHS_ERR_INVALID_ARG", 1, NULL},
    {SHS_ERR_OUT_OF_BOUNDS, "OutOfBounds", "SHS_ERR_OUT_OF_BOUNDS", 1, NULL},
    {SHS_ERR_BAD_STATE, "BadState", "SHS_ERR_BAD_STATE", 0, NULL},
    {SHS_ERR_TIMEOUT, "Timeout", "SHS_ERR_TIMEOUT", 2, NULL},
    {SHS_ERR_CANCELED, "Canceled", "SHS_ERR_CANCELED", 0, NULL},
};
#define NERRORS (sizeof(errors) / sizeof(errors[0]))

static PyObject *base_error;

PyObject *shspy_raise(shs_status_t st, const char *what)
{
    PyObject *type = base_error;
    const char *status = "SHS_ERR_UNKNOWN";
    for (size_t i = 0; i < NERRORS; i++)
        if (errors[i].st == st) {
            type = errors[i].type;
            status = errors[i].status;
        }
    PyObject *msg = PyUnicode_FromFormat("%s: %s (%s)", what, shs_status_string(st), status);
    if (msg == NULL)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(type, msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(status);
    if (code != NULL && name != NULL && PyObject_SetAttrString(exc, "status", code) == 0)
        (void)PyObject_SetAttrString(exc, "status_name", name);
    Py_XDECREF(code);
    Py_XDECREF(name);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

char shspy_format_char(const Py_buffer *view)
{
    const char *f = view->format != NULL ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@' || *f == '!' || *f == '>')
        f++;
    return f[0] != '\0' && f[1] == '\0' ? f[0] : '?';
}

int shspy_get_buffer(PyObject *obj, Py_buffer *view, const char *formats, int writable,
                     const char *what, char *fmt_p)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: expected a buffer (a NumPy array, a registered region, "
                     "tensor.numpy()), got %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    /* strides first: a non-contiguous array gets its own message */
    if (PyObject_GetBuffer(obj, view, PyBUF_STRIDED_RO | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: %.100s does not export its memory", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError,
                     "%s: the buffer is not contiguous (a slice with a step, a transpose): "
                     "pass a contiguous copy, e.g. numpy.ascontiguousarray", what);
        return -1;
    }
    if (writable && view->readonly) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: the buffer is read-only", what);
        return -1;
    }
    char f = shspy_format_char(view);
    /* 'l'/'L' are 8 bytes on LP64 like 'q'/'Q' */
    if (f == '?' || strchr(formats, f) == NULL ||
        ((f == 'l' || f == 'L') && view->itemsize != 8)) {
        PyErr_Format(PyExc_TypeError, "%s: element type '%s' not accepted here (want one of "
                     "\"%s\" in struct notation: f float32, d float64, q/Q 64-bit ids, "
                     "I uint32)", what, view->format != NULL ? view->format : "B", formats);
        PyBuffer_Release(view);
        return -1;
    }
    if (fmt_p != NULL)
        *fmt_p = f == 'l' ? 'q' : f == 'L' ? 'Q' : f;
    return 0;
}

static PyObject *status_string(PyObject *self, PyObject *arg)
{
    long st = PyLong_AsLong(arg);
    if (st == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(shs_status_string((shs_status_t)st));
}

static PyMethodDef module_methods[] = {
    {"status_string", status_string, METH_O,
     "status_string(code) -> str: the library's words for a status code."},
    {NULL, NULL, 0, NULL},
};

int shspy_init_errors(PyObject *m)
{
    base_error = PyErr_NewExceptionWithDoc(
        "shadowsync.Error",
        "Any error of the shadowsync library. .status is the library's status code "
        "(negative), .status_name its C name (e.g. 'SHS_ERR_PEER_FAILED').",
        PyExc_RuntimeError, NULL);
    if (base_error == NULL || PyModule_AddObjectRef(m, "Error", base_error) != 0)
        return -1;
    for (size_t i = 0; i < NERRORS; i++) {
        PyObject *extra = errors[i].builtin == 1   ? PyExc_ValueError
                          : errors[i].builtin == 2 ? PyExc_TimeoutError
                          : errors[i].builtin == 3 ? PyExc_MemoryError
                          : errors[i].builtin == 4 ? PyExc_ConnectionError
                          : errors[i].builtin == 5 ? PyExc_OSError
                                                   : NULL;
        PyObject *bases = extra != NULL ? PyTuple_Pack(2, base_error, extra)
                                        : PyTuple_Pack(1, base_error);
        char qual[96], doc[160];
        snprintf(qual, sizeof(qual), "shadowsync.%s", errors[i].name);
        snprintf(doc, sizeof(doc), "The library returned %s: %s.", errors[i].status,
                 shs_status_string(errors[i].st));
        errors[i].type = bases != NULL ? PyErr_NewExceptionWithDoc(qual, doc, bases, NULL) : NULL;
        Py_XDECREF(bases);
        if (errors[i].type == NULL || PyModule_AddObjectRef(m, errors[i].name, errors[i].type))
            return -1;
    }
    return 0;
}

int shspy_init_types(PyObject *m)
{
    struct {
        PyTypeObject *t;
        const char *name;
    } types[] = {{&shspy_ctx_type, "Context"},       {&shspy_region_type, "Region"},
                 {&shspy_coll_type, "Collective"},   {&shspy_shadow_type, "Shadow"},
                 {&shspy_table_type, "EmbeddingTable"}, {&shspy_worker_type, "EmbeddingWorker"}};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i].t) != 0 ||
            PyModule_AddObjectRef(m, types[i].name, (PyObject *)types[i].t) != 0)
            return -1;
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "shadowsync._core",
    "The C extension under the shadowsync package: contexts, registered regions, "
    "collectives, the shadow engine and sharded embedding tables of libshadowsync. "
    "Use the shadowsync package, which documents each name.",
    -1,
    module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__core(void);

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (shspy_init_errors(m) != 0 || shspy_init_types(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

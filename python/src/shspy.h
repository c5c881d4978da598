/*
 * The shadowsync extension module (shadowsync._core): what its files share.
 * Each library object is a Python type that holds a reference to the
 * objects it needs alive (a region its context, an engine its context and
 * region), so that Python's reference counting destroys them in the order
 * the library wants. Calls that can block release the GIL.
 */
#ifndef SHSPY_H
#define SHSPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <shadowsync/shadowsync.h>
#include <shadowsync/embedding.h>
#include <shadowsync/shadow.h>

typedef struct shspy_region shspy_region_t;

typedef struct {
    PyObject_HEAD
    shs_ctx_t *ctx;
    shspy_region_t *regions; /* the open regions of this context (a list) */
    int children;            /* open regions, collectives, engines, tables */
} shspy_ctx_t;

struct shspy_region {
    PyObject_HEAD
    shspy_ctx_t *owner;
    shs_region_t *region;
    char *addr;
    size_t len;
    Py_buffer held;          /* register(): the caller's memory, kept alive */
    int has_held;
    Py_ssize_t exports;      /* buffer views handed out and not released */
    int users;               /* engines using it as their model */
    shspy_region_t *next;
};

extern PyTypeObject shspy_ctx_type, shspy_region_type, shspy_coll_type, shspy_shadow_type,
    shspy_table_type, shspy_worker_type;

/* Raises the exception of status st ("what: <library's words>") and
 * returns NULL. */
PyObject *shspy_raise(shs_status_t st, const char *what);

/* 0 when the context is open, else -1 with BadState raised. */
int shspy_ctx_open(shspy_ctx_t *c, const char *what);

/* The open region of c that holds [addr, addr + len), or NULL. */
shspy_region_t *shspy_find_region(shspy_ctx_t *c, const void *addr, size_t len);

/*
 * A writable, C-contiguous buffer of obj whose elements are one of the
 * struct formats in `formats` (e.g. "fd"), for `what`; -1 with TypeError
 * (wrong type, read-only) or ValueError (not contiguous) raised.
 * *fmt_p receives the matching format character.
 */
int shspy_get_buffer(PyObject *obj, Py_buffer *view, const char *formats, int writable,
                     const char *what, char *fmt_p);

/* The format character of a view ("<f", "=f" and "f" are all 'f'). */
char shspy_format_char(const Py_buffer *view);

/* Module setup of each file: 0 or -1 with an exception set. */
int shspy_init_errors(PyObject *m);
int shspy_init_types(PyObject *m);

#endif

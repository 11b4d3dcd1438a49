/* _transmuter.c — the CPython extension under the `transmuter` package: thin objects over
 * the public C API (include/transmuter.h) and nothing else. Arrays cross as raw buffers
 * (PEP 3118): inputs are wrapped where they lie, outputs are tm_tensors that NumPy views
 * through the buffer protocol, so no copy is made either way. The GIL is released around
 * every call that computes. Not the Python-facing API: transmuter/__init__.py is. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdlib.h>
#include <string.h>

#include "transmuter.h"

/* status code -> exception class, filled by _set_error_classes from __init__.py */
static PyObject *error_classes;
static PyObject *error_base;

static PyObject *raise_status(tm_status st, const tm_error *err) {
    PyObject *cls = NULL;
    if (error_classes) {
        PyObject *key = PyLong_FromLong((long)st);
        if (key) {
            cls = PyDict_GetItemWithError(error_classes, key);
            Py_DECREF(key);
        }
    }
    if (!cls) cls = error_base ? error_base : PyExc_RuntimeError;
    const char *msg = err && err->message[0] ? err->message : tm_status_name(st);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc) return NULL;
    PyObject *v = PyUnicode_FromString(tm_status_name(st));
    PyObject_SetAttrString(exc, "status", v);
    Py_XDECREF(v);
    v = PyLong_FromLong((long)st);
    PyObject_SetAttrString(exc, "code", v);
    Py_XDECREF(v);
    v = PyUnicode_FromString(err ? err->node : "");
    PyObject_SetAttrString(exc, "node", v);
    Py_XDECREF(v);
    v = PyUnicode_FromString(err ? err->op : "");
    PyObject_SetAttrString(exc, "op", v);
    Py_XDECREF(v);
    v = PyUnicode_FromString(err ? err->value : "");
    PyObject_SetAttrString(exc, "value", v);
    Py_XDECREF(v);
    PyErr_Clear();
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *set_error_classes(PyObject *self, PyObject *args) {
    PyObject *base, *classes;
    if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &classes)) return NULL;
    Py_XSETREF(error_base, Py_NewRef(base));
    Py_XSETREF(error_classes, Py_NewRef(classes));
    Py_RETURN_NONE;
}

/* ---- Tensor: a tm_tensor seen as bytes ------------------------------------------------ */

/* Owns its tm_tensor unless `owner` is set (a model's parameter: the model's memory). */
typedef struct {
    PyObject_HEAD
    tm_tensor *t;
    PyObject *owner;
    int exports;
} TensorObject;

static PyTypeObject TensorType;

static PyObject *tensor_wrap_owned(tm_tensor *t) {
    TensorObject *o = PyObject_New(TensorObject, &TensorType);
    if (!o) {
        tm_tensor_free(t);
        return NULL;
    }
    o->t = t;
    o->owner = NULL;
    o->exports = 0;
    return (PyObject *)o;
}

static PyObject *tensor_wrap_borrowed(tm_tensor *t, PyObject *owner) {
    TensorObject *o = PyObject_New(TensorObject, &TensorType);
    if (!o) return NULL;
    o->t = t;
    o->owner = Py_NewRef(owner);
    o->exports = 0;
    return (PyObject *)o;
}

static void tensor_dealloc(TensorObject *o) {
    if (o->owner) Py_DECREF(o->owner);
    else tm_tensor_free(o->t);
    PyObject_Free(o);
}

static int tensor_getbuffer(TensorObject *o, Py_buffer *view, int flags) {
    if (tm_tensor_dtype(o->t) == TM_STRING) {
        PyErr_SetString(PyExc_BufferError, "a string tensor has no byte buffer");
        return -1;
    }
    void *data = tm_tensor_data(o->t);
    size_t n = tm_tensor_nbytes(o->t);
    static char empty[1];
    if (PyBuffer_FillInfo(view, (PyObject *)o, data ? data : empty, (Py_ssize_t)n, 0, flags) < 0)
        return -1;
    o->exports++;
    return 0;
}

static void tensor_releasebuffer(TensorObject *o, Py_buffer *view) { o->exports--; }

static PyBufferProcs tensor_as_buffer = {
    (getbufferproc)tensor_getbuffer,
    (releasebufferproc)tensor_releasebuffer,
};

static PyObject *dims_tuple(int rank, const int64_t *dims) {
    if (rank < 0) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(rank);
    if (!t) return NULL;
    for (int i = 0; i < rank; i++) {
        PyObject *d = dims[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(dims[i]);
        if (!d) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, d);
    }
    return t;
}

static PyObject *tensor_get_dtype(TensorObject *o, void *c) {
    return PyLong_FromLong((long)tm_tensor_dtype(o->t));
}

static PyObject *tensor_get_shape(TensorObject *o, void *c) {
    return dims_tuple(tm_tensor_rank(o->t), tm_tensor_dims(o->t));
}

/* A string tensor's elements as a list of bytes. */
static PyObject *tensor_strings(TensorObject *o, PyObject *unused) {
    if (tm_tensor_dtype(o->t) != TM_STRING) {
        PyErr_SetString(PyExc_TypeError, "not a string tensor");
        return NULL;
    }
    int64_t n = tm_tensor_numel(o->t);
    char *const *s = tm_tensor_data(o->t);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *b = PyBytes_FromString(s && s[i] ? s[i] : "");
        if (!b) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, b);
    }
    return list;
}

static PyGetSetDef tensor_getset[] = {
    {"dtype", (getter)tensor_get_dtype, NULL, "ONNX element type number", NULL},
    {"shape", (getter)tensor_get_shape, NULL, "dims", NULL},
    {NULL},
};

static PyMethodDef tensor_methods[] = {
    {"strings", (PyCFunction)tensor_strings, METH_NOARGS, "elements of a string tensor"},
    {NULL},
};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_as_buffer = &tensor_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A tensor of the library, exported as raw bytes through the buffer protocol.",
    .tp_getset = tensor_getset,
    .tp_methods = tensor_methods,
};

/* ---- Inputs: (buffer, dtype, shape) triples wrapped without a copy -------------------- */

typedef struct {
    int n;
    const char **names;
    tm_tensor **tensors;
    Py_buffer *views;       /* held until the run ends */
    char *held;             /* views[i] held */
    PyObject *names_ref;    /* keeps the name strings alive */
} input_set;

static void inputs_clear(input_set *s) {
    for (int i = 0; i < s->n; i++) {
        if (s->tensors) tm_tensor_free(s->tensors[i]);
        if (s->held && s->held[i]) PyBuffer_Release(&s->views[i]);
    }
    free(s->names);
    free(s->tensors);
    free(s->views);
    free(s->held);
    Py_XDECREF(s->names_ref);
    memset(s, 0, sizeof *s);
}

static int parse_dims(PyObject *shape, int *rank, int64_t *dims, int cap) {
    PyObject *seq = PySequence_Fast(shape, "shape must be a sequence");
    if (!seq) return -1;
    Py_ssize_t r = PySequence_Fast_GET_SIZE(seq);
    if (r > cap) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "rank too large");
        return -1;
    }
    for (Py_ssize_t i = 0; i < r; i++) {
        dims[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (dims[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    *rank = (int)r;
    Py_DECREF(seq);
    return 0;
}

/* A string tensor from a sequence of bytes (copied). */
static tm_tensor *string_tensor(PyObject *items, int rank, const int64_t *dims) {
    PyObject *seq = PySequence_Fast(items, "string input must be a sequence of bytes");
    if (!seq) return NULL;
    tm_tensor *t = tm_tensor_new(TM_STRING, rank, dims);
    if (!t) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((int64_t)n != tm_tensor_numel(t)) {
        PyErr_SetString(PyExc_ValueError, "string input: element count does not match shape");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = PyBytes_AsString(PySequence_Fast_GET_ITEM(seq, i));
        if (!s || tm_tensor_set_string(t, (int64_t)i, s) != TM_OK) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto fail;
        }
    }
    Py_DECREF(seq);
    return t;
fail:
    Py_DECREF(seq);
    tm_tensor_free(t);
    return NULL;
}

/* One (buffer, dtype, shape) value into a tensor; the buffer view goes to *view. */
static tm_tensor *value_tensor(PyObject *value, Py_buffer *view, char *held) {
    PyObject *obj, *shape;
    int dtype;
    if (!PyArg_ParseTuple(value, "OiO", &obj, &dtype, &shape)) return NULL;
    int rank;
    int64_t dims[16];
    if (parse_dims(shape, &rank, dims, 16) < 0) return NULL;
    if (dtype == TM_STRING) return string_tensor(obj, rank, dims);
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    *held = 1;
    static char empty[64];
    tm_tensor *t = tm_tensor_wrap((tm_dtype)dtype, rank, dims, view->buf ? view->buf : empty);
    if (!t) {
        PyErr_Format(PyExc_ValueError, "cannot make a tensor of dtype %d and rank %d", dtype, rank);
        return NULL;
    }
    if ((Py_ssize_t)tm_tensor_nbytes(t) != view->len) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd bytes for a %s tensor of %zu bytes",
                     view->len, tm_dtype_name((tm_dtype)dtype), tm_tensor_nbytes(t));
        tm_tensor_free(t);
        return NULL;
    }
    return t;
}

/* names: a sequence of str; values: a sequence of (buffer, dtype, shape). */
static int inputs_parse(input_set *s, PyObject *names, PyObject *values) {
    memset(s, 0, sizeof *s);
    PyObject *ns = PySequence_Fast(names, "names must be a sequence");
    if (!ns) return -1;
    s->names_ref = ns;
    PyObject *vs = PySequence_Fast(values, "values must be a sequence");
    if (!vs) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ns);
    if (PySequence_Fast_GET_SIZE(vs) != n) {
        Py_DECREF(vs);
        PyErr_SetString(PyExc_ValueError, "names and values differ in length");
        return -1;
    }
    size_t cap = (size_t)n + 1;
    s->names = calloc(cap, sizeof *s->names);
    s->tensors = calloc(cap, sizeof *s->tensors);
    s->views = calloc(cap, sizeof *s->views);
    s->held = calloc(cap, 1);
    if (!s->names || !s->tensors || !s->views || !s->held) {
        Py_DECREF(vs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        s->n = (int)i + 1;
        s->names[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(ns, i));
        if (!s->names[i]) {
            Py_DECREF(vs);
            return -1;
        }
        s->tensors[i] = value_tensor(PySequence_Fast_GET_ITEM(vs, i), &s->views[i], &s->held[i]);
        if (!s->tensors[i]) {
            Py_DECREF(vs);
            return -1;
        }
    }
    s->n = (int)n;
    Py_DECREF(vs);
    return 0;
}

/* A list of Tensor objects (None where NULL) taking ownership of outputs[0..n). */
static PyObject *outputs_list(tm_tensor **outputs, int n) {
    PyObject *list = PyList_New(n);
    if (!list) goto fail;
    for (int i = 0; i < n; i++) {
        PyObject *o;
        if (outputs[i]) {
            o = tensor_wrap_owned(outputs[i]);
            outputs[i] = NULL;
            if (!o) goto fail;
        } else {
            o = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
fail:
    for (int i = 0; i < n; i++) tm_tensor_free(outputs[i]);
    Py_XDECREF(list);
    return NULL;
}

/* ---- Model ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    tm_model *m;
    PyObject *keep;          /* the bytes a model loaded from memory reads */
} ModelObject;

static PyTypeObject ModelType;

static void model_dealloc(ModelObject *o) {
    tm_model_free(o->m);
    Py_XDECREF(o->keep);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

/* The UTF-8 strings of a sequence of str, NULL-terminated (free() the array; the strings
 * live as long as *keep, a reference to release after). NULL with an exception set. */
static const char **str_list(PyObject *items, const char *what, PyObject **keep, Py_ssize_t *n) {
    *keep = PySequence_Fast(items, what);
    if (!*keep) return NULL;
    *n = PySequence_Fast_GET_SIZE(*keep);
    const char **out = calloc((size_t)*n + 1, sizeof *out);
    if (!out) {
        Py_CLEAR(*keep);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        out[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*keep, i));
        if (!out[i]) {
            free(out);
            Py_CLEAR(*keep);
            return NULL;
        }
    }
    return out;
}

static int model_init(ModelObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"source", "threads", "compute_type", "trainable", "trainable_names",
                             "plan_cache_limit", "dequantize_nbits", "base_dir", "nbits_int8", NULL};
    PyObject *source, *names = Py_None;
    int threads = 0, compute_type = 0, trainable = 0, dequant = 0, nbits_int8 = 0;
    Py_ssize_t cache_limit = 0;
    const char *base_dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iiiOnizi", kwlist, &source, &threads,
                                     &compute_type, &trainable, &names, &cache_limit, &dequant,
                                     &base_dir, &nbits_int8))
        return -1;
    if (nbits_int8 < -1 || nbits_int8 > 1) {
        PyErr_Format(PyExc_ValueError, "nbits_int8 %d: 0 (each node's accuracy_level), 1 (all) or -1 (none)",
                     nbits_int8);
        return -1;
    }
    if (o->m) {
        PyErr_SetString(PyExc_RuntimeError, "model already loaded");
        return -1;
    }
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    lo.compute_type = (tm_dtype)compute_type;
    lo.trainable = trainable;
    lo.plan_cache_limit = (size_t)cache_limit;
    lo.dequantize_nbits = dequant;
    lo.nbits_int8 = nbits_int8;
    PyObject *nseq = NULL;
    const char **tn = NULL;
    if (names != Py_None) {
        Py_ssize_t n = 0;
        tn = str_list(names, "trainable_names must be a sequence of str", &nseq, &n);
        if (!tn) return -1;
        lo.n_trainable_names = (int)n;
        lo.trainable_names = tn;
    }
    tm_error err = {0};
    tm_status st;
    tm_model *m = NULL;
    if (PyBytes_Check(source)) {
        const char *data = PyBytes_AS_STRING(source);
        size_t size = (size_t)PyBytes_GET_SIZE(source);
        Py_BEGIN_ALLOW_THREADS
        st = tm_model_load_buffer(data, size, base_dir, &lo, &m, &err);
        Py_END_ALLOW_THREADS
        if (st == TM_OK) o->keep = Py_NewRef(source);
    } else {
        PyObject *path = NULL;
        if (!PyUnicode_FSConverter(source, &path)) {
            free(tn);
            Py_XDECREF(nseq);
            return -1;
        }
        const char *p = PyBytes_AS_STRING(path);
        Py_BEGIN_ALLOW_THREADS
        st = tm_model_load(p, &lo, &m, &err);
        Py_END_ALLOW_THREADS
        Py_DECREF(path);
    }
    free(tn);
    Py_XDECREF(nseq);
    if (st != TM_OK) {
        raise_status(st, &err);
        return -1;
    }
    o->m = m;
    return 0;
}

static int model_ready(ModelObject *o) {
    if (o->m) return 1;
    PyErr_SetString(PyExc_RuntimeError, "model not loaded");
    return 0;
}

static PyObject *desc_tuple(const tm_value_desc *d, tm_kind kind, int optional) {
    PyObject *params;
    if (d->rank < 0) {
        params = Py_NewRef(Py_None);
    } else {
        params = PyTuple_New(d->rank);
        if (!params) return NULL;
        for (int i = 0; i < d->rank; i++) {
            const char *p = d->dim_params ? d->dim_params[i] : NULL;
            PyTuple_SET_ITEM(params, i, p ? PyUnicode_FromString(p) : Py_NewRef(Py_None));
        }
    }
    PyObject *dims = dims_tuple(d->rank, d->dims);
    if (!dims) {
        Py_DECREF(params);
        return NULL;
    }
    return Py_BuildValue("(siNNii)", d->name, (int)d->dtype, dims, params, (int)kind, optional);
}

static PyObject *model_values(ModelObject *o, int outputs) {
    if (!model_ready(o)) return NULL;
    int n = outputs ? tm_model_n_outputs(o->m) : tm_model_n_inputs(o->m);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        tm_value_desc d;
        tm_error err = {0};
        tm_status st = outputs ? tm_model_output(o->m, i, &d) : tm_model_input(o->m, i, &d);
        if (st != TM_OK) {
            Py_DECREF(list);
            return raise_status(st, &err);
        }
        tm_kind kind = TM_KIND_TENSOR;
        int optional = 0;
        if (outputs) tm_model_output_kind(o->m, i, &kind, &optional);
        else tm_model_input_kind(o->m, i, &kind, &optional);
        PyObject *t = desc_tuple(&d, kind, optional);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, t);
    }
    return list;
}

static PyObject *model_inputs(ModelObject *o, PyObject *u) { return model_values(o, 0); }
static PyObject *model_outputs(ModelObject *o, PyObject *u) { return model_values(o, 1); }

static PyObject *model_missing_ops(ModelObject *o, PyObject *u) {
    if (!model_ready(o)) return NULL;
    const char *s = tm_model_missing_ops(o->m);
    if (!s) Py_RETURN_NONE;
    return PyUnicode_FromString(s);
}

static PyObject *model_opsets(ModelObject *o, PyObject *u) {
    if (!model_ready(o)) return NULL;
    int n = tm_model_n_opsets(o->m);
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < n; i++) {
        const char *domain;
        int64_t version;
        if (tm_model_opset(o->m, i, &domain, &version) != TM_OK) continue;
        PyObject *v = PyLong_FromLongLong(version);
        if (!v || PyDict_SetItemString(d, domain, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

/* run(names, values, outputs=None, eager=False): outputs, when given, is a list with an
 * entry per model output: None (a new tensor) or a (buffer, dtype, shape) written in
 * place (tm_model_run's caller tensors). Returns a list of Tensor or None. */
static PyObject *model_run(ModelObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"names", "values", "outputs", "eager", NULL};
    PyObject *names, *values, *outs = Py_None;
    int eager = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|Op", kwlist, &names, &values, &outs, &eager))
        return NULL;
    if (!model_ready(o)) return NULL;
    input_set in, given;
    memset(&given, 0, sizeof given);
    if (inputs_parse(&in, names, values) < 0) {
        inputs_clear(&in);
        return NULL;
    }
    int n_out = tm_model_n_outputs(o->m);
    tm_tensor **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    if (!outputs) {
        inputs_clear(&in);
        return PyErr_NoMemory();
    }
    if (outs != Py_None) {
        /* Output buffers given by the caller: parsed as an input set of n_out entries, None
         * entries left NULL. */
        PyObject *seq = PySequence_Fast(outs, "outputs must be a sequence");
        if (!seq) goto fail;
        if (PySequence_Fast_GET_SIZE(seq) != n_out) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "outputs needs one entry per model output");
            goto fail;
        }
        given.tensors = calloc((size_t)n_out + 1, sizeof *given.tensors);
        given.views = calloc((size_t)n_out + 1, sizeof *given.views);
        given.held = calloc((size_t)n_out + 1, 1);
        given.n = n_out;
        if (!given.tensors || !given.views || !given.held) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            goto fail;
        }
        for (int i = 0; i < n_out; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
            if (v == Py_None) continue;
            given.tensors[i] = value_tensor(v, &given.views[i], &given.held[i]);
            if (!given.tensors[i]) {
                Py_DECREF(seq);
                goto fail;
            }
            outputs[i] = given.tensors[i];
        }
        Py_DECREF(seq);
        if (eager) {
            PyErr_SetString(PyExc_ValueError, "output buffers are for compiled runs");
            goto fail;
        }
    }
    tm_error err = {0};
    tm_status st;
    tm_model *m = o->m;
    Py_BEGIN_ALLOW_THREADS
    if (eager) {
        st = tm_run_eager(m, in.n, in.names, (const tm_tensor *const *)in.tensors, outputs, NULL,
                          &err);
    } else {
        st = tm_model_run(m, in.n, in.names, (const tm_tensor *const *)in.tensors, outputs, NULL,
                          &err);
    }
    Py_END_ALLOW_THREADS
    /* Caller buffers are the caller's: they are not returned as new tensors. */
    for (int i = 0; given.tensors && i < n_out; i++)
        if (given.tensors[i]) outputs[i] = NULL;
    inputs_clear(&in);
    inputs_clear(&given);
    if (st != TM_OK) {
        for (int i = 0; i < n_out; i++) tm_tensor_free(outputs[i]);
        free(outputs);
        return raise_status(st, &err);
    }
    PyObject *r = outputs_list(outputs, n_out);
    free(outputs);
    return r;
fail:
    for (int i = 0; given.tensors && i < n_out; i++)
        if (given.tensors[i]) outputs[i] = NULL;
    free(outputs);
    inputs_clear(&in);
    inputs_clear(&given);
    return NULL;
}

/* ---- Runs on values: sequences and optionals (tm_model_run_values) -------------------- */

/* The buffers the tensors of a run's values read, held until the run ends. */
typedef struct {
    Py_buffer *views;
    int n, cap;
} view_set;

static void views_release(view_set *vs) {
    for (int i = 0; i < vs->n; i++) PyBuffer_Release(&vs->views[i]);
    free(vs->views);
    memset(vs, 0, sizeof *vs);
}

/* A tensor over one (buffer, dtype, shape) triple; its view joins vs. */
static tm_tensor *held_tensor(PyObject *triple, view_set *vs) {
    if (vs->n == vs->cap) {
        int cap = vs->cap ? 2 * vs->cap : 8;
        Py_buffer *grown = realloc(vs->views, (size_t)cap * sizeof *grown);
        if (!grown) {
            PyErr_NoMemory();
            return NULL;
        }
        vs->views = grown;
        vs->cap = cap;
    }
    char held = 0;
    tm_tensor *t = value_tensor(triple, &vs->views[vs->n], &held);
    if (held) {
        if (t) vs->n++;
        else PyBuffer_Release(&vs->views[vs->n]);
    }
    return t;
}

/* None (an empty optional), a (buffer, dtype, shape) triple, or (elem_dtype, [triples]) for
 * a sequence, as a tm_value; NULL with an exception set. */
static tm_value *py_value(PyObject *v, view_set *vs) {
    tm_error err = {0};
    tm_value *out = NULL;
    tm_status st;
    if (v == Py_None) {
        st = tm_value_new_none(&out, &err);
        return st == TM_OK ? out : (tm_value *)raise_status(st, &err);
    }
    if (!PyTuple_Check(v) || (PyTuple_GET_SIZE(v) != 2 && PyTuple_GET_SIZE(v) != 3)) {
        PyErr_SetString(PyExc_TypeError, "a value is None, (buffer, dtype, shape) or "
                        "(elem_dtype, [(buffer, dtype, shape), ...])");
        return NULL;
    }
    if (PyTuple_GET_SIZE(v) == 3) {
        tm_tensor *t = held_tensor(v, vs);
        if (!t) return NULL;
        st = tm_value_from_tensor(t, &out, &err);
        return st == TM_OK ? out : (tm_value *)raise_status(st, &err);
    }
    int dtype = (int)PyLong_AsLong(PyTuple_GET_ITEM(v, 0));
    if (dtype == -1 && PyErr_Occurred()) return NULL;
    PyObject *items = PySequence_Fast(PyTuple_GET_ITEM(v, 1), "a sequence's elements: a list");
    if (!items) return NULL;
    st = tm_value_new_sequence((tm_dtype)dtype, &out, &err);
    for (Py_ssize_t i = 0; st == TM_OK && i < PySequence_Fast_GET_SIZE(items); i++) {
        tm_tensor *t = held_tensor(PySequence_Fast_GET_ITEM(items, i), vs);
        if (!t) {
            Py_DECREF(items);
            tm_value_free(out);
            return NULL;
        }
        st = tm_value_append(out, t, &err);
    }
    Py_DECREF(items);
    if (st != TM_OK) {
        tm_value_free(out);
        return (tm_value *)raise_status(st, &err);
    }
    return out;
}

/* A run's output as Python: a Tensor, None, or a list of Tensors (taken from the value). */
static PyObject *py_output(tm_value *v) {
    tm_kind kind = tm_value_kind(v);
    if (kind == TM_KIND_NONE) Py_RETURN_NONE;
    if (kind == TM_KIND_TENSOR) return tensor_wrap_owned(tm_value_take(v, 0));
    Py_ssize_t n = (Py_ssize_t)tm_value_length(v);
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list && i < n; i++) {
        PyObject *t = tensor_wrap_owned(tm_value_take(v, i));
        if (!t) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, t);
    }
    return list;
}

/* run_values(names, values, eager=False): values as py_value takes them. Returns a list
 * with one entry per model output: a Tensor, None (an empty optional) or a list of
 * Tensors (a sequence). */
static PyObject *model_run_values(ModelObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"names", "values", "eager", NULL};
    PyObject *names, *values;
    int eager = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p", kwlist, &names, &values, &eager))
        return NULL;
    if (!model_ready(o)) return NULL;
    PyObject *nkeep = NULL, *vseq = NULL, *result = NULL;
    Py_ssize_t n = 0;
    view_set vs = {0};
    int n_out = tm_model_n_outputs(o->m);
    const char **cnames = str_list(names, "names must be a sequence of str", &nkeep, &n);
    tm_value **in = NULL, **out = NULL;
    tm_error err = {0};
    tm_status st;
    tm_model *m = o->m;
    if (!cnames) goto done;
    vseq = PySequence_Fast(values, "values must be a sequence");
    if (!vseq) goto done;
    if (PySequence_Fast_GET_SIZE(vseq) != n) {
        PyErr_SetString(PyExc_ValueError, "names and values differ in length");
        goto done;
    }
    in = calloc((size_t)n + 1, sizeof *in);
    out = calloc((size_t)n_out + 1, sizeof *out);
    if (!in || !out) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(in[i] = py_value(PySequence_Fast_GET_ITEM(vseq, i), &vs))) goto done;
    Py_BEGIN_ALLOW_THREADS
    st = eager ? tm_run_eager_values(m, (int)n, cnames, (const tm_value *const *)in, out, NULL, &err)
               : tm_model_run_values(m, (int)n, cnames, (const tm_value *const *)in, out, NULL, &err);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) {
        raise_status(st, &err);
        goto done;
    }
    result = PyList_New(n_out);
    for (int i = 0; result && i < n_out; i++) {
        PyObject *r = py_output(out[i]);
        if (!r) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, r);
    }
done:
    for (Py_ssize_t i = 0; in && i < n; i++) tm_value_free(in[i]);
    for (int i = 0; out && i < n_out; i++) tm_value_free(out[i]);
    free(in);
    free(out);
    views_release(&vs);
    free(cnames);
    Py_XDECREF(nkeep);
    Py_XDECREF(vseq);
    return result;
}

static PyObject *model_plan_stats(ModelObject *o, PyObject *u) {
    if (!model_ready(o)) return NULL;
    tm_plan_stats s = {.size = sizeof s};
    tm_model_plan_stats(o->m, &s);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n}", "runs", (Py_ssize_t)s.runs, "plans",
                         (Py_ssize_t)s.plans, "generic_plans", (Py_ssize_t)s.generic_plans,
                         "generic_failed", (Py_ssize_t)s.generic_failed, "generic_runs",
                         (Py_ssize_t)s.generic_runs);
}

/* Parameters as (name, Tensor viewing the model's own storage). */
static PyObject *model_params(ModelObject *o, PyObject *u) {
    if (!model_ready(o)) return NULL;
    int n = tm_model_n_params(o->m);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        tm_param_desc d;
        tm_error err = {0};
        if (tm_model_param(o->m, i, &d) != TM_OK) {
            Py_DECREF(list);
            return raise_status(TM_ERR_INVALID_ARGUMENT, &err);
        }
        PyObject *t = tensor_wrap_borrowed(d.tensor, (PyObject *)o);
        if (!t) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, Py_BuildValue("(sN)", d.name, t));
    }
    return list;
}

/* save(path, names, values, external_data=0): values as run's (buffer, dtype, shape). */
static PyObject *model_save(ModelObject *o, PyObject *args) {
    PyObject *path, *names, *values;
    int external = 0;
    if (!PyArg_ParseTuple(args, "O&OO|i", PyUnicode_FSConverter, &path, &names, &values,
                          &external))
        return NULL;
    if (!model_ready(o)) {
        Py_DECREF(path);
        return NULL;
    }
    input_set in;
    if (inputs_parse(&in, names, values) < 0) {
        inputs_clear(&in);
        Py_DECREF(path);
        return NULL;
    }
    tm_save_options so;
    tm_save_options_default(&so);
    so.external_data = (tm_external_data)external;
    tm_error err = {0};
    tm_status st;
    const char *p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    st = tm_model_save(o->m, p, in.n, in.names, (const tm_tensor *const *)in.tensors, &so, &err);
    Py_END_ALLOW_THREADS
    inputs_clear(&in);
    Py_DECREF(path);
    if (st != TM_OK) return raise_status(st, &err);
    Py_RETURN_NONE;
}

static PyMethodDef model_methods[] = {
    {"inputs", (PyCFunction)model_inputs, METH_NOARGS,
     "(name, dtype, dims, dim_params, kind, optional) each"},
    {"outputs", (PyCFunction)model_outputs, METH_NOARGS,
     "(name, dtype, dims, dim_params, kind, optional) each"},
    {"missing_ops", (PyCFunction)model_missing_ops, METH_NOARGS, NULL},
    {"opsets", (PyCFunction)model_opsets, METH_NOARGS, NULL},
    {"run", (PyCFunction)(void (*)(void))model_run, METH_VARARGS | METH_KEYWORDS, NULL},
    {"run_values", (PyCFunction)(void (*)(void))model_run_values, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"plan_stats", (PyCFunction)model_plan_stats, METH_NOARGS, NULL},
    {"params", (PyCFunction)model_params, METH_NOARGS, NULL},
    {"save", (PyCFunction)model_save, METH_VARARGS, NULL},
    {NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.Model",
    .tp_basicsize = sizeof(ModelObject),
    .tp_dealloc = (destructor)model_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A loaded model (tm_model): immutable, shareable between threads.",
    .tp_methods = model_methods,
    .tp_init = (initproc)model_init,
    .tp_new = PyType_GenericNew,
};

/* ---- GradPlan: a value-and-gradient plan with its session ------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *model;
    tm_plan *plan;
    tm_session *session;
    PyThread_type_lock lock;   /* a session is one run at a time */
} GradPlanObject;

static PyTypeObject GradPlanType;

static void grad_plan_dealloc(GradPlanObject *o) {
    tm_session_free(o->session);
    tm_plan_free(o->plan);
    if (o->lock) PyThread_free_lock(o->lock);
    Py_XDECREF(o->model);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

/* GradPlan(model, names, values, loss, output, target, ignore_index, params, with_outputs) */
static int grad_plan_init(GradPlanObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"model", "names", "values", "loss", "output", "target",
                             "ignore_index", "params", "with_outputs", NULL};
    PyObject *model, *names, *values, *params = Py_None;
    int loss = 0, with_outputs = 0;
    const char *output = NULL, *target = NULL;
    long long ignore_index = -100;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OO|izzLOp", kwlist, &ModelType, &model, &names,
                                     &values, &loss, &output, &target, &ignore_index, &params,
                                     &with_outputs))
        return -1;
    if (o->plan) {
        PyErr_SetString(PyExc_RuntimeError, "already made");
        return -1;
    }
    ModelObject *mo = (ModelObject *)model;
    if (!model_ready(mo)) return -1;
    tm_grad_options go;
    tm_grad_options_default(&go);
    go.loss = (tm_loss)loss;
    go.output = output;
    go.target = target;
    go.ignore_index = ignore_index;
    go.with_outputs = with_outputs;
    PyObject *pseq = NULL;
    const char **pn = NULL;
    if (params != Py_None) {
        Py_ssize_t n = 0;
        pn = str_list(params, "params must be a sequence of str", &pseq, &n);
        if (!pn) return -1;
        go.n_params = (int)n;
        go.params = pn;
    }
    input_set in;
    if (inputs_parse(&in, names, values) < 0) {
        inputs_clear(&in);
        free(pn);
        Py_XDECREF(pseq);
        return -1;
    }
    tm_error err = {0};
    tm_status st;
    tm_plan *plan = NULL;
    tm_session *sess = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = tm_grad_plan_create(mo->m, in.n, in.names, (const tm_tensor *const *)in.tensors, NULL,
                             &go, &plan, &err);
    if (st == TM_OK) st = tm_session_create(plan, &sess, &err);
    Py_END_ALLOW_THREADS
    inputs_clear(&in);
    free(pn);
    Py_XDECREF(pseq);
    if (st != TM_OK) {
        tm_plan_free(plan);
        raise_status(st, &err);
        return -1;
    }
    o->lock = PyThread_allocate_lock();
    if (!o->lock) {
        tm_session_free(sess);
        tm_plan_free(plan);
        PyErr_NoMemory();
        return -1;
    }
    o->plan = plan;
    o->session = sess;
    o->model = Py_NewRef(model);
    return 0;
}

static int grad_plan_ready(GradPlanObject *o) {
    if (o->plan) return 1;
    PyErr_SetString(PyExc_RuntimeError, "gradient plan not made");
    return 0;
}

/* The model parameter index of each gradient, in the plan's order. */
static PyObject *grad_plan_params(GradPlanObject *o, PyObject *u) {
    if (!grad_plan_ready(o)) return NULL;
    int n = tm_plan_n_grads(o->plan);
    PyObject *list = PyList_New(n);
    for (int j = 0; list && j < n; j++)
        PyList_SET_ITEM(list, j, PyLong_FromLong(tm_plan_grad_param(o->plan, j)));
    return list;
}

static PyObject *grad_plan_run(GradPlanObject *o, PyObject *args) {
    PyObject *names, *values;
    if (!PyArg_ParseTuple(args, "OO", &names, &values)) return NULL;
    if (!grad_plan_ready(o)) return NULL;
    input_set in;
    if (inputs_parse(&in, names, values) < 0) {
        inputs_clear(&in);
        return NULL;
    }
    int n_out = tm_plan_n_outputs(o->plan);
    tm_tensor **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    if (!outputs) {
        inputs_clear(&in);
        return PyErr_NoMemory();
    }
    tm_error err = {0};
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(o->lock, WAIT_LOCK);
    st = tm_session_run(o->session, in.n, in.names, (const tm_tensor *const *)in.tensors, outputs,
                        &err);
    PyThread_release_lock(o->lock);
    Py_END_ALLOW_THREADS
    inputs_clear(&in);
    if (st != TM_OK) {
        for (int i = 0; i < n_out; i++) tm_tensor_free(outputs[i]);
        free(outputs);
        return raise_status(st, &err);
    }
    PyObject *r = outputs_list(outputs, n_out);
    free(outputs);
    return r;
}

static PyMethodDef grad_plan_methods[] = {
    {"params", (PyCFunction)grad_plan_params, METH_NOARGS, NULL},
    {"run", (PyCFunction)grad_plan_run, METH_VARARGS, NULL},
    {NULL},
};

static PyTypeObject GradPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.GradPlan",
    .tp_basicsize = sizeof(GradPlanObject),
    .tp_dealloc = (destructor)grad_plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A value-and-gradient plan (tm_grad_plan_create) and its session.",
    .tp_methods = grad_plan_methods,
    .tp_init = (initproc)grad_plan_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Optimizer ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    tm_optimizer *opt;
    PyObject *params;     /* the Tensor objects updated in place (kept alive) */
    int n;
    PyThread_type_lock lock;
} OptimizerObject;

static PyTypeObject OptimizerType;

static void optimizer_dealloc(OptimizerObject *o) {
    tm_optimizer_free(o->opt);
    if (o->lock) PyThread_free_lock(o->lock);
    Py_XDECREF(o->params);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int double_item(PyObject *d, const char *key, double *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static int long_item(PyObject *d, const char *key, long long *out) {
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

/* Optimizer(kind, names, tensors, settings): tensors are Tensor objects (parameters). */
static int optimizer_init(OptimizerObject *o, PyObject *args, PyObject *kw) {
    int kind;
    PyObject *names, *tensors, *settings;
    if (!PyArg_ParseTuple(args, "iOOO!", &kind, &names, &tensors, &PyDict_Type, &settings))
        return -1;
    if (o->opt) {
        PyErr_SetString(PyExc_RuntimeError, "already made");
        return -1;
    }
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, (tm_optimizer_kind)kind);
    long long v;
    double d;
#define D(field) do { d = p.field; if (double_item(settings, #field, &d) < 0) return -1; p.field = d; } while (0)
#define L(field) do { v = p.field; if (long_item(settings, #field, &v) < 0) return -1; p.field = v; } while (0)
    D(lr); D(weight_decay); D(momentum); D(dampening); D(beta1); D(beta2); D(eps);
    D(max_grad_norm);
    L(maximize); L(nesterov); L(amsgrad); L(warmup_steps); L(total_steps); L(threads);
    v = (long long)p.schedule;
    if (long_item(settings, "schedule", &v) < 0) return -1;
    p.schedule = (tm_lr_schedule)v;
#undef D
#undef L
    PyObject *ns = PySequence_Fast(names, "names must be a sequence");
    if (!ns) return -1;
    PyObject *ts = PySequence_Fast(tensors, "tensors must be a sequence");
    if (!ts) {
        Py_DECREF(ns);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ts);
    const char **cn = calloc((size_t)n + 1, sizeof *cn);
    tm_tensor **ct = calloc((size_t)n + 1, sizeof *ct);
    int rc = -1;
    if (!cn || !ct) {
        PyErr_NoMemory();
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(ns) != n) {
        PyErr_SetString(PyExc_ValueError, "names and tensors differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(ts, i);
        if (!PyObject_TypeCheck(t, &TensorType)) {
            PyErr_SetString(PyExc_TypeError, "parameters must be the model's tensors");
            goto done;
        }
        ct[i] = ((TensorObject *)t)->t;
        cn[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(ns, i));
        if (!cn[i]) goto done;
    }
    tm_error err = {0};
    tm_status st = tm_optimizer_create(&p, (int)n, cn, ct, &o->opt, &err);
    if (st != TM_OK) {
        raise_status(st, &err);
        goto done;
    }
    o->lock = PyThread_allocate_lock();
    if (!o->lock) {
        PyErr_NoMemory();
        goto done;
    }
    o->n = (int)n;
    o->params = Py_NewRef(ts);
    rc = 0;
done:
    free(cn);
    free(ct);
    Py_DECREF(ns);
    Py_DECREF(ts);
    return rc;
}

static int optimizer_ready(OptimizerObject *o) {
    if (o->opt) return 1;
    PyErr_SetString(PyExc_RuntimeError, "optimizer not made");
    return 0;
}

/* step(grads): one (buffer, dtype, shape) or None per parameter. */
static PyObject *optimizer_step(OptimizerObject *o, PyObject *args) {
    PyObject *grads;
    if (!PyArg_ParseTuple(args, "O", &grads)) return NULL;
    if (!optimizer_ready(o)) return NULL;
    PyObject *seq = PySequence_Fast(grads, "grads must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != o->n) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "one gradient (or None) per parameter");
        return NULL;
    }
    input_set g;
    memset(&g, 0, sizeof g);
    g.tensors = calloc((size_t)o->n + 1, sizeof *g.tensors);
    g.views = calloc((size_t)o->n + 1, sizeof *g.views);
    g.held = calloc((size_t)o->n + 1, 1);
    g.n = o->n;
    if (!g.tensors || !g.views || !g.held) {
        Py_DECREF(seq);
        inputs_clear(&g);
        return PyErr_NoMemory();
    }
    for (int i = 0; i < o->n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        if (v == Py_None) continue;
        g.tensors[i] = value_tensor(v, &g.views[i], &g.held[i]);
        if (!g.tensors[i]) {
            Py_DECREF(seq);
            inputs_clear(&g);
            return NULL;
        }
    }
    Py_DECREF(seq);
    tm_error err = {0};
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(o->lock, WAIT_LOCK);
    st = tm_optimizer_step(o->opt, (const tm_tensor *const *)g.tensors, &err);
    PyThread_release_lock(o->lock);
    Py_END_ALLOW_THREADS
    inputs_clear(&g);
    if (st != TM_OK) return raise_status(st, &err);
    Py_RETURN_NONE;
}

static PyObject *optimizer_state_io(OptimizerObject *o, PyObject *args, int save) {
    PyObject *path;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path)) return NULL;
    if (!optimizer_ready(o)) {
        Py_DECREF(path);
        return NULL;
    }
    tm_error err = {0};
    tm_status st;
    const char *p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(o->lock, WAIT_LOCK);
    st = save ? tm_optimizer_save_state(o->opt, p, &err) : tm_optimizer_load_state(o->opt, p, &err);
    PyThread_release_lock(o->lock);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (st != TM_OK) return raise_status(st, &err);
    Py_RETURN_NONE;
}

static PyObject *optimizer_save_state(OptimizerObject *o, PyObject *a) { return optimizer_state_io(o, a, 1); }
static PyObject *optimizer_load_state(OptimizerObject *o, PyObject *a) { return optimizer_state_io(o, a, 0); }

static PyObject *optimizer_set_weight_decay(OptimizerObject *o, PyObject *args) {
    int i;
    double wd;
    if (!PyArg_ParseTuple(args, "id", &i, &wd)) return NULL;
    if (!optimizer_ready(o)) return NULL;
    tm_error err = {0};
    tm_status st = tm_optimizer_set_weight_decay(o->opt, i, wd, &err);
    if (st != TM_OK) return raise_status(st, &err);
    Py_RETURN_NONE;
}

static PyObject *optimizer_info(OptimizerObject *o, PyObject *u) {
    if (!optimizer_ready(o)) return NULL;
    return Py_BuildValue("{s:L,s:d,s:d}", "step_count", (long long)tm_optimizer_step_count(o->opt),
                         "lr", tm_optimizer_lr(o->opt), "grad_norm", tm_optimizer_grad_norm(o->opt));
}

static PyMethodDef optimizer_methods[] = {
    {"step", (PyCFunction)optimizer_step, METH_VARARGS, NULL},
    {"save_state", (PyCFunction)optimizer_save_state, METH_VARARGS, NULL},
    {"load_state", (PyCFunction)optimizer_load_state, METH_VARARGS, NULL},
    {"set_weight_decay", (PyCFunction)optimizer_set_weight_decay, METH_VARARGS, NULL},
    {"info", (PyCFunction)optimizer_info, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject OptimizerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.Optimizer",
    .tp_basicsize = sizeof(OptimizerObject),
    .tp_dealloc = (destructor)optimizer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SGD or AdamW over a model's parameters (tm_optimizer).",
    .tp_methods = optimizer_methods,
    .tp_init = (initproc)optimizer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Tokenizer -------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    tm_tokenizer *tok;
} TokenizerObject;

static PyTypeObject TokenizerType;

static void tokenizer_dealloc(TokenizerObject *o) {
    tm_tokenizer_free(o->tok);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int tokenizer_init(TokenizerObject *o, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"source", "ignore_config", NULL};
    const char *source;
    int ignore = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|p", kwlist, &source, &ignore)) return -1;
    if (o->tok) {
        PyErr_SetString(PyExc_RuntimeError, "already loaded");
        return -1;
    }
    tm_tokenizer_options opts = tm_tokenizer_options_default();
    opts.ignore_config = ignore;
    tm_error err = {0};
    tm_status st;
    tm_tokenizer *tok = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = tm_tokenizer_load(source, &opts, &tok, &err);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) {
        raise_status(st, &err);
        return -1;
    }
    o->tok = tok;
    return 0;
}

static int tokenizer_ready(TokenizerObject *o) {
    if (o->tok) return 1;
    PyErr_SetString(PyExc_RuntimeError, "tokenizer not loaded");
    return 0;
}

static PyObject *int_list(const int32_t *v, size_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) PyList_SET_ITEM(l, (Py_ssize_t)i, PyLong_FromLong(v[i]));
    return l;
}

/* An encoding as a dict of lists (Python's Encoding object is built from it). */
static PyObject *encoding_dict(const tm_encoding *e) {
    size_t n = tm_encoding_n(e);
    PyObject *tokens = PyList_New((Py_ssize_t)n);
    PyObject *offsets = PyList_New((Py_ssize_t)n);
    PyObject *byte_offsets = PyList_New((Py_ssize_t)n);
    PyObject *overflow = PyList_New(0);
    if (!tokens || !offsets || !byte_offsets || !overflow) goto fail;
    const char *const *ts = tm_encoding_tokens(e);
    const int32_t *tl = tm_encoding_token_lengths(e);
    const int32_t *co = tm_encoding_char_offsets(e), *bo = tm_encoding_offsets(e);
    for (size_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(ts[i], tl[i], "replace");
        if (!s) goto fail;
        PyList_SET_ITEM(tokens, (Py_ssize_t)i, s);
        PyList_SET_ITEM(offsets, (Py_ssize_t)i, Py_BuildValue("(ii)", co[2 * i], co[2 * i + 1]));
        PyList_SET_ITEM(byte_offsets, (Py_ssize_t)i, Py_BuildValue("(ii)", bo[2 * i], bo[2 * i + 1]));
    }
    for (size_t k = 0; k < tm_encoding_n_overflowing(e); k++) {
        PyObject *d = encoding_dict(tm_encoding_overflowing(e, k));
        if (!d || PyList_Append(overflow, d) < 0) {
            Py_XDECREF(d);
            goto fail;
        }
        Py_DECREF(d);
    }
    return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N}",
                         "ids", int_list(tm_encoding_ids(e), n),
                         "tokens", tokens,
                         "attention_mask", int_list(tm_encoding_attention_mask(e), n),
                         "type_ids", int_list(tm_encoding_type_ids(e), n),
                         "special_tokens_mask", int_list(tm_encoding_special_tokens_mask(e), n),
                         "word_ids", int_list(tm_encoding_word_ids(e), n),
                         "sequence_ids", int_list(tm_encoding_sequence_ids(e), n),
                         "offsets", offsets, "byte_offsets", byte_offsets,
                         "overflowing", overflow);
fail:
    Py_XDECREF(tokens);
    Py_XDECREF(offsets);
    Py_XDECREF(byte_offsets);
    Py_XDECREF(overflow);
    return NULL;
}

static int encode_options(PyObject *d, tm_encode_options *opts) {
    *opts = tm_encode_options_default();
    if (!d || d == Py_None) return 0;
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "options must be a dict");
        return -1;
    }
    long long v;
#define L(field) do { v = opts->field; if (long_item(d, #field, &v) < 0) return -1; opts->field = v; } while (0)
    L(add_special_tokens); L(max_length); L(stride); L(pad_to_multiple_of); L(threads);
    v = opts->truncation; if (long_item(d, "truncation", &v) < 0) return -1; opts->truncation = (tm_truncation)v;
    v = opts->padding; if (long_item(d, "padding", &v) < 0) return -1; opts->padding = (tm_padding)v;
    v = opts->truncation_side; if (long_item(d, "truncation_side", &v) < 0) return -1; opts->truncation_side = (tm_side)v;
    v = opts->padding_side; if (long_item(d, "padding_side", &v) < 0) return -1; opts->padding_side = (tm_side)v;
#undef L
    return 0;
}

/* encode(texts, pairs=None, options=None) -> list of encoding dicts (a batch, possibly of 1). */
static PyObject *tokenizer_encode(TokenizerObject *o, PyObject *args) {
    PyObject *texts, *pairs = Py_None, *optd = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO", &texts, &pairs, &optd)) return NULL;
    if (!tokenizer_ready(o)) return NULL;
    tm_encode_options opts;
    if (encode_options(optd, &opts) < 0) return NULL;
    PyObject *ts = PySequence_Fast(texts, "texts must be a sequence of str"), *ps = NULL;
    if (!ts) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ts);
    if (pairs != Py_None) {
        ps = PySequence_Fast(pairs, "pairs must be a sequence of str");
        if (!ps) {
            Py_DECREF(ts);
            return NULL;
        }
        if (PySequence_Fast_GET_SIZE(ps) != n) {
            Py_DECREF(ts);
            Py_DECREF(ps);
            PyErr_SetString(PyExc_ValueError, "texts and pairs differ in length");
            return NULL;
        }
    }
    size_t cap = (size_t)n + 1;
    const char **tx = calloc(cap, sizeof *tx), **px = ps ? calloc(cap, sizeof *px) : NULL;
    size_t *tl = calloc(cap, sizeof *tl), *pl = ps ? calloc(cap, sizeof *pl) : NULL;
    tm_encoding **enc = calloc(cap, sizeof *enc);
    PyObject *result = NULL;
    if (!tx || !tl || !enc || (ps && (!px || !pl))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        tx[i] = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(ts, i), &len);
        if (!tx[i]) goto done;
        tl[i] = (size_t)len;
        if (ps) {
            px[i] = PyUnicode_AsUTF8AndSize(PySequence_Fast_GET_ITEM(ps, i), &len);
            if (!px[i]) goto done;
            pl[i] = (size_t)len;
        }
    }
    tm_error err = {0};
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tm_tokenizer_encode_batch(o->tok, (size_t)n, tx, tl, px, pl, &opts, enc, &err);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) {
        raise_status(st, &err);
        goto done;
    }
    result = PyList_New(n);
    for (Py_ssize_t i = 0; result && i < n; i++) {
        PyObject *d = encoding_dict(enc[i]);
        if (!d) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, d);
    }
    for (Py_ssize_t i = 0; i < n; i++) tm_encoding_free(enc[i]);
done:
    free(tx);
    free(px);
    free(tl);
    free(pl);
    free(enc);
    Py_DECREF(ts);
    Py_XDECREF(ps);
    return result;
}

static PyObject *tokenizer_decode(TokenizerObject *o, PyObject *args) {
    PyObject *ids;
    int skip = 0, cleanup = -1;
    if (!PyArg_ParseTuple(args, "O|pi", &ids, &skip, &cleanup)) return NULL;
    if (!tokenizer_ready(o)) return NULL;
    PyObject *seq = PySequence_Fast(ids, "ids must be a sequence of int");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int32_t *v = malloc(((size_t)n + 1) * sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (x == -1 && PyErr_Occurred()) {
            free(v);
            Py_DECREF(seq);
            return NULL;
        }
        v[i] = (int32_t)x;
    }
    Py_DECREF(seq);
    char *out = NULL;
    size_t len = 0;
    tm_error err = {0};
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tm_tokenizer_decode(o->tok, v, (size_t)n, skip, cleanup, &out, &len, &err);
    Py_END_ALLOW_THREADS
    free(v);
    if (st != TM_OK) return raise_status(st, &err);
    PyObject *s = PyUnicode_DecodeUTF8(out, (Py_ssize_t)len, "replace");
    free(out);
    return s;
}

static PyObject *tokenizer_token_to_id(TokenizerObject *o, PyObject *args) {
    const char *s;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "s#", &s, &len)) return NULL;
    if (!tokenizer_ready(o)) return NULL;
    int32_t id = tm_tokenizer_token_to_id(o->tok, s, (size_t)len);
    if (id < 0) Py_RETURN_NONE;
    return PyLong_FromLong(id);
}

static PyObject *tokenizer_id_to_token(TokenizerObject *o, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    if (!tokenizer_ready(o)) return NULL;
    const char *s = tm_tokenizer_id_to_token(o->tok, id);
    if (!s) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *tokenizer_info(TokenizerObject *o, PyObject *u) {
    if (!tokenizer_ready(o)) return NULL;
    static const char *roles[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    PyObject *special = PyDict_New();
    for (int r = 0; special && r < 7; r++) {
        int32_t id = -1;
        const char *s = tm_tokenizer_special_token(o->tok, (tm_special_role)r, &id);
        if (!s) continue;
        PyObject *v = Py_BuildValue("(si)", s, (int)id);
        if (!v || PyDict_SetItemString(special, roles[r], v) < 0) Py_CLEAR(special);
        Py_XDECREF(v);
    }
    if (!special) return NULL;
    const char *cfg = tm_tokenizer_config_json(o->tok);
    const char *tpl = tm_tokenizer_chat_template(o->tok, NULL);
    return Py_BuildValue("{s:n,s:L,s:N,s:z,s:z}", "vocab_size",
                         (Py_ssize_t)tm_tokenizer_vocab_size(o->tok), "model_max_length",
                         (long long)tm_tokenizer_model_max_length(o->tok), "special", special,
                         "config_json", cfg, "chat_template", tpl);
}

static PyMethodDef tokenizer_methods[] = {
    {"encode", (PyCFunction)tokenizer_encode, METH_VARARGS, NULL},
    {"decode", (PyCFunction)tokenizer_decode, METH_VARARGS, NULL},
    {"token_to_id", (PyCFunction)tokenizer_token_to_id, METH_VARARGS, NULL},
    {"id_to_token", (PyCFunction)tokenizer_id_to_token, METH_VARARGS, NULL},
    {"info", (PyCFunction)tokenizer_info, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject TokenizerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.Tokenizer",
    .tp_basicsize = sizeof(TokenizerObject),
    .tp_dealloc = (destructor)tokenizer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A tokenizer.json tokenizer (tm_tokenizer): immutable, shareable.",
    .tp_methods = tokenizer_methods,
    .tp_init = (initproc)tokenizer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Pipeline ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    tm_pipeline *p;
    PyThread_type_lock lock;   /* a pipeline takes one call at a time */
} PipelineObject;

static PyTypeObject PipelineType;

static void pipeline_dealloc(PipelineObject *o) {
    tm_pipeline_free(o->p);
    if (o->lock) PyThread_free_lock(o->lock);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int pipeline_init(PipelineObject *o, PyObject *args, PyObject *kw) {
    const char *task, *repo, *load_json = NULL;
    if (!PyArg_ParseTuple(args, "ss|z", &task, &repo, &load_json)) return -1;
    if (o->p) {
        PyErr_SetString(PyExc_RuntimeError, "already made");
        return -1;
    }
    tm_error err = {0};
    tm_status st;
    tm_pipeline *p = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = tm_pipeline_create(task, repo, load_json, &p, &err);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) {
        raise_status(st, &err);
        return -1;
    }
    o->lock = PyThread_allocate_lock();
    if (!o->lock) {
        tm_pipeline_free(p);
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    return 0;
}

static PyObject *pipeline_call(PipelineObject *o, PyObject *args) {
    const char *inputs, *options = NULL;
    if (!PyArg_ParseTuple(args, "s|z", &inputs, &options)) return NULL;
    if (!o->p) {
        PyErr_SetString(PyExc_RuntimeError, "pipeline not made");
        return NULL;
    }
    char *out = NULL;
    tm_error err = {0};
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(o->lock, WAIT_LOCK);
    st = tm_pipeline_call(o->p, inputs, options, &out, &err);
    PyThread_release_lock(o->lock);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) return raise_status(st, &err);
    PyObject *s = PyUnicode_FromString(out);
    free(out);
    return s;
}

static PyObject *pipeline_info(PipelineObject *o, PyObject *u) {
    if (!o->p) {
        PyErr_SetString(PyExc_RuntimeError, "pipeline not made");
        return NULL;
    }
    return Py_BuildValue("(ss)", tm_pipeline_task(o->p), tm_pipeline_model_file(o->p));
}

static PyMethodDef pipeline_methods[] = {
    {"call", (PyCFunction)pipeline_call, METH_VARARGS, NULL},
    {"info", (PyCFunction)pipeline_info, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "transmuter._transmuter.Pipeline",
    .tp_basicsize = sizeof(PipelineObject),
    .tp_dealloc = (destructor)pipeline_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A task on a repository (tm_pipeline), JSON in and out.",
    .tp_methods = pipeline_methods,
    .tp_init = (initproc)pipeline_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Module ------------------------------------------------------------------------------------ */

static PyObject *mod_version(PyObject *self, PyObject *u) { return PyUnicode_FromString(tm_version()); }

static PyObject *mod_dtype_name(PyObject *self, PyObject *args) {
    int dt;
    if (!PyArg_ParseTuple(args, "i", &dt)) return NULL;
    return PyUnicode_FromString(tm_dtype_name((tm_dtype)dt));
}

static PyObject *mod_tasks(PyObject *self, PyObject *u) { return PyUnicode_FromString(tm_pipeline_tasks()); }

static PyMethodDef module_methods[] = {
    {"version", mod_version, METH_NOARGS, "tm_version()"},
    {"dtype_name", mod_dtype_name, METH_VARARGS, "tm_dtype_name()"},
    {"tasks", mod_tasks, METH_NOARGS, "tm_pipeline_tasks()"},
    {"_set_error_classes", set_error_classes, METH_VARARGS, NULL},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_transmuter",
    .m_doc = "The C layer of the transmuter package.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__transmuter(void) {
    PyTypeObject *types[] = {&TensorType, &ModelType, &GradPlanType, &OptimizerType, &TokenizerType,
                             &PipelineType};
    const char *names[] = {"Tensor", "Model", "GradPlan", "Optimizer", "Tokenizer", "Pipeline"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    PyModule_AddStringConstant(m, "HEADER_VERSION", TM_VERSION_STRING);
    return m;
}

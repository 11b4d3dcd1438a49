/* Open Inference Protocol v2 (KServe and Triton's REST API) routes of transmuter serve, on
 * the raw ONNX models given as MODEL.onnx: GET /v2 (server metadata), /v2/models/{name}
 * (inputs and outputs), /v2/models/{name}/ready, POST /v2/models/{name}/infer with JSON
 * tensors (data flat or nested, row-major) and the binary tensor data extension: with an
 * Inference-Header-Content-Length header the body is that much JSON, then the raw
 * little-endian bytes of each input whose parameters give binary_data_size, in order;
 * outputs asked as binary_data (or all with binary_data_output) come back the same way.
 * The health routes are the router's. Not done yet: BYTES and FP16 tensors, shared-memory
 * parameters, versions in the path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve.h"

#define ERR(status, ...) tm__serve_error(rs, SURFACE_OIP, status, __VA_ARGS__)

/* Elements per request tensor, at most (the body limit bounds it too). */
enum { MAX_ELEMENTS = 1 << 26 };

static const struct { const char *name; tm_dtype dtype; } types[] = {
    {"BOOL", TM_BOOL},   {"UINT8", TM_UINT8},   {"UINT16", TM_UINT16}, {"UINT32", TM_UINT32},
    {"UINT64", TM_UINT64}, {"INT8", TM_INT8},   {"INT16", TM_INT16},   {"INT32", TM_INT32},
    {"INT64", TM_INT64}, {"FP32", TM_FLOAT},    {"FP64", TM_DOUBLE},
};

static const char *type_name(tm_dtype dt) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (types[i].dtype == dt) return types[i].name;
    return NULL;
}

static tm_dtype type_of(const char *name) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(types[i].name, name)) return types[i].dtype;
    return TM_UNDEFINED;
}

static void put_desc(tm__buf *b, const tm_value_desc *d) {
    const char *t = type_name(d->dtype);
    tm__put(b, "{\"name\":");
    tm__put_string(b, d->name);
    tm__put(b, ",\"datatype\":");
    tm__put_string(b, t ? t : tm_dtype_name(d->dtype));
    tm__put(b, ",\"shape\":[");
    for (int k = 0; k < d->rank; k++) {
        if (k) tm__put(b, ",");
        tm__put_int(b, d->dims[k]);
    }
    tm__put(b, "]}");
}

static void metadata(serve_model *m, serve_response *rs) {
    tm__buf *b = &rs->body;
    tm__put(b, "{\"name\":");
    tm__put_string(b, m->name);
    tm__put(b, ",\"versions\":[\"1\"],\"platform\":\"onnx\",\"inputs\":[");
    for (int i = 0; i < tm_model_n_inputs(m->model); i++) {
        tm_value_desc d;
        if (tm_model_input(m->model, i, &d) != TM_OK) continue;
        if (i) tm__put(b, ",");
        put_desc(b, &d);
    }
    tm__put(b, "],\"outputs\":[");
    for (int i = 0; i < tm_model_n_outputs(m->model); i++) {
        tm_value_desc d;
        if (tm_model_output(m->model, i, &d) != TM_OK) continue;
        if (i) tm__put(b, ",");
        put_desc(b, &d);
    }
    tm__put(b, "]}");
    rs->status = 200;
    rs->content_type = "application/json";
}

/* Writes the leaves of a (nested) JSON array into t's data, in order; -1 on a leaf of the
 * wrong kind or a count that is not the tensor's. */
static int fill(const tm_json *v, tm_tensor *t, int64_t *at, int depth) {
    if (depth > 64) return -1;
    if (v->type == TM_JSON_ARRAY) {
        for (int i = 0; i < v->n; i++)
            if (fill(&v->items[i], t, at, depth + 1)) return -1;
        return 0;
    }
    if (*at >= tm_tensor_numel(t)) return -1;
    double x;
    if (v->type == TM_JSON_NUMBER) x = v->number;
    else if (v->type == TM_JSON_BOOL && tm_tensor_dtype(t) == TM_BOOL) x = v->number;
    else return -1;
    void *d = tm_tensor_data(t);
    int64_t i = (*at)++;
    switch (tm_tensor_dtype(t)) {
    case TM_FLOAT: ((float *)d)[i] = (float)x; return 0;
    case TM_DOUBLE: ((double *)d)[i] = x; return 0;
    case TM_BOOL: ((uint8_t *)d)[i] = x != 0; return 0;
    default: break;
    }
    /* integers: whole numbers in the type's range */
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0) || x != floor(x)) return -1;
    int64_t k = (int64_t)x;
    switch (tm_tensor_dtype(t)) {
    case TM_UINT8: if (k < 0 || k > 255) return -1; ((uint8_t *)d)[i] = (uint8_t)k; return 0;
    case TM_INT8: if (k < -128 || k > 127) return -1; ((int8_t *)d)[i] = (int8_t)k; return 0;
    case TM_UINT16: if (k < 0 || k > 65535) return -1; ((uint16_t *)d)[i] = (uint16_t)k; return 0;
    case TM_INT16: if (k < -32768 || k > 32767) return -1; ((int16_t *)d)[i] = (int16_t)k; return 0;
    case TM_UINT32: if (k < 0 || k > 4294967295LL) return -1; ((uint32_t *)d)[i] = (uint32_t)k; return 0;
    case TM_INT32: if (k < INT32_MIN || k > INT32_MAX) return -1; ((int32_t *)d)[i] = (int32_t)k; return 0;
    case TM_UINT64: if (k < 0) return -1; ((uint64_t *)d)[i] = (uint64_t)k; return 0;
    case TM_INT64: ((int64_t *)d)[i] = k; return 0;
    default: return -1;
    }
}

static void put_data(tm__buf *b, const tm_tensor *t) {
    const void *d = tm_tensor_data_const(t);
    int64_t n = tm_tensor_numel(t);
    tm__put(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i) tm__put(b, ",");
        switch (tm_tensor_dtype(t)) {
        case TM_FLOAT: tm__put_number(b, ((const float *)d)[i]); break;
        case TM_DOUBLE: tm__put_number(b, ((const double *)d)[i]); break;
        case TM_BOOL: tm__put(b, ((const uint8_t *)d)[i] ? "true" : "false"); break;
        case TM_UINT8: tm__put_int(b, ((const uint8_t *)d)[i]); break;
        case TM_INT8: tm__put_int(b, ((const int8_t *)d)[i]); break;
        case TM_UINT16: tm__put_int(b, ((const uint16_t *)d)[i]); break;
        case TM_INT16: tm__put_int(b, ((const int16_t *)d)[i]); break;
        case TM_UINT32: tm__put_int(b, ((const uint32_t *)d)[i]); break;
        case TM_INT32: tm__put_int(b, ((const int32_t *)d)[i]); break;
        case TM_UINT64: tm__put_number(b, (double)((const uint64_t *)d)[i]); break;
        case TM_INT64: tm__put_int(b, ((const int64_t *)d)[i]); break;
        default: tm__put(b, "null");
        }
    }
    tm__put(b, "]");
}

/* The body's binary part, read in order by the inputs that have binary data. */
typedef struct binary_cursor {
    const unsigned char *p;
    size_t n, at;
} binary_cursor;

/* parameters.KEY of v as a whole number >= 0 (1), absent (0), or wrong (-1). */
static int param_size(const tm_json *v, const char *key, size_t *out) {
    const tm_json *p = tm_json_get(v, "parameters"), *x = tm_json_get(p, key);
    if (p && p->type != TM_JSON_OBJECT) return -1;
    if (!x || x->type == TM_JSON_NULL) return 0;
    if (x->type != TM_JSON_NUMBER || !(x->number >= 0 && x->number <= 9e15) || x->number != floor(x->number)) return -1;
    *out = (size_t)x->number;
    return 1;
}

/* parameters.KEY of v as a boolean: 1 or 0 (dflt when absent), -1 when not a boolean. */
static int param_bool(const tm_json *v, const char *key, int dflt) {
    const tm_json *p = tm_json_get(v, "parameters"), *x = tm_json_get(p, key);
    if (p && p->type != TM_JSON_OBJECT) return -1;
    if (!x || x->type == TM_JSON_NULL) return dflt;
    if (x->type != TM_JSON_BOOL) return -1;
    return x->number != 0;
}

/* One request input as a tensor, or NULL with the error response made. */
static tm_tensor *read_input(serve_model *m, const tm_json *in, int index, const char **name, binary_cursor *bin,
                             serve_response *rs) {
    const tm_json *nm = tm_json_get(in, "name"), *shape = tm_json_get(in, "shape");
    const tm_json *dt = tm_json_get(in, "datatype"), *data = tm_json_get(in, "data");
    size_t bin_size = 0;
    int binary = param_size(in, "binary_data_size", &bin_size);
    if (binary < 0) {
        ERR(400, "inputs[%d]: 'parameters' must be an object, its binary_data_size a whole number of bytes", index);
        return NULL;
    }
    if (in->type != TM_JSON_OBJECT || !nm || nm->type != TM_JSON_STRING || !shape || shape->type != TM_JSON_ARRAY ||
        !dt || dt->type != TM_JSON_STRING || (!binary && (!data || data->type != TM_JSON_ARRAY))) {
        ERR(400, "inputs[%d] needs a string 'name', an array 'shape', a string 'datatype' and an array 'data' "
                 "(or parameters.binary_data_size)", index);
        return NULL;
    }
    if (binary && data) {
        ERR(400, "inputs[%d] has both 'data' and parameters.binary_data_size", index);
        return NULL;
    }
    int at = tm_model_input_index(m->model, nm->string);
    if (at < 0) {
        ERR(400, "the model '%s' has no input '%s'", m->name, nm->string);
        return NULL;
    }
    tm_value_desc d;
    tm_model_input(m->model, at, &d);
    tm_dtype type = type_of(dt->string);
    if (type == TM_UNDEFINED) {
        ERR(400, "inputs[%d]: datatype '%s' is not supported", index, dt->string);
        return NULL;
    }
    if (d.dtype != TM_UNDEFINED && d.dtype != type) {
        ERR(400, "input '%s' is %s, not %s", nm->string, type_name(d.dtype) ? type_name(d.dtype) : tm_dtype_name(d.dtype),
            dt->string);
        return NULL;
    }
    if (shape->n > 8) {
        ERR(400, "inputs[%d]: a shape of at most 8 dimensions", index);
        return NULL;
    }
    int64_t dims[8], numel = 1;
    for (int k = 0; k < shape->n; k++) {
        const tm_json *x = &shape->items[k];
        if (x->type != TM_JSON_NUMBER || !(x->number >= 0 && x->number <= MAX_ELEMENTS) ||
            x->number != floor(x->number)) {
            ERR(400, "inputs[%d]: the shape must hold non-negative integers", index);
            return NULL;
        }
        dims[k] = (int64_t)x->number;
        numel *= dims[k];
        if (numel > MAX_ELEMENTS) {
            ERR(413, "inputs[%d]: more than %d elements", index, MAX_ELEMENTS);
            return NULL;
        }
    }
    tm_tensor *t = tm_tensor_new(type, shape->n, dims);
    if (!t) {
        ERR(500, "out of memory");
        return NULL;
    }
    if (binary) {
        size_t want = tm_tensor_nbytes(t);
        if (bin_size != want) {
            tm_tensor_free(t);
            ERR(400, "inputs[%d]: binary_data_size is %zu bytes; %lld values of type %s are %zu", index, bin_size,
                (long long)numel, dt->string, want);
            return NULL;
        }
        if (bin->n - bin->at < want) {
            tm_tensor_free(t);
            ERR(400, "inputs[%d]: binary_data_size %zu goes past the end of the binary data (%zu bytes left)", index,
                want, bin->n - bin->at);
            return NULL;
        }
        if (want) memcpy(tm_tensor_data(t), bin->p + bin->at, want);   /* little-endian, as this host */
        bin->at += want;
        if (type == TM_BOOL)
            for (size_t k = 0; k < want; k++) ((uint8_t *)tm_tensor_data(t))[k] = ((uint8_t *)tm_tensor_data(t))[k] != 0;
        *name = nm->string;
        return t;
    }
    int64_t filled = 0;
    if (fill(data, t, &filled, 0) || filled != numel) {
        tm_tensor_free(t);
        ERR(400, "inputs[%d]: 'data' must hold %lld values of type %s", index, (long long)numel, dt->string);
        return NULL;
    }
    *name = nm->string;
    return t;
}

/* Inference-Header-Content-Length: how much of the body is JSON (the rest is binary
 * data); 0, or -1 with the error made. */
static int split_body(const serve_request *rq, size_t *json_len, binary_cursor *bin, serve_response *rs) {
    *json_len = rq->body_len;
    memset(bin, 0, sizeof *bin);
    const char *h = rq->inference_header_length;
    if (!h) return 0;
    char *end = NULL;
    unsigned long long v = (*h >= '0' && *h <= '9') ? strtoull(h, &end, 10) : 0;
    if (!end || *end || v == 0 || v > rq->body_len) {
        ERR(400, "Inference-Header-Content-Length must be a whole number from 1 to the body's %zu bytes, not '%.40s'",
            rq->body_len, h);
        return -1;
    }
    *json_len = (size_t)v;
    bin->p = (const unsigned char *)rq->body + v;
    bin->n = rq->body_len - (size_t)v;
    return 0;
}

static void infer(serve_server *s, serve_model *m, const serve_request *rq, serve_response *rs) {
    size_t json_len;
    binary_cursor bin;
    if (split_body(rq, &json_len, &bin, rs)) return;
    serve_request head = *rq;
    head.body_len = json_len;
    tm_json *body = tm__serve_parse_body(&head, rs, SURFACE_OIP);
    if (!body) return;
    tm__buf blob = {0};     /* binary outputs, after the JSON */
    int any_binary = 0;
    int n_out = tm_model_n_outputs(m->model);
    const tm_json *inputs = tm_json_get(body, "inputs"), *id = tm_json_get(body, "id");
    const tm_json *want = tm_json_get(body, "outputs");
    tm_tensor **in = NULL, **out = NULL;
    const char **names = NULL;
    int n_in = 0;
    if (!inputs || inputs->type != TM_JSON_ARRAY || inputs->n == 0) {
        ERR(400, "'inputs' must be a non-empty array");
        goto done;
    }
    if (inputs->n > tm_model_n_inputs(m->model)) {
        ERR(400, "the model '%s' takes %d inputs", m->name, tm_model_n_inputs(m->model));
        goto done;
    }
    if (id && id->type != TM_JSON_STRING) {
        ERR(400, "'id' must be a string");
        goto done;
    }
    if (want && want->type != TM_JSON_ARRAY) {
        ERR(400, "'outputs' must be an array");
        goto done;
    }
    int all_binary = param_bool(body, "binary_data_output", 0);
    if (all_binary < 0) {
        ERR(400, "'parameters' must be an object, its binary_data_output true or false");
        goto done;
    }
    for (int i = 0; want && i < want->n; i++) {
        const char *w = tm_json_get_string(&want->items[i], "name");
        if (!w || tm_model_output_index(m->model, w) < 0) {
            ERR(400, "outputs[%d]: no such output of the model '%s'", i, m->name);
            goto done;
        }
        if (param_bool(&want->items[i], "binary_data", 0) < 0) {
            ERR(400, "outputs[%d]: 'parameters' must be an object, its binary_data true or false", i);
            goto done;
        }
    }
    in = calloc((size_t)inputs->n, sizeof *in);
    names = calloc((size_t)inputs->n, sizeof *names);
    out = calloc((size_t)n_out + 1, sizeof *out);
    if (!in || !names || !out) {
        ERR(500, "out of memory");
        goto done;
    }
    for (n_in = 0; n_in < inputs->n; n_in++) {
        if (!(in[n_in] = read_input(m, &inputs->items[n_in], n_in, &names[n_in], &bin, rs))) goto done;
        for (int k = 0; k < n_in; k++)
            if (!strcmp(names[k], names[n_in])) {
                ERR(400, "input '%s' is given twice", names[k]);
                n_in++;
                goto done;
            }
    }
    if (bin.at != bin.n) {
        ERR(400, "the binary data holds %zu bytes; the inputs' binary_data_size add up to %zu", bin.n, bin.at);
        goto done;
    }
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_model_run(m->model, n_in, names, (const tm_tensor *const *)in, out, NULL, &err);
    if (st != TM_OK) {
        int code = st == TM_ERR_NO_MEMORY || st == TM_ERR_UNSUPPORTED ? 500 : 400;
        ERR(code, "%s", err.message[0] ? err.message : tm_status_name(st));
        goto done;
    }
    tm__buf *b = &rs->body;
    tm__put(b, "{\"model_name\":");
    tm__put_string(b, m->name);
    tm__put(b, ",\"model_version\":\"1\"");
    if (id) {
        tm__put(b, ",\"id\":");
        tm__put_string(b, id->string);
    }
    tm__put(b, ",\"outputs\":[");
    int any = 0;
    for (int i = 0; i < n_out; i++) {
        tm_value_desc d;
        tm_model_output(m->model, i, &d);
        int wanted = !want || want->n == 0, binary = all_binary;
        for (int k = 0; want && k < want->n && !wanted; k++)
            if (!strcmp(tm_json_get_string(&want->items[k], "name"), d.name)) {
                wanted = 1;
                binary = param_bool(&want->items[k], "binary_data", all_binary);
            }
        if (!wanted || !out[i]) continue;
        const char *t = type_name(tm_tensor_dtype(out[i]));
        if (any++) tm__put(b, ",");
        tm__put(b, "{\"name\":");
        tm__put_string(b, d.name);
        tm__put(b, ",\"datatype\":");
        tm__put_string(b, t ? t : tm_dtype_name(tm_tensor_dtype(out[i])));
        tm__put(b, ",\"shape\":[");
        for (int k = 0; k < tm_tensor_rank(out[i]); k++) {
            if (k) tm__put(b, ",");
            tm__put_int(b, tm_tensor_dims(out[i])[k]);
        }
        if (binary) {
            tm__put(b, "],\"parameters\":{\"binary_data_size\":");
            tm__put_int(b, (int64_t)tm_tensor_nbytes(out[i]));
            tm__put(b, "}}");
            tm__put_len(&blob, tm_tensor_data_const(out[i]), tm_tensor_nbytes(out[i]));
            any_binary = 1;
            continue;
        }
        tm__put(b, "],\"data\":");
        put_data(b, out[i]);
        tm__put(b, "}");
    }
    tm__put(b, "]}");
    rs->status = 200;
    rs->content_type = "application/json";
    if (any_binary) {
        rs->json_length = b->n;
        tm__put_len(b, blob.s, blob.n);
        if (blob.oom) b->oom = 1;
        rs->content_type = "application/octet-stream";
    }
done:
    free(blob.s);
    for (int i = 0; in && i < n_in; i++) tm_tensor_free(in[i]);
    for (int i = 0; out && i < n_out; i++) tm_tensor_free(out[i]);
    free(in);
    free(out);
    free(names);
    tm_json_free(body);
}

void tm__serve_oip(serve_server *s, const serve_request *rq, serve_response *rs, const char *path) {
    if (!strcmp(path, "/v2")) {
        rs->route = "/v2";
        tm__put(&rs->body, "{\"name\":\"transmuter\",\"version\":\"" TM_VERSION_STRING "\",\"extensions\":[\"binary_tensor_data\"]}");
        rs->status = 200;
        rs->content_type = "application/json";
        return;
    }
    if (strncmp(path, "/v2/models/", 11)) {
        ERR(404, "no route %s %s", rq->method, path);
        return;
    }
    char name[128];
    const char *rest = path + 11, *slash = strchr(rest, '/');
    size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
    if (len == 0 || len >= sizeof name) {
        ERR(404, "no such model");
        return;
    }
    memcpy(name, rest, len);
    name[len] = 0;
    const char *op = slash ? slash : "";
    rs->route = !strcmp(op, "/infer") ? "/v2/models/infer" : "/v2/models";
    serve_model *m = tm__serve_find_model(s, name, SERVE_TENSORS);
    if (!m) {
        ERR(404, "no model '%s' that takes tensors (give its .onnx file to transmuter serve)", name);
        return;
    }
    if (!strcmp(op, "") || !strcmp(op, "/ready")) {
        if (strcmp(rq->method, "GET")) {
            ERR(405, "%s takes GET", path);
            return;
        }
        if (*op) {
            tm__put(&rs->body, "{\"name\":");
            tm__put_string(&rs->body, m->name);
            tm__put(&rs->body, ",\"ready\":true}");
            rs->status = 200;
            rs->content_type = "application/json";
        } else {
            metadata(m, rs);
        }
    } else if (!strcmp(op, "/infer")) {
        infer(s, m, rq, rs);
    } else {
        ERR(404, "no route %s %s", rq->method, path);
    }
}

#undef ERR

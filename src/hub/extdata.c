/* Finds the external-data files an ONNX model names, without loading it: walks the
 * protobuf (pb.h) to every TensorProto with data_location EXTERNAL and collects its
 * "location". Not a validator of the tensors: the loader checks offsets and sizes later. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"
#include "../onnx/pb.h"

enum { MAX_DEPTH = 32, MAX_LOCATIONS = 4096 };

typedef struct scan {
    char **list;                  /* NULL-terminated */
    int n;
    int failed;                   /* malformed protobuf or out of memory */
} scan;

static void walk_graph(scan *s, const tm_pb_reader *r, int depth);
static void walk_node(scan *s, const tm_pb_reader *r, int depth);

static int same(const tm_pb_field *f, const char *s) {
    return f->len == strlen(s) && !memcmp(f->data, s, f->len);
}

static void add_location(scan *s, const uint8_t *p, size_t n) {
    for (int i = 0; i < s->n; i++)
        if (strlen(s->list[i]) == n && !memcmp(s->list[i], p, n)) return;
    char **list = s->n < MAX_LOCATIONS ? realloc(s->list, (size_t)(s->n + 2) * sizeof *list) : NULL;
    char *copy = list ? malloc(n + 1) : NULL;
    if (list) s->list = list;
    if (!copy) {
        s->failed = 1;
        return;
    }
    memcpy(copy, p, n);
    copy[n] = '\0';
    s->list[s->n++] = copy;
    s->list[s->n] = NULL;
}

/* A StringStringEntryProto: key 1, value 2. */
static void entry(const tm_pb_reader *r, const tm_pb_field *f, tm_pb_field *key,
                  tm_pb_field *value) {
    tm_pb_reader sub;
    tm_pb_field e;
    tm_pb_sub(r, f, &sub);
    memset(key, 0, sizeof *key);
    memset(value, 0, sizeof *value);
    while (tm_pb_next(&sub, &e) == 1) {
        if (e.wire != TM_PB_LEN) continue;
        if (e.number == 1) *key = e;
        if (e.number == 2) *value = e;
    }
}

/* TensorProto: external_data 13, data_location 14 (1 = EXTERNAL). */
static void walk_tensor(scan *s, const tm_pb_reader *r0) {
    tm_pb_reader r = *r0;
    tm_pb_field f, key, value, location = {0};
    int external = 0, found = 0, rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number == 14 && f.wire == TM_PB_VARINT) external = f.value == 1;
        if (f.number != 13 || f.wire != TM_PB_LEN) continue;
        entry(&r, &f, &key, &value);
        if (key.data && same(&key, "location")) {
            location = value;
            found = 1;
        }
    }
    if (rc < 0) s->failed = 1;
    if (external && found && location.data && location.len) add_location(s, location.data, location.len);
}

/* Calls fn on the payload of every LEN field numbered `number`. */
static void each(scan *s, const tm_pb_reader *r0, uint32_t number, int depth,
                 void (*fn)(scan *, const tm_pb_reader *, int)) {
    tm_pb_reader r = *r0, sub;
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != number || f.wire != TM_PB_LEN) continue;
        tm_pb_sub(&r, &f, &sub);
        fn(s, &sub, depth);
    }
    if (rc < 0) s->failed = 1;
}

static void tensor_fn(scan *s, const tm_pb_reader *r, int depth) { walk_tensor(s, r); }

/* SparseTensorProto: values 1, indices 2. */
static void sparse_fn(scan *s, const tm_pb_reader *r, int depth) {
    each(s, r, 1, depth, tensor_fn);
    each(s, r, 2, depth, tensor_fn);
}

/* AttributeProto: t 5, g 6, tensors 10, graphs 11, sparse_tensor 22, sparse_tensors 23. */
static void attribute_fn(scan *s, const tm_pb_reader *r, int depth) {
    each(s, r, 5, depth, tensor_fn);
    each(s, r, 10, depth, tensor_fn);
    each(s, r, 22, depth, sparse_fn);
    each(s, r, 23, depth, sparse_fn);
    each(s, r, 6, depth + 1, walk_graph);
    each(s, r, 11, depth + 1, walk_graph);
}

/* NodeProto: attribute 5. */
static void walk_node(scan *s, const tm_pb_reader *r, int depth) { each(s, r, 5, depth, attribute_fn); }

/* GraphProto: node 1, initializer 5, sparse_initializer 15. */
static void walk_graph(scan *s, const tm_pb_reader *r, int depth) {
    if (depth > MAX_DEPTH) {
        s->failed = 1;
        return;
    }
    each(s, r, 5, depth, tensor_fn);
    each(s, r, 15, depth, sparse_fn);
    each(s, r, 1, depth, walk_node);
}

/* FunctionProto: node 7, attribute_proto 11 (attribute defaults). */
static void walk_function(scan *s, const tm_pb_reader *r, int depth) {
    each(s, r, 7, depth, walk_node);
    each(s, r, 11, depth, attribute_fn);
}

void tm_hub_strings_free(char **list) {
    for (int i = 0; list && list[i]; i++) free(list[i]);
    free(list);
}

tm_status tm_hub_external_locations(const char *model_path, char ***out, tm_error *err) {
    int fd = open(model_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = fd < 0 ? errno : EINVAL;
        if (fd >= 0) close(fd);
        return tm__fail(err, TM_ERR_IO, "cannot read the model '%s': %s", model_path, strerror(e));
    }
    void *base = st.st_size ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (base == MAP_FAILED)
        return tm__fail(err, TM_ERR_IO, "cannot map the model '%s': %s", model_path, strerror(errno));
    scan s = {.list = calloc(1, sizeof(char *))};
    if (!s.list) s.failed = 1;
    tm_pb_reader model;
    tm_pb_init(&model, base, (size_t)st.st_size);
    if (!s.failed) {
        each(&s, &model, 7, 0, walk_graph);
        each(&s, &model, 25, 0, walk_function);
    }
    if (base) munmap(base, (size_t)st.st_size);
    if (s.failed) {
        tm_hub_strings_free(s.list);
        return tm__fail(err, TM_ERR_PARSE, "'%s' is not a readable ONNX model (looking for its "
                        "external data files)", model_path);
    }
    *out = s.list;
    return TM_OK;
}

/* A small JSON reader for the Hub's API answers (file trees) and tokenizer files: parses a
 * whole document into a tree of values. Not a writer, not streaming; numbers are doubles
 * (exact to 2^53). */
#ifndef TM_HUB_JSON_H
#define TM_HUB_JSON_H

#include <stddef.h>

typedef enum {
    TM_JSON_NULL, TM_JSON_BOOL, TM_JSON_NUMBER, TM_JSON_STRING, TM_JSON_ARRAY, TM_JSON_OBJECT
} tm_json_type;

typedef struct tm_json {
    tm_json_type type;
    double number;                /* NUMBER; BOOL as 0 or 1 */
    char *string;                 /* STRING, NUL-terminated (embedded NULs: see flags) */
    size_t len;                   /* STRING: its length in bytes */
    struct tm_json *items;        /* ARRAY elements or OBJECT values */
    char **keys;                  /* OBJECT keys, parallel to items */
    int n;
    int cap;                      /* private: room in items/keys while parsing */
} tm_json;

/* The parsed document, or NULL when the text is not valid JSON (or nests too deep).
 * "\u0000" is refused in strings and keys. */
tm_json *tm_json_parse(const char *text, size_t len);

enum {
    TM_JSON_ALLOW_NUL = 1         /* accept "\u0000" in string values (use .len) */
};
/* As tm_json_parse with TM_JSON_* flags. */
tm_json *tm_json_parse_ex(const char *text, size_t len, int flags);
void tm_json_free(tm_json *v);
/* The JSON document in the file at path, or NULL when it cannot be read or is not valid
 * JSON (callers name the file in their error). */
tm_json *tm_json_read_file(const char *path);
/* The value of key in an object, or NULL (also when v is not an object). */
const tm_json *tm_json_get(const tm_json *v, const char *key);
/* The string value of key, or NULL when absent or not a string. */
const char *tm_json_get_string(const tm_json *v, const char *key);

#endif

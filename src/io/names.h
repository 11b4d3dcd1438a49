/* File names for value names: a value's name percent-encoded so that any ONNX name (with
 * '/', ':', spaces, UTF-8 ...) becomes one portable file name, as tools/ort-run.mjs does.
 * Not URL encoding: only [A-Za-z0-9._-] pass through, everything else becomes %XX. */
#ifndef TM_IO_NAMES_H
#define TM_IO_NAMES_H

/* Every byte outside [A-Za-z0-9._-] written as %XX (uppercase hex). malloc'd; NULL when
 * name is NULL or memory runs out. Note that "." and ".." pass through unchanged. */
char *tm_name_encode(const char *name);
/* The inverse: %XX (either case) becomes the byte; a '%' not followed by two hex digits,
 * and %00 (which no name can hold), stay as they are. malloc'd; NULL as above. */
char *tm_name_decode(const char *s);

#endif

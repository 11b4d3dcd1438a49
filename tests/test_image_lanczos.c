/* Tests of tm__image_resize with TM__RESAMPLE_LANCZOS against transformers.js's
 * RawImage.resize(w, h, {resample: 1}) in node (sharp's lanczos3 resize): the sha256 of every
 * output in tests/data/lanczos/refs.txt (tests/gen/lanczos_refs.mjs), media images and
 * synthetic ones. A processor with resample 1 is checked end to end by tests/vision.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/hub/sha256.h"
#include "../src/media/image.h"
#include "check.h"

#define DATA "tests/data/lanczos"
#define MEDIA "tests/data/pipelines/media"

/* The synthetic image of lanczos_refs.mjs. */
static tm__image synth(int64_t w, int64_t h, int c) {
    tm__image im = {w, h, c, malloc((size_t)(w * h * c))};
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int z = 0; z < c; z++)
                im.px[(y * w + x) * c + z] = (uint8_t)((x * 29 + y * 53 + z * 71 + ((x * y * 7 + z) % 13) * 17) % 256);
    return im;
}

int main(void) {
    FILE *f = fopen(DATA "/refs.txt", "r");
    CHECK(f != NULL, "cannot open %s/refs.txt", DATA);
    if (!f) return 1;
    char name[256], want[65], got[65], loaded[256] = "";
    long long iw, ih, ic, ow, oh;
    int line = 0, exact = 0;
    tm__image in = {0};
    while (fscanf(f, "%255s %lld %lld %lld %lld %lld %64s", name, &iw, &ih, &ic, &ow, &oh, want) == 7) {
        line++;
        if (!strcmp(name, "synth")) {
            tm__image_clear(&in);
            in = synth(iw, ih, (int)ic);
            loaded[0] = 0;
        } else if (strcmp(name, loaded)) {
            char path[512];
            tm_error err;
            tm__image_clear(&in);
            snprintf(path, sizeof path, MEDIA "/%s", name);
            CHECK(tm__image_load(path, &in, &err) == TM_OK, "%s: %s", path, err.message);
            snprintf(loaded, sizeof loaded, "%s", name);
        }
        if (in.w != iw || in.h != ih || in.channels != ic) {
            CHECK(0, "line %d: %s is %lld x %lld x %d, want %lld x %lld x %lld", line, name, (long long)in.w,
                  (long long)in.h, in.channels, iw, ih, ic);
            continue;
        }
        tm__image out;
        tm_error err;
        if (tm__image_resize(&in, ow, oh, TM__RESAMPLE_LANCZOS, &out, &err) != TM_OK) {
            CHECK(0, "line %d: resize: %s", line, err.message);
            continue;
        }
        tm_sha256 s;
        uint8_t digest[32];
        tm_sha256_init(&s);
        tm_sha256_update(&s, out.px, (size_t)(ow * oh * ic));
        tm_sha256_final(&s, digest);
        tm_sha256_hex(digest, got);
        exact += !strcmp(got, want);
        CHECK(!strcmp(got, want), "line %d: %s %lldx%lldx%lld -> %lldx%lld differs from sharp", line, name, iw, ih,
              ic, ow, oh);
        tm__image_clear(&out);
    }
    fclose(f);
    tm__image_clear(&in);
    CHECK(line > 100, "only %d references read", line);
    printf("%d of %d resizes equal to sharp's\n", exact, line);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

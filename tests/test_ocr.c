/* Tests of the OCR API (include/transmuter.h, "OCR"): arguments and options refused with a
 * status and a message, missing files named, nothing changed on error, *_free(NULL); and,
 * when the models are there ($TM_OCR_MODELS or models/ocr, see tools/get-ocr-models.sh),
 * tm_ocr_run_pixels on pixels drawn here (gray, RGB, RGBA with a transparent page) and one
 * handle shared by two threads reading the shipped page at once. Reading quality is
 * tests/ocr.sh's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../include/transmuter.h"
#include "../src/media/image.h"
#include "check.h"

static const char *models_dir(void) {
    const char *env = getenv("TM_OCR_MODELS");
    return env && *env ? env : "models/ocr";
}

static int have_models(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", models_dir(), TM_OCR_RECOGNITION_FILE);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static void test_arguments(void) {
    tm_error err;
    tm_ocr *ocr = (tm_ocr *)0x1;
    CHECK(tm_ocr_create("/nonexistent-folder", NULL, &ocr, &err) == TM_ERR_NOT_FOUND &&
              strstr(err.message, "/nonexistent-folder/" TM_OCR_DETECTION_FILE),
          "missing folder: %s", err.message);
    CHECK(ocr == (tm_ocr *)0x1, "out untouched on error");
    CHECK(tm_ocr_create(NULL, NULL, &ocr, &err) == TM_ERR_INVALID_ARGUMENT, "no folder and no paths");
    CHECK(tm_ocr_create("x", NULL, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "NULL out");
    tm_ocr_options o;
    tm_ocr_options_default(&o);
    CHECK(o.size == sizeof o && o.use_classifier == 1 && o.det_threshold > 0.029f && o.det_threshold < 0.031f &&
              o.box_threshold > 0.59f && o.unclip_ratio > 1.49f && o.text_threshold > 0.49f && o.max_side == 2048,
          "defaults");
    o.det_threshold = 1.5f;
    CHECK(tm_ocr_create(models_dir(), &o, &ocr, &err) == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "det_threshold"),
          "threshold out of range: %s", err.message);
    tm_ocr_options_default(&o);
    o.max_side = 16;
    CHECK(tm_ocr_create(models_dir(), &o, &ocr, &err) == TM_ERR_INVALID_ARGUMENT, "max_side too small");
    /* a path in the options wins over the folder's file */
    tm_ocr_options_default(&o);
    o.dictionary = "/nonexistent-keys.txt";
    if (have_models())
        CHECK(tm_ocr_create(models_dir(), &o, &ocr, &err) == TM_ERR_NOT_FOUND &&
                  strstr(err.message, "/nonexistent-keys.txt"),
              "dictionary path: %s", err.message);
    tm_ocr_free(NULL);
    tm_ocr_result_free(NULL);
    CHECK(tm_ocr_result_count(NULL) == 0 && tm_ocr_result_line(NULL, 0) == NULL, "NULL result");
}

/* The shipped page as gray pixels, decoded by the library's own PNG reader (a private
 * function: tests may reach internals), to be fed to tm_ocr_run_pixels in other layouts. */
typedef struct page {
    int64_t w, h;
    uint8_t *gray;
} page;

static char *joined(const tm_ocr_result *r) {
    size_t n = 1;
    for (size_t i = 0; i < tm_ocr_result_count(r); i++) n += strlen(tm_ocr_result_line(r, i)->text) + 1;
    char *s = malloc(n);
    s[0] = 0;
    for (size_t i = 0; i < tm_ocr_result_count(r); i++) {
        strcat(s, tm_ocr_result_line(r, i)->text);
        strcat(s, "\n");
    }
    return s;
}

static int load_page(page *p) {
    tm__image im;
    tm_error err;
    if (tm__image_load("tests/data/ocr/page.png", &im, &err) != TM_OK || im.channels != 1) return 0;
    p->w = im.w, p->h = im.h, p->gray = im.px;
    return 1;
}

typedef struct job {
    const tm_ocr *ocr;
    char *text;
    tm_status status;
} job;

static void *read_page(void *arg) {
    job *j = arg;
    tm_ocr_result *r;
    tm_error err;
    j->status = tm_ocr_run(j->ocr, "tests/data/ocr/page.png", &r, &err);
    if (j->status == TM_OK) {
        j->text = joined(r);
        tm_ocr_result_free(r);
    }
    return NULL;
}

static void test_with_models(void) {
    tm_ocr_options o;
    tm_ocr_options_default(&o);
    o.threads = 1;
    tm_ocr *ocr;
    tm_error err;
    if (tm_ocr_create(models_dir(), &o, &ocr, &err) != TM_OK) {
        CHECK(0, "tm_ocr_create: %s", err.message);
        return;
    }
    tm_ocr_result *r;
    CHECK(tm_ocr_run(ocr, "tests/data/ocr/page.png", &r, &err) == TM_OK, "run: %s", err.message);
    char *want = joined(r);
    CHECK(strstr(want, "Transmuter reads text\n") == want, "first line: %s", want);
    CHECK(tm_ocr_result_line(r, tm_ocr_result_count(r)) == NULL, "line past the end");
    tm_ocr_result_free(r);

    page p;
    if (!load_page(&p)) {
        CHECK(0, "tests/data/ocr/page.png does not decode to gray pixels");
        free(want);
        tm_ocr_free(ocr);
        return;
    }
    /* the same pixels as gray, RGB, and RGBA over a transparent page: the same text */
    uint8_t *rgb = malloc((size_t)(p.w * p.h * 3)), *rgba = malloc((size_t)(p.w * p.h * 4));
    for (int64_t i = 0; i < p.w * p.h; i++) {
        memset(rgb + 3 * i, p.gray[i], 3);
        /* ink as opaque black with the page's coverage, paper fully transparent */
        memset(rgba + 4 * i, 0, 3);
        rgba[4 * i + 3] = (uint8_t)(255 - p.gray[i]);
    }
    const uint8_t *layouts[3] = {p.gray, rgb, rgba};
    const int channels[3] = {1, 3, 4};
    for (int k = 0; k < 3; k++) {
        tm_ocr_result *q;
        if (tm_ocr_run_pixels(ocr, layouts[k], p.w, p.h, channels[k], &q, &err) != TM_OK) {
            CHECK(0, "run_pixels (%d channels): %s", channels[k], err.message);
            continue;
        }
        char *got = joined(q);
        CHECK(!strcmp(got, want), "%d channels read %s", channels[k], got);
        free(got);
        tm_ocr_result_free(q);
    }
    tm_ocr_result *untouched = (tm_ocr_result *)0x1;
    CHECK(tm_ocr_run_pixels(ocr, rgb, p.w, p.h, 5, &untouched, &err) == TM_ERR_INVALID_ARGUMENT &&
              untouched == (tm_ocr_result *)0x1,
          "5 channels refused");
    CHECK(tm_ocr_run_pixels(ocr, rgb, 0, p.h, 3, &untouched, &err) == TM_ERR_INVALID_ARGUMENT, "width 0 refused");
    CHECK(tm_ocr_run_pixels(ocr, NULL, p.w, p.h, 3, &untouched, &err) == TM_ERR_INVALID_ARGUMENT, "NULL pixels");
    CHECK(tm_ocr_run(ocr, "/nonexistent.png", &untouched, &err) == TM_ERR_IO && strstr(err.message, "/nonexistent.png"),
          "missing image: %s", err.message);
    free(rgb);
    free(rgba);
    free(p.gray);

    /* one handle, two threads at once: each reads the page as a single thread did */
    job jobs[2] = {{ocr, NULL, TM_OK}, {ocr, NULL, TM_OK}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, read_page, &jobs[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK(jobs[k].status == TM_OK && jobs[k].text && !strcmp(jobs[k].text, want), "thread %d read %s", k,
              jobs[k].text ? jobs[k].text : "nothing");
        free(jobs[k].text);
    }
    free(want);
    tm_ocr_free(ocr);
}

int main(void) {
    test_arguments();
    int skipped = 0;
    if (have_models()) test_with_models();
    else {
        printf("skipped: the OCR models are not in %s (sh tools/get-ocr-models.sh)\n", models_dir());
        skipped = 1;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

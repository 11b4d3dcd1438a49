/* The download progress bar: drawn with '\r' on one line of stderr, sized to the terminal.
 * Not shown when stderr is not a terminal (logs stay clean) or when asked to be quiet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"
#include "progress.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

int tm_progress_wanted(void) {
    return isatty(STDERR_FILENO) && !env_true("HF_HUB_DISABLE_PROGRESS_BARS");
}

static int terminal_width(void) {
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 80;
}

/* 1536 -> "1.5K": three significant digits, binary steps as du -h does. */
void tm_hub_human_bytes(char *buf, size_t cap, double v) {
    static const char units[] = "BKMGTP";
    int u = 0;
    while (v >= 1000 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%.0fB", v);
    else snprintf(buf, cap, v < 10 ? "%.2f%c" : v < 100 ? "%.1f%c" : "%.0f%c", v, units[u]);
}

static void clock_text(char *buf, size_t cap, double seconds) {
    if (seconds < 0 || seconds > 359999) {
        snprintf(buf, cap, "--:--");
        return;
    }
    int s = (int)(seconds + 0.5) % 360000;
    if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, cap, "%02d:%02d", s / 60, s % 60);
}

static void draw(tm_progress *p, int final) {
    double elapsed = now_seconds() - p->t0;
    double rate = elapsed > 0 ? (double)(p->done - p->start_done) / elapsed : 0;
    char done[16], total[16], speed[16], when[32], tail[128];
    tm_hub_human_bytes(done, sizeof done, (double)p->done);
    tm_hub_human_bytes(total, sizeof total, (double)(p->total >= 0 ? p->total : p->done));
    tm_hub_human_bytes(speed, sizeof speed, rate);
    if (final) clock_text(when, sizeof when, elapsed);
    else clock_text(when, sizeof when, rate > 0 && p->total >= 0
                                           ? (double)(p->total - p->done) / rate : -1);
    snprintf(tail, sizeof tail, " %s/%s %s/s %s %s", done, total, speed,
             final ? "in" : "ETA", when);
    int width = terminal_width() - 1;
    int bar = width - (int)strlen(p->name) - (int)strlen(tail) - 8;
    if (bar > 40) bar = 40;
    char cells[48] = "";
    double frac = p->total > 0 ? (double)p->done / (double)p->total : final ? 1 : 0;
    if (frac > 1) frac = 1;
    if (bar >= 5) {
        int full = (int)(frac * bar);
        for (int i = 0; i < bar; i++) cells[i] = i < full ? '#' : '.';
        cells[bar] = '\0';
    }
    fprintf(stderr, "\r%s %3d%% %s%s%s%s\033[K%s", p->name, (int)(frac * 100),
            bar >= 5 ? "|" : "", cells, bar >= 5 ? "|" : "", tail, final ? "\n" : "");
    fflush(stderr);
    p->last_draw = now_seconds();
}

void tm_progress_start(tm_progress *p, int enabled, const char *name, int64_t total,
                       int64_t done) {
    memset(p, 0, sizeof *p);
    p->enabled = enabled;
    size_t n = strlen(name);
    /* The end of a long path is the part that tells files apart. */
    if (n >= sizeof p->name) snprintf(p->name, sizeof p->name, "...%s", name + n - (sizeof p->name - 4));
    else snprintf(p->name, sizeof p->name, "%s", name);
    p->total = total;
    p->done = p->start_done = done;
    p->t0 = now_seconds();
    if (enabled) draw(p, 0);
}

void tm_progress_update(tm_progress *p, int64_t done) {
    p->done = done;
    if (p->enabled && now_seconds() - p->last_draw >= 0.1) draw(p, 0);
}

void tm_progress_finish(tm_progress *p) {
    if (p->enabled) draw(p, 1);
    p->enabled = 0;
}

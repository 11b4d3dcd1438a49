/* A one-line download progress bar on stderr (bytes, rate, ETA), redrawn at most ten
 * times a second. Not a logger: when disabled every call does nothing. */
#ifndef TM_HUB_PROGRESS_H
#define TM_HUB_PROGRESS_H

#include <stdint.h>

typedef struct tm_progress {
    int enabled;
    char name[48];                /* shown left of the bar, shortened from the left */
    int64_t total;                /* -1 when unknown */
    int64_t done;
    int64_t start_done;           /* bytes already there when this run began (a resume) */
    double t0, last_draw;
} tm_progress;

/* Whether bars should be drawn: stderr is a terminal and HF_HUB_DISABLE_PROGRESS_BARS is
 * not set to a true value. */
int tm_progress_wanted(void);
void tm_progress_start(tm_progress *p, int enabled, const char *name, int64_t total,
                       int64_t done);
void tm_progress_update(tm_progress *p, int64_t done);
/* Draws the final state and ends the line. */
void tm_progress_finish(tm_progress *p);

#endif

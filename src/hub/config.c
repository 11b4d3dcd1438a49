/* The hub's settings from the environment, with huggingface_hub's names and defaults
 * (constants.py): HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN and the token file,
 * HF_HUB_OFFLINE, timeouts. Not cached between calls: each resolve reads them afresh. */
#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "internal.h"
#include "progress.h"

static int env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

static long env_seconds(const char *name, long fallback) {
    const char *v = env_nonempty(name);
    if (!v) return fallback;
    char *end;
    long s = strtol(v, &end, 10);
    return *end == '\0' && s >= 0 ? s : fallback;
}

static const char *home_dir(void) {
    const char *h = env_nonempty("HOME");
    if (h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "/";
}

/* Python's os.path.expanduser for the "~" and "~/..." forms. */
static char *expand_user(const char *p) {
    if (p[0] == '~' && (p[1] == '\0' || p[1] == '/')) return tm_hub_strf("%s%s", home_dir(), p + 1);
    return tm_hub_strf("%s", p);
}

static char *hf_home(void) {
    const char *h = env_nonempty("HF_HOME");
    if (h) return expand_user(h);
    const char *xdg = env_nonempty("XDG_CACHE_HOME");
    if (xdg) return tm_hub_strf("%s/huggingface", xdg);
    return tm_hub_strf("%s/.cache/huggingface", home_dir());
}

/* Leading and trailing whitespace off, in place (token files end with a newline). */
static char *trim(char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static char *read_token_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *t = trim(buf);
    return t[0] ? tm_hub_strf("%s", t) : NULL;
}

/* HF_TOKEN, then the legacy HUGGING_FACE_HUB_TOKEN, then the file `huggingface-cli login`
 * writes (HF_TOKEN_PATH, default $HF_HOME/token). */
static char *find_token(const char *home) {
    if (env_true("HF_HUB_DISABLE_IMPLICIT_TOKEN")) return NULL;
    const char *names[] = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"};
    for (int i = 0; i < 2; i++) {
        const char *v = env_nonempty(names[i]);
        if (!v) continue;
        char *copy = tm_hub_strf("%s", v);
        if (!copy) return NULL;
        char *t = trim(copy);
        if (t[0]) {
            memmove(copy, t, strlen(t) + 1);
            return copy;
        }
        free(copy);
    }
    const char *path = env_nonempty("HF_TOKEN_PATH");
    if (path) {
        char *expanded = expand_user(path);
        char *t = expanded ? read_token_file(expanded) : NULL;
        free(expanded);
        return t;
    }
    char *file = tm_hub_strf("%s/token", home);
    char *t = file ? read_token_file(file) : NULL;
    free(file);
    return t;
}

tm_status tm_hub_config_load(tm_hub_config *c, tm_error *err) {
    memset(c, 0, sizeof *c);
    char *home = hf_home();
    const char *cache = env_nonempty("HF_HUB_CACHE");
    if (!cache) cache = env_nonempty("HUGGINGFACE_HUB_CACHE");
    c->cache_dir = cache ? expand_user(cache) : home ? tm_hub_strf("%s/hub", home) : NULL;
    const char *endpoint = env_nonempty("HF_ENDPOINT");
    c->endpoint = tm_hub_strf("%s", endpoint ? endpoint : "https://huggingface.co");
    if (c->endpoint)
        for (size_t n = strlen(c->endpoint); n && c->endpoint[n - 1] == '/'; n--)
            c->endpoint[n - 1] = '\0';
    c->token = home ? find_token(home) : NULL;
    free(home);
    if (!c->cache_dir || !c->endpoint) {
        tm_hub_config_free(c);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading the hub settings");
    }
    c->offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
    c->progress = tm_progress_wanted();
    c->etag_timeout = env_seconds("HF_HUB_ETAG_TIMEOUT", 10);
    c->download_timeout = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10);
    c->ref_ttl = env_seconds("TM_HUB_REF_TTL", 600);
    return TM_OK;
}

void tm_hub_config_free(tm_hub_config *c) {
    free(c->endpoint);
    free(c->cache_dir);
    if (c->token) {
        /* Tokens are secrets: do not leave them in freed memory. */
        volatile char *t = c->token;
        for (size_t i = 0; t[i]; i++) t[i] = 0;
        free(c->token);
    }
    memset(c, 0, sizeof *c);
}

/* Tests of the hub's SHA-256 (src/hub/sha256.c): the FIPS 180-2 / NIST CAVS example
 * messages, the padding boundaries around 55/56/64 bytes, and that any split of the input
 * into update() calls gives the same digest. Not the download checks (tests/hub.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/hub/sha256.h"

static int n_passed, n_failed;

static void check_digest(const char *name, const void *data, size_t n, const char *want) {
    tm_sha256 s;
    uint8_t d[32];
    char hex[65];
    tm_sha256_init(&s);
    tm_sha256_update(&s, data, n);
    tm_sha256_final(&s, d);
    tm_sha256_hex(d, hex);
    if (!strcmp(hex, want)) {
        n_passed++;
        return;
    }
    n_failed++;
    printf("FAIL %s: got %s, want %s\n", name, hex, want);
}

static void nist_vectors(void) {
    check_digest("empty", "", 0,
                 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_digest("abc", "abc", 3,
                 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_digest("448-bit", two_blocks, strlen(two_blocks),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *long_msg = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                           "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check_digest("896-bit", long_msg, strlen(long_msg),
                 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    const unsigned char d3[] = {0xd3}, b11af[] = {0x11, 0xaf};
    check_digest("shavs len 8", d3, 1,
                 "28969cdfa74a12c82f3bad960b0b000aca2ac329deea5c2328ebc6f2ba9802c1");
    check_digest("shavs len 16", b11af, 2,
                 "5ca7133fa735326081558ac312c620eeca9970d1e70a4b95533d956f072d1f98");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    check_digest("million a", million, 1000000,
                 "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}

/* Lengths where the 0x80 byte and the 8-byte length do or do not fit the last block
 * (digests from Python's hashlib over bytes (i * 7 + 3) & 255). */
static void padding_boundaries(void) {
    static const struct { size_t n; const char *want; } cases[] = {
        {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
        {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
        {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
        {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
        {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
        {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
        {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
    };
    unsigned char buf[128];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)((i * 7 + 3) & 255);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "length %zu", cases[k].n);
        check_digest(name, buf, cases[k].n, cases[k].want);
    }
}

/* A download feeds the hash in pieces of any size: every split must agree. */
static void splits_agree(void) {
    enum { N = 1000 };
    unsigned char buf[N];
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 31 + 7);
    uint8_t whole[32], part[32];
    tm_sha256 s;
    tm_sha256_init(&s);
    tm_sha256_update(&s, buf, N);
    tm_sha256_final(&s, whole);
    int bad = 0;
    for (size_t step = 1; step <= 130; step++) {
        tm_sha256_init(&s);
        for (size_t at = 0; at < N; at += step)
            tm_sha256_update(&s, buf + at, at + step <= N ? step : N - at);
        tm_sha256_final(&s, part);
        if (memcmp(whole, part, 32)) {
            printf("FAIL split into pieces of %zu bytes gives another digest\n", step);
            bad++;
        }
    }
    if (bad) n_failed++;
    else n_passed++;
}

int main(void) {
    nist_vectors();
    padding_boundaries();
    splits_agree();
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed != 0;
}

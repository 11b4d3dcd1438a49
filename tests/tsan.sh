#!/bin/sh
# The thread-safety test (tests/test_threads.c) under ThreadSanitizer, as part of
# `make test`: builds the library and that one program into build-tsan/ (its own objects,
# -O1 -fsanitize=thread), then runs it; any race report fails it (halt_on_error).
# Not the threads test itself, which runs unsanitized among the unit tests too.
# Prints the test's "N passed, N failed" line. Usage: tests/tsan.sh
B=build-tsan
if ! make --no-print-directory -j2 BUILD=$B OPT=-O1 SAN=-fsanitize=thread \
        $B/tests/test_threads > "${TMPDIR:-/tmp}/tsan-build.$$.log" 2>&1; then
    tail -30 "${TMPDIR:-/tmp}/tsan-build.$$.log"
    rm -f "${TMPDIR:-/tmp}/tsan-build.$$.log"
    echo "FAIL the ThreadSanitizer build of tests/test_threads"
    echo "0 passed, 1 failed"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/tsan-build.$$.log"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" $B/tests/test_threads

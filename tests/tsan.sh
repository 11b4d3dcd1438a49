#!/bin/sh
# The thread-safety tests (tests/test_threads.c: sessions of one model in many threads;
# tests/test_pool.c: the kernel thread pool's stress test; tests/test_optim.c: optimizer
# steps on a pool of their own) under ThreadSanitizer, as part
# of `make test`: builds the library and those programs into build-tsan/ (its own objects,
# -O1 -fsanitize=thread), then runs them; any race report fails (halt_on_error).
# Both also run unsanitized among the unit tests.
# Prints the test's "N passed, N failed" line. Usage: tests/tsan.sh
B=build-tsan
if ! make --no-print-directory -j2 BUILD=$B OPT=-O1 SAN=-fsanitize=thread \
        $B/tests/test_threads $B/tests/test_pool $B/tests/test_optim \
        > "${TMPDIR:-/tmp}/tsan-build.$$.log" 2>&1; then
    tail -30 "${TMPDIR:-/tmp}/tsan-build.$$.log"
    rm -f "${TMPDIR:-/tmp}/tsan-build.$$.log"
    echo "FAIL the ThreadSanitizer build of tests/test_threads, test_pool and test_optim"
    echo "0 passed, 1 failed"
    exit 1
fi
rm -f "${TMPDIR:-/tmp}/tsan-build.$$.log"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
passed=0 failed=0
for t in test_threads test_pool test_optim; do
    log="${TMPDIR:-/tmp}/tsan-$t.$$.log"
    $B/tests/$t > "$log" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
        tail -40 "$log"
        echo "FAIL $t under ThreadSanitizer (exit $rc)"
        failed=$((failed + 1))
    else
        grep -v -E '^[0-9]+ passed, [0-9]+ failed' "$log"
        set -- $line
        passed=$((passed + $1)); failed=$((failed + $3))
    fi
    rm -f "$log"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/sh
# The Python binding's tests (python/tests/) on the package that `make` built into
# BUILD/python. Skipped, saying why, where Debian's python3-numpy or python3-dev (the
# extension's headers) is missing. Usage: tests/python.sh BUILD [MODULE...]
BUILD=${1:-build}
[ $# -gt 0 ] && shift
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import numpy" > /dev/null 2>&1; then
    echo "skipped: no NumPy for $PY (install python3-numpy)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! ls "$BUILD"/python/transmuter/_transmuter*.so > /dev/null 2>&1; then
    echo "skipped: the extension is not built in $BUILD/python (install python3-dev, then make;"
    echo "sanitizer builds leave it out)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
PYTHONPATH="$BUILD/python" TM_BUILD="$BUILD" TM="$BUILD/transmuter" exec "$PY" python/tests/run.py "$@"

#!/bin/sh
# transmuter serve over loopback HTTP (tests/serve_checks.py): every route against the
# library through the CLI, bad requests, the API key, back-pressure, disconnects, concurrent
# streams, the openai npm client when bench/.serve has it, SIGTERM.
# Usage: tests/serve.sh TRANSMUTER
TM=${1:-build/transmuter}
if ! /usr/bin/python3 -c "import numpy" 2>/dev/null; then
    echo "serve: python3 with numpy is needed"
    echo "0 passed, 1 failed"
    exit 1
fi
exec /usr/bin/python3 tests/serve_checks.py "$TM"

#!/bin/sh
# transmuter serve under churn (tests/serve_chaos.py): about 1,000 requests from 16 clients,
# 10% of them streams hung up mid-way, one SIGTERM half-way: no completed response lost,
# exit 0, nothing leaked (LeakSanitizer's verdict under make check-asan).
# Usage: tests/serve_chaos.sh TRANSMUTER [N_REQUESTS]
exec /usr/bin/python3 tests/serve_chaos.py "${1:-build/transmuter}" ${2:-}

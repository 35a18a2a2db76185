#!/usr/bin/env bash
# The headless browser the report tests take their screenshots with (tests/report/test_browser.py, test_trace.py).
# Best effort: installed with apt-get when missing and this user may; when it cannot be, those tests skip and say so,
# and `make test` goes on.
set -u
for browser in chromium chromium-browser google-chrome; do
    command -v "$browser" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[chromium] apt-get install chromium (for the report's browser tests)"
    if ! (timeout 900 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium) \
            >/dev/null 2>&1; then
        echo "[chromium] could not install chromium: the browser tests will skip"
    fi
else
    echo "[chromium] no chromium, and apt-get is not ours to run: the browser tests will skip"
fi
exit 0

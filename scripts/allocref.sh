#!/usr/bin/env bash
# Build allocref: kube-scheduler v1.37.2's structured DRA allocator (k8s.io/dynamic-resource-allocation/structured
# v0.37.2) behind a JSON-lines filter, for the comparison in tests/engine/dra/test_allocate_kubernetes.py. Offline
# by default (GOPROXY=off: the modules come from the Go module cache scripts/k8s-binaries.sh fills);
# CELREF_GOPROXY=<proxy> lets it download them. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/allocref"
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/allocref-v0.37.2
mkdir -p "$CACHE"
command -v go >/dev/null || { echo "[allocref] go is required" >&2; exit 2; }
GOPROXY=${CELREF_GOPROXY:-off} GOFLAGS=-mod=mod go build -o "$CACHE/allocref" . >&2
echo "$CACHE/allocref"

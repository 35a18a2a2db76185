#!/usr/bin/env bash
# Build celref: Kubernetes' own DRA CEL environment (k8s.io/dynamic-resource-allocation/cel v0.37.2, the library
# kube-scheduler v1.37.2 evaluates device selectors with) behind a JSON-lines filter, for the comparison in
# tests/engine/dra/test_cel_kubernetes.py. Offline by default (GOPROXY=off: the modules come from the Go module cache
# scripts/k8s-binaries.sh fills); CELREF_GOPROXY=<proxy> lets it download them. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/celref"
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/celref-v0.37.2
mkdir -p "$CACHE"
command -v go >/dev/null || { echo "[celref] go is required" >&2; exit 2; }
GOPROXY=${CELREF_GOPROXY:-off} GOFLAGS=-mod=mod go build -o "$CACHE/celref" . >&2
echo "$CACHE/celref"

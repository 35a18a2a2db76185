#!/usr/bin/env bash
# Build the real helm CLI (helm.sh/helm/v3/cmd/helm) from the Go module proxy into a cache directory outside the
# repository, for the chart tests (tests/deploy/test_chart.py, tests/e2e/test_chart.py). Idempotent: skipped when the
# cached binary and its version stamp exist. Prints the path of the `helm` binary on its last line.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${GPUSCALE_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/helm-${HELM_VERSION}}
BIN=$CACHE/bin

log() { printf '[helm-binary] %s\n' "$*" >&2; }

if [ -x "$BIN/helm" ] && [ "$(cat "$BIN/VERSION" 2>/dev/null)" = "$HELM_VERSION" ]; then
  echo "$BIN/helm"; exit 0
fi
command -v go >/dev/null || { log "go is required to build helm"; exit 2; }
mkdir -p "$BIN" "$CACHE/mod"
start=$(date +%s)
cd "$CACHE/mod"
rm -f go.mod go.sum
go mod init local/helmbin >/dev/null 2>&1
go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
log "go build helm.sh/helm/v3/cmd/helm $HELM_VERSION"
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  -o "$BIN/helm" helm.sh/helm/v3/cmd/helm
echo "$HELM_VERSION" > "$BIN/VERSION"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN/helm"

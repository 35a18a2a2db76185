#!/usr/bin/env bash
# Build the real Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy into a cache
# directory outside the repository, for tests/e2e/test_kueue_controller.py. Idempotent: skipped when the cached binary
# and its version stamp exist. Prints the directory holding `kueue-manager` on its last line.
# Cold: ≈ 12 min on 2 busy cores (1,627 packages).
set -euo pipefail

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
CACHE=${GPUSCALE_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/kueue-${KUEUE_VERSION}}
BIN=$CACHE/bin

log() { printf '[kueue-binary] %s\n' "$*" >&2; }

if [ -x "$BIN/kueue-manager" ] && [ "$(cat "$BIN/VERSION" 2>/dev/null)" = "$KUEUE_VERSION" ]; then
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { log "go is required to build Kueue"; exit 2; }
mkdir -p "$BIN" "$CACHE/mod"
start=$(date +%s)
cd "$CACHE/mod"
rm -f go.mod go.sum
go mod init local/kueuebin >/dev/null 2>&1
go get "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" >&2
log "go build sigs.k8s.io/kueue/cmd/kueue $KUEUE_VERSION"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/kueue-manager" sigs.k8s.io/kueue/cmd/kueue
echo "$KUEUE_VERSION" > "$BIN/VERSION"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN"

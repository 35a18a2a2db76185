#!/usr/bin/env bash
# Build the real Kueue controller manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy into a cache
# directory outside the repository, for tests/e2e/test_kueue_controller.py. Idempotent: skipped when the cached binary
# and its version stamp exist. Prints the directory holding `kueue-manager` on its last line.
# Cold: ≈ 8–12 min on 2 busy cores (1,627 packages).
set -euo pipefail
. "$(dirname "$0")/go-binary.sh"

KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
CACHE=${GPUSCALE_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/kueue-${KUEUE_VERSION}}

go_binary kueue-binary "$KUEUE_VERSION" "$CACHE" sigs.k8s.io/kueue/cmd/kueue kueue-manager
echo "$CACHE/bin"

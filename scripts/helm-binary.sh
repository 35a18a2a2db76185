#!/usr/bin/env bash
# Build the real helm CLI (helm.sh/helm/v3/cmd/helm) from the Go module proxy into a cache directory outside the
# repository, for the chart tests (tests/deploy/test_chart.py, tests/e2e/test_chart.py). Idempotent: skipped when the
# cached binary and its version stamp exist. Prints the path of the `helm` binary on its last line.
set -euo pipefail
. "$(dirname "$0")/go-binary.sh"

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${GPUSCALE_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/helm-${HELM_VERSION}}

go_binary helm-binary "$HELM_VERSION" "$CACHE" helm.sh/helm/v3/cmd/helm helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
echo "$CACHE/bin/helm"

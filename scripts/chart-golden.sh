#!/usr/bin/env bash
# Render charts/gpuscale into the golden files tests/deploy/test_chart.py compares against: the default values and
# the Cluster API values of tests/deploy/values-clusterapi.yaml, release `gpuscale` in namespace gpuscale-system.
# Run after changing the chart, then review the diff: `bash scripts/chart-golden.sh && git diff tests/deploy/golden`.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM=${GPUSCALE_HELM_BIN:-$(bash scripts/helm-binary.sh | tail -1)}
render() { "$HELM" template gpuscale charts/gpuscale --namespace gpuscale-system "$@"; }
render > tests/deploy/golden/default.yaml
render --values tests/deploy/values-clusterapi.yaml > tests/deploy/golden/clusterapi.yaml
echo "wrote tests/deploy/golden/default.yaml tests/deploy/golden/clusterapi.yaml" >&2

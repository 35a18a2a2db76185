#!/usr/bin/env bash
# Build the real control plane used by the end-to-end tests: kube-apiserver, kube-scheduler,
# kube-controller-manager (Kubernetes v1.37.2), etcd (the server version k8s v1.37.2's go.mod pins) and kwok v0.8.0,
# from Go modules, into a cache directory outside the repository.
#
# Idempotent: each binary is skipped when the cached copy already reports the expected version.
# KUBEBUILDER_ASSETS (envtest's convention) pointing at a directory holding the binaries skips the build entirely.
# Prints the directory holding the binaries on its last line.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${GPUSCALE_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuscale/k8s-${K8S_VERSION}}
BIN=$CACHE/bin

log() { printf '[k8s-binaries] %s\n' "$*" >&2; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  for b in kube-apiserver kube-scheduler kube-controller-manager etcd kwok; do
    [ -x "$KUBEBUILDER_ASSETS/$b" ] || { log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks $b"; exit 2; }
  done
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi

command -v go >/dev/null || { log "go is required to build the control plane"; exit 2; }
mkdir -p "$BIN" "$CACHE/mod"

have_version() {  # binary, expected substring of its --version output
  [ -x "$BIN/$1" ] && "$BIN/$1" --version 2>/dev/null | grep -q -- "$2"
}

need_k8s=0
for b in kube-apiserver kube-scheduler kube-controller-manager; do
  have_version "$b" "$K8S_VERSION" || need_k8s=1
done
[ -x "$BIN/etcd" ] && "$BIN/etcd" --version >/dev/null 2>&1 || need_k8s=1

if [ "$need_k8s" = 1 ]; then
  start=$(date +%s)
  log "building Kubernetes $K8S_VERSION components and etcd (cold: 10-20 min on 2 cores)"
  mod=$CACHE/mod
  cd "$mod"
  rm -f go.mod go.sum
  go mod init local/k8sbins >/dev/null 2>&1
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  # k8s.io/kubernetes replaces its staging modules with ./staging/src/...; point each at its published tag instead.
  staging_version=v0.${K8S_VERSION#v1.}
  mods=$(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod")
  [ -n "$mods" ] || { log "no staging replaces found in $gomod"; exit 1; }
  for m in $mods; do go mod edit -replace "$m=$m@$staging_version"; done
  etcd_version=$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$gomod" | head -1)
  go get "k8s.io/kubernetes@$K8S_VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >&2
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  go mod tidy >&2
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitTreeState=clean"
  k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}  # v1.37.2 -> 37 (gitMinor is the bare minor number)
  ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$k8s_minor"
  for c in kube-apiserver kube-scheduler kube-controller-manager; do
    log "go build $c"
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
  done
  log "go build etcd $etcd_version"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
  log "control plane built in $(( $(date +%s) - start )) s"
fi

if ! have_version kwok "$KWOK_VERSION"; then
  log "building kwok $KWOK_VERSION"
  # Its own step, outside the throwaway module: that module's replaces would drag kwok's k8s deps to the wrong tag.
  (cd "$CACHE" && GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath \
     -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
fi

echo "$BIN"

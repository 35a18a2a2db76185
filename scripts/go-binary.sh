#!/usr/bin/env bash
# Shared by the scripts that build one Go command from the Go module proxy into a cache directory outside the
# repository (helm-binary.sh, kueue-binary.sh). Source it, then call:
#   go_binary LABEL VERSION CACHE PACKAGE OUTPUT [LDFLAGS]
# Idempotent: skipped when CACHE/bin/OUTPUT and its version stamp CACHE/bin/VERSION exist. Leaves the binary at
# CACHE/bin/OUTPUT; logs to stderr only, so the caller decides what it prints.

go_binary() {
  local label=$1 version=$2 cache=$3 package=$4 output=$5 ldflags=${6:-"-s -w"}
  local bin=$cache/bin start
  if [ -x "$bin/$output" ] && [ "$(cat "$bin/VERSION" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  command -v go >/dev/null || { printf '[%s] go is required to build %s\n' "$label" "$package" >&2; exit 2; }
  mkdir -p "$bin" "$cache/mod"
  start=$(date +%s)
  (
    cd "$cache/mod"
    rm -f go.mod go.sum
    go mod init "local/${label//-/}" >/dev/null 2>&1
    go get "$package@$version" >&2
    printf '[%s] go build %s %s\n' "$label" "$package" "$version" >&2
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$output" "$package"
  )
  echo "$version" > "$bin/VERSION"
  printf '[%s] built in %s s\n' "$label" "$(( $(date +%s) - start ))" >&2
}

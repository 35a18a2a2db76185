#!/usr/bin/env bash
# `make image`: build the gpuscale container image on this machine, daemonless, and smoke-run it.
#   1. a wheelhouse in out/image/context/wheels: gpuscale's wheel and a wheel of every runtime dependency at the
#      tested versions (constraints.txt), made here with this machine's pip and Python — the image's build then
#      installs offline (pip --no-index), so it needs no index, proxy or credentials inside the build
#      (docs/decisions.md, D32);
#   2. a local Debian base image, unless GPUSCALE_IMAGE_BASE names one: mmdebstrap (minbase, the suite of this
#      machine) from this machine's own apt sources, imported into buildah's storage as localhost/gpuscale-base:SUITE
#      (cached there; the registry's debian:bookworm-slim the Containerfile pins cannot be pulled here);
#   3. buildah build --isolation chroot --storage-driver vfs of ./Containerfile on that base → IMAGE;
#   4. smoke run: the image's root filesystem mounted read-only (a tmpfs on /tmp, as the chart's emptyDir), run as
#      uid/gid 65532 with chroot: `gpuscale --version` and `gpuscale run --help`.
# Needs root (buildah's vfs storage, chroot, mounts) and buildah + mmdebstrap (apt-get installs them when missing).
# Prints the image name on its last line. Storage: buildah's vfs driver keeps full copies of every cached stage
# (`buildah --storage-driver vfs rmi --prune` reclaims them).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[image] %s\n' "$*" >&2; }
PYTHON=${PYTHON:-.venv/bin/python}
VERSION=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
IMAGE=${IMAGE:-localhost/gpuscale:$VERSION}
SUITE=${GPUSCALE_IMAGE_SUITE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
BUILDAH=(buildah --storage-driver vfs)
CONTEXT=out/image/context

[ "$(id -u)" = 0 ] || { log "needs root (buildah's vfs storage, chroot and mounts)"; exit 2; }
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi

log "wheelhouse → $CONTEXT/wheels"
rm -rf "$CONTEXT" && mkdir -p "$CONTEXT/wheels"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$CONTEXT/wheels" . >&2
[ -f constraints.txt ] || { log "constraints.txt (the tested versions) is missing"; exit 2; }
"$PYTHON" -m pip wheel --quiet --constraint constraints.txt --wheel-dir "$CONTEXT/wheels" \
  "$CONTEXT"/wheels/gpuscale-*.whl >&2
log "$(find "$CONTEXT/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$CONTEXT/wheels" | cut -f1)"

BASE=${GPUSCALE_IMAGE_BASE:-}
pull=missing  # a named base is pulled when absent; the local one never is
if [ -z "$BASE" ]; then
  pull=never
  BASE=localhost/gpuscale-base:$SUITE
  if ! "${BUILDAH[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    sources=()
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
      [ -s "$f" ] && sources+=("$f")
    done
    [ ${#sources[@]} -gt 0 ] || { log "no apt sources on this machine to build the base from"; exit 2; }
    rootfs=out/image/base-$SUITE.tar
    log "base: mmdebstrap --variant=minbase $SUITE from ${sources[*]}"
    mmdebstrap --quiet --variant=minbase --format=tar "$SUITE" "$rootfs" "${sources[@]}" >&2
    ctr=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" add "$ctr" "$rootfs" / >&2
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd /bin/bash "$ctr"
    "${BUILDAH[@]}" commit --quiet "$ctr" "$BASE" >&2
    "${BUILDAH[@]}" rm "$ctr" >/dev/null
    rm -f "$rootfs"
  fi
fi

log "buildah build $IMAGE on $BASE"
previous=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
start=$(date +%s)
"${BUILDAH[@]}" build --isolation chroot --pull="$pull" --layers --build-arg "BASE=$BASE" \
  --tag "$IMAGE" --file Containerfile "$CONTEXT" >&2
log "built in $(( $(date +%s) - start )) s"
current=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then  # the replaced image: a full copy under vfs
  "${BUILDAH[@]}" rmi "$previous" >/dev/null 2>&1 || true
fi

bash scripts/image-smoke.sh "$IMAGE" >&2
echo "$IMAGE"

#!/usr/bin/env bash
# Smoke-run a built gpuscale image without a container engine: its root filesystem (buildah mount) bind-mounted
# read-only in a private mount namespace, a tmpfs on /tmp (the chart's emptyDir), /dev and /proc from the host, and
# the image's own USER, Env and ENTRYPOINT (read from its OCI config) run through chroot:
# `ENTRYPOINT --version` and `ENTRYPOINT run --help` must both succeed. Root only. Usage: image-smoke.sh IMAGE
set -euo pipefail
IMAGE=${1:?usage: image-smoke.sh IMAGE}
if [ -z "${GPUSCALE_SMOKE_NS:-}" ]; then  # again, alone in a mount namespace: every mount below ends with it
  exec env GPUSCALE_SMOKE_NS=1 unshare --mount --propagation private bash "$0" "$@"
fi
BUILDAH=(buildah --storage-driver vfs)
log() { printf '[image-smoke] %s\n' "$*" >&2; }

config=$("${BUILDAH[@]}" inspect --type image "$IMAGE")
field() {  # one field of the image's OCI config, one item a line: User, Entrypoint or Env
  python3 -c 'import json, sys
value = json.loads(sys.stdin.read())["OCIv1"]["config"].get(sys.argv[1]) or []
print("\n".join([value] if isinstance(value, str) else value))' "$1" <<<"$config"
}
user=$(field User)
mapfile -t entrypoint < <(field Entrypoint)
mapfile -t envs < <(field Env)
case "$user" in
  ''|0|0:*|root|root:*) log "image $IMAGE runs as root (User '$user')"; exit 1 ;;
esac
[ ${#entrypoint[@]} -gt 0 ] && [ -n "${entrypoint[0]}" ] || { log "image $IMAGE has no ENTRYPOINT"; exit 1; }

ctr=$("${BUILDAH[@]}" from --pull=never "$IMAGE")
root=$(mktemp -d /tmp/gpuscale-smoke.XXXXXX)
trap 'umount -R "$root" 2>/dev/null; rmdir "$root"; "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
mount --bind "$("${BUILDAH[@]}" mount "$ctr")" "$root"
mount -o remount,bind,ro "$root"
mount -t tmpfs -o size=64m,mode=1777 tmpfs "$root/tmp"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
if touch "$root/etc/gpuscale-smoke" 2>/dev/null; then log "the root filesystem is not read-only"; exit 1; fi

run() { env -i "${envs[@]}" chroot --userspec="$user" "$root" "${entrypoint[@]}" "$@"; }
log "${entrypoint[*]} --version (as $user, read-only root)"
run --version
log "${entrypoint[*]} run --help"
help=$(run run --help)
grep -q -- "--provider" <<<"$help" || { log "run --help does not describe run:"$'\n'"$help"; exit 1; }
head -n 6 <<<"$help"
log "ok: $IMAGE runs as $user with a read-only root filesystem"

#!/usr/bin/env bash
# Run a command the way a newcomer's fresh machine would: in a private mount namespace with
# an empty tmpfs on /tmp, HOME an empty folder inside it, and a bare environment (PATH the
# system's, CI passed through, nothing else from the caller's shell). So a file that another
# checkout or an earlier run left in /tmp, a package in a home folder or a pip cache cannot
# help the command. .ci/run runs the README's commands through it (docs/testing.md).
#
#   bash scripts/hermetic.sh bash -c 'bash scripts/setup.sh && .venv/bin/nexos compare'
#
# As root it needs only a mount namespace; otherwise it asks for a user namespace too, whose
# root may mount (apt-get cannot install from there: set up once outside first).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bash scripts/hermetic.sh COMMAND [ARG...]" >&2; exit 2; }

if [ -z "${NEXOS_HERMETIC:-}" ]; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(--map-root-user)
  exec unshare --mount --propagation private "${as_root[@]}" \
    env NEXOS_HERMETIC=1 bash "$0" "$@"
fi

# Inside the namespace. A working folder under /tmp (a checkout there) is carried over the
# new tmpfs by a bind mount parked outside /tmp.
here=$(pwd -P)
if [[ "$here/" == /tmp/* ]]; then
  park=$(mktemp -d /run/nexos-hermetic.XXXXXX)
  mount --bind "$here" "$park"
  mount -t tmpfs -o mode=1777 tmpfs /tmp
  mkdir -p "$here"
  mount --move "$park" "$here"
  rmdir "$park"
  cd "$here"
else
  mount -t tmpfs -o mode=1777 tmpfs /tmp
fi
home=$(mktemp -d)  # on the new, empty /tmp
exec env -i HOME="$home" CI="${CI:-}" \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"

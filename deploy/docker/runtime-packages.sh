#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given binaries load, one per
# line: what the runtime stage of the images installs. Run in the build stage, where the
# binaries were linked against the installed -dev packages.
#   deploy/docker/runtime-packages.sh build/bin/llm-worker [more binaries]
set -euo pipefail
ldd "$@" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  # Debian 12 has merged /usr, but dpkg records some libraries under /lib and others under
  # /usr/lib: try the path as the loader found it, then its real path, then both prefixes.
  real="$(readlink -f "$lib")"
  for path in "$lib" "$real" "/usr${real#/usr}" "${real#/usr}"; do
    if owner="$(dpkg -S "$path" 2>/dev/null)"; then
      echo "${owner%%:*}"
      continue 2
    fi
  done
  echo "runtime-packages: no Debian package holds $lib" >&2
  exit 1
done | sort -u

#!/usr/bin/env bash
# Proves the README's two commands on a fresh Debian 12 machine: builds a minimal Debian 12 root
# with debootstrap, puts a clean clone of this checkout's HEAD commit in it with ../shared beside
# it (read-only), and runs, inside the root as its first commands, scripts/demo.sh and then
# scripts/test.sh. Nothing of this machine's packages, build or virtual environment is visible
# inside; only what the project's own scripts install is there.
#
#   scripts/fresh_root.sh
#
# The root gets this machine's Debian mirror (apt sources), its apt settings (proxies and the
# like, not its hooks), its pip configuration and proxy variables, its extra CA certificates and
# /etc/resolv.conf, because package registries may be reachable only through them. It gets no
# /etc/hosts: a minimal root has none. Mounted inside: /proc, /dev (with pts and shm) and ../shared (read-only),
# all in a private mount namespace and unmounted on every exit path before the root is deleted.
#
# The debootstrapped base root is cached as a tarball in $LLM_FRESH_ROOT_CACHE (default
# /var/cache/llm-serving-ci); the project's packages and build are never cached.
#
# Exit status: 0 when both commands passed; 3 when the check cannot run here at all (not root,
# no debootstrap and none installable, too little disk), with the reason on stderr; anything
# else is a failure of the check itself.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$(cd "$repo/.." && pwd)/shared"
cache="${LLM_FRESH_ROOT_CACHE:-/var/cache/llm-serving-ci}"
work_parent="${LLM_FRESH_ROOT_DIR:-/var/tmp}"
suite=bookworm
min_free_kb=$((3 * 1024 * 1024))  # a root (about 1.5 GB with packages) and a build

say() { echo "fresh-root: $*"; }
cannot() {
  echo "fresh-root: CANNOT RUN: $*" >&2
  exit 3
}
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# Mounts made below vanish with a private mount namespace even if this script is killed.
if [[ -z ${LLM_FRESH_ROOT_NS:-} ]] && [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null &&
  unshare --mount --propagation private true 2>/dev/null; then
  export LLM_FRESH_ROOT_NS=1
  exec unshare --mount --propagation private "$0" "$@"
fi

# 1. Can it run here?
[[ $(id -u) -eq 0 ]] || cannot "needs root (debootstrap, chroot and mounts); running as uid $(id -u)"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
    >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
        >/dev/null 2>&1; } || cannot "debootstrap is not installed and apt-get could not install it"
fi
mkdir -p "$work_parent" "$cache"
free_kb=$(df --output=avail -k "$work_parent" | tail -n 1 | tr -d ' ')
((free_kb >= min_free_kb)) ||
  cannot "$((free_kb / 1024)) MiB free in $work_parent; a fresh root and a build need about 3 GiB"

# This machine's Debian mirror: the first source that serves $suite main.
mirror=$(
  {
    # deb822 files: a stanza's URIs line, when the stanza lists the suite.
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -f $f ]] || continue
      awk -v suite="$suite" 'BEGIN{RS=""} $0 ~ ("Suites:[^\n]*" suite "([ \n]|$)") &&
        $0 ~ /Types:[^\n]*deb([ \n]|$)/ {
          if (match($0, /URIs:[ \t]*[^ \t\n]+/)) { s = substr($0, RSTART, RLENGTH);
            sub(/URIs:[ \t]*/, "", s); print s } }' "$f"
    done
    # one-line files: deb [options] URI suite components
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -f $f ]] || continue
      sed -n "s/^deb \(\[[^]]*\] \)\?\([^ ]*\) $suite .*/\2/p" "$f"
    done
  } | head -n 1
)
[[ -n $mirror ]] || mirror=http://deb.debian.org/debian
say "mirror $mirror"

root=$(mktemp -d "$work_parent/llm-fresh-root.XXXXXX")
chmod 755 "$root"  # a root directory is world-readable (apt's _apt user reads through it)
mounts=()
cleanup() {
  local status=$?
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[$i]}" 2>/dev/null || umount -R -l "${mounts[$i]}" 2>/dev/null || true
  done
  # Never delete through a mount point still in place.
  if grep -q " $root" /proc/self/mountinfo; then
    echo "fresh-root: $root still has mounts; not deleting it" >&2
  else
    rm -rf --one-file-system "$root"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. The base root: debootstrap once, then from the cached tarball.
t0=$SECONDS
key=$(printf '%s %s %s' "$suite" "$mirror" "$(dpkg --print-architecture)" | md5sum | cut -c1-12)
tarball="$cache/debian12-minbase-$key.tar.gz"
if [[ -f $tarball ]]; then
  tar -xzf "$tarball" -C "$root"
  say "base root from the cache ($tarball) in $(elapsed $((SECONDS - t0)))"
else
  say "debootstrap --variant=minbase $suite (cached afterwards in $cache)"
  if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
    tail -n 30 "$root.debootstrap.log" >&2
    rm -f "$root.debootstrap.log"
    echo "fresh-root: debootstrap failed" >&2
    exit 1
  fi
  rm -f "$root.debootstrap.log"
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -czf "$tarball.tmp" -C "$root" . && mv "$tarball.tmp" "$tarball"
  say "debootstrap done in $(elapsed $((SECONDS - t0)))"
fi

# 3. This machine's ways to reach the package registries.
rm -f "$root/etc/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [[ -f $f ]] && cp "$f" "$root$f"
done
# apt settings (proxies, validity checks), but no hooks: they name programs the root lacks.
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [[ -f $f ]] && grep -q 'Acquire' "$f" && ! grep -qi 'invoke' "$f" && cp "$f" "$root$f"
done
for f in /etc/pip.conf /etc/resolv.conf; do
  [[ -f $f ]] && cp -L "$f" "$root$f"
done
rm -f "$root/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
# Until the root's own ca-certificates package builds its bundle (it adds the files above).
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "$root/etc/ssl/certs"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
env_args=(HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
while IFS='=' read -r name value; do
  case $name in
    http_proxy | https_proxy | no_proxy | HTTP_PROXY | HTTPS_PROXY | NO_PROXY | PIP_INDEX_URL | \
      PIP_EXTRA_INDEX_URL | PIP_TRUSTED_HOST | PIP_DEFAULT_TIMEOUT | PIP_CERT | SSL_CERT_FILE | \
      REQUESTS_CA_BUNDLE | LLM_CI)
      env_args+=("$name=$value")
      ;;
  esac
done < <(env)

# 4. A clean clone of the commit under test, ../shared beside it.
commit=$(git -C "$repo" rev-parse HEAD)
mkdir -p "$root/src"
git clone --quiet --no-local "$repo" "$root/src/llm-serving"
git -C "$root/src/llm-serving" checkout --quiet --detach "$commit"
say "clean clone of $commit in /src/llm-serving"
mkdir -p "$root/src/shared"
if [[ -d $shared ]]; then
  mount --bind "$shared" "$root/src/shared"
  mounts+=("$root/src/shared")
  mount -o remount,bind,ro "$root/src/shared"
else
  rmdir "$root/src/shared"
  say "no $shared here: the demo uses a generated model and test.sh must fail"
fi
mount -t proc proc "$root/proc"
mounts+=("$root/proc")
mount --rbind /dev "$root/dev"  # with /dev/pts and /dev/shm, as a booted machine has
mounts+=("$root/dev")

# 5. The README's two commands, each as a new user would type it.
run_in_root() {
  chroot "$root" /usr/bin/env -i "${env_args[@]}" /bin/bash -c "cd /src/llm-serving && $1"
}
t1=$SECONDS
say "running scripts/demo.sh in the fresh root"
run_in_root scripts/demo.sh
t2=$SECONDS
say "scripts/demo.sh passed in $(elapsed $((t2 - t1)))"
say "running scripts/test.sh in the same root"
run_in_root scripts/test.sh
t3=$SECONDS
say "scripts/test.sh passed in $(elapsed $((t3 - t2)))"
say "phases: base root $(elapsed $((t1 - t0))), demo.sh $(elapsed $((t2 - t1))), test.sh $(elapsed $((t3 - t2)))"

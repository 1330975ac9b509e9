#!/usr/bin/env bash
# Build the root filesystem tarball of the test job image gctl-test/train:1.
#
#   scripts/testimage/build-rootfs.sh OUT.tar
#
# The image holds Debian's own /usr/bin/python3.11 with the shared libraries
# `ldd` reports (and the dynamic loader), a trimmed /usr/lib/python3.11
# (precompiled), /usr/bin/python3, /tmp, /etc/passwd with root, and
# /opt/gctl/train.py from this directory. scripts/testhosts.sh turns the
# tarball into an image with `docker import` (there is no registry to pull from).
# The layout follows Debian's merged /usr: /bin, /lib and /lib64 are symlinks.
set -Eeuo pipefail

PY=/usr/bin/python3.11
HERE=$(cd -- "$(dirname -- "$0")" && pwd -P)

log() { printf 'build-rootfs: %s\n' "$*" >&2; }
die() {
  printf 'build-rootfs: error: %s\n' "$*" >&2
  exit 1
}

[[ $# -eq 1 && -n $1 ]] || die "usage: $0 OUT.tar"
OUT=$1
[ -x "$PY" ] || die "$PY is missing (apt-get install python3.11-minimal)"
[ -f "$HERE/train.py" ] || die "$HERE/train.py is missing"

ROOT=$(mktemp -d "${TMPDIR:-/tmp}/gctl-rootfs.XXXXXX")
trap 'rm -rf -- "$ROOT" "$OUT.part"' EXIT

# Merged-/usr skeleton.
mkdir -p "$ROOT"/usr/{bin,lib/x86_64-linux-gnu,lib64,local/bin} "$ROOT"/{etc,opt/gctl,root,proc,sys,dev,gctl}
ln -s usr/bin "$ROOT/bin"
ln -s usr/lib "$ROOT/lib"
ln -s usr/lib64 "$ROOT/lib64"
install -d -m 1777 "$ROOT/tmp"

# Copy a shared object (following symlinks) to its /usr-merged place in ROOT.
copy_lib() {
  local src=$1 dst
  case $src in
    /usr/*) dst=$ROOT$src ;;
    /lib/* | /lib64/*) dst=$ROOT/usr$src ;;
    *) dst=$ROOT$src ;;
  esac
  [ -e "$dst" ] && return 0
  mkdir -p "$(dirname -- "$dst")"
  cp -L -- "$src" "$dst"
}

# The libraries an ELF file needs, as absolute paths (loader included).
needed_libs() {
  ldd "$1" 2>/dev/null | awk '
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }'
}

# Python itself and what it links against.
cp -L "$PY" "$ROOT/usr/bin/python3.11"
ln -s python3.11 "$ROOT/usr/bin/python3"
while read -r lib; do copy_lib "$lib"; done < <(needed_libs "$PY")

# The standard library, without what a job never needs.
STDLIB=/usr/lib/python3.11
DROP=(test idlelib tkinter turtledemo ensurepip lib2to3 pydoc_data distutils
  unittest venv config-3.11-x86_64-linux-gnu site-packages dist-packages
  sqlite3 curses dbm xmlrpc wsgiref msilib turtle.py pydoc.py doctest.py
  _pydecimal.py _pyio.py EXTERNALLY-MANAGED sitecustomize.py
  _distutils_system_mod.py)
tar -C "$STDLIB" -cf - \
  --exclude=__pycache__ --exclude='*.pyc' \
  "${DROP[@]/#/--exclude=./}" . | { mkdir -p "$ROOT$STDLIB" && tar -C "$ROOT$STDLIB" -xf -; }
# Drop links leading out of the tree (Debian points some at /etc/python3.11).
find "$ROOT$STDLIB" -type l ! -exec test -e {} \; -delete

# Extension modules: keep those whose libraries are already in the image
# (or are small); drop test modules and the ones needing e.g. libssl, tk.
DYN=$ROOT$STDLIB/lib-dynload
for so in "$DYN"/*.so; do
  name=$(basename -- "$so")
  case $name in
    _test* | _ctypes_test* | xx* | _xx* | _curses* | readline* | _dbm* | _gdbm* | \
      _sqlite3* | _tkinter* | nis* | ossaudiodev* | audioop* | _crypt*)
      rm -f -- "$so"
      continue
      ;;
  esac
  keep=1
  while read -r lib; do
    case $(basename -- "$lib") in
      libc.so* | libm.so* | libz.so* | libexpat.so* | ld-linux*) ;;
      liblzma.so* | libbz2.so* | libffi.so* | libmpdec.so* | libuuid.so*) copy_lib "$lib" ;;
      *) keep=0 ;;
    esac
  done < <(needed_libs "$so")
  [ "$keep" -eq 1 ] || rm -f -- "$so"
done

# Precompile so every job start does not recompile the stdlib (timestamps are
# kept by tar, so the caches stay valid).
"$PY" -E -s -m compileall -q -j 0 -o 0 "$ROOT$STDLIB" >/dev/null ||
  die "compileall failed"

# A little of /etc: root user and group, nsswitch, loader cache.
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' \
  >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$ROOT/etc/nsswitch.conf"
ldconfig -r "$ROOT" 2>/dev/null || true

install -m 0644 "$HERE/train.py" "$ROOT/opt/gctl/train.py"
# The job SDK, importable as gctl.job (PYTHONPATH=/opt/gctl/lib is set on import).
install -D -m 0644 "$HERE/../../gctl/__init__.py" "$ROOT/opt/gctl/lib/gctl/__init__.py"
install -D -m 0644 "$HERE/../../gctl/job.py" "$ROOT/opt/gctl/lib/gctl/job.py"

# Smoke test: the copied interpreter runs in the tree and can import what
# train.py needs (same loader, same libraries; chroot needs no extra setup).
if ! PYTHONPATH=/opt/gctl/lib chroot "$ROOT" /usr/bin/python3 -c \
  'import json, os, signal, time, argparse, pathlib, hashlib, collections; hashlib.sha256(b""); from gctl import job' \
  >/dev/null 2>&1; then
  chroot "$ROOT" /usr/bin/python3 -c 'import json, argparse, pathlib, hashlib' >&2 || true
  die "python in the image root filesystem does not work"
fi

tar -C "$ROOT" --numeric-owner --owner=0 --group=0 -cf "$OUT.part" .
mv -f -- "$OUT.part" "$OUT"
log "built $OUT ($(du -h -- "$OUT" | cut -f1))"

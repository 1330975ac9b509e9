#!/usr/bin/env bash
# Local test hosts for gctl: each one a real sshd plus its own real dockerd.
#
#   scripts/testhosts.sh start [N]      # hosts h1..hN (default 2, at most 16)
#   scripts/testhosts.sh env            # JSON description of the hosts
#   scripts/testhosts.sh ssh-stop NAME  # stop one host's sshd (and its sessions)
#   scripts/testhosts.sh ssh-start NAME # start it again
#   scripts/testhosts.sh rekey NAME     # new host key, sshd restarted
#   scripts/testhosts.sh freeze NAME    # SIGSTOP the host's sshd and its sessions (a hung host)
#   scripts/testhosts.sh thaw NAME      # SIGCONT them
#   scripts/testhosts.sh engine-stop NAME   # stop its dockerd as systemctl would (containers
#                                           # get SIGTERM and stay, exited)
#   scripts/testhosts.sh engine-start NAME  # start it again
#   scripts/testhosts.sh stop           # stop everything, delete the state dir
#
# State lives in DIR=${GCTL_TESTHOSTS_DIR:-/tmp/gctl-testhosts}; the hosts listen on
# port ${GCTL_TESTHOSTS_PORT:-2222}. Another DIR with another port is another set of
# hosts, independent of the first (scripts/demo.sh runs its own that way):
#   id_ed25519(.pub)  client key, authorised for root on every host (authorized_keys)
#   known_hosts       "[127.0.2.I]:2222 ssh-ed25519 ..." for every host
#   image.tar         root filesystem of the job image gctl-test/train:1
#   hI/               host I: ssh_host_ed25519_key, sshd_config, sshd.pid, sshd.log,
#                     daemon.json, docker.sock, docker.pid, dockerd.log, docker/
#                     (data root), run/ (exec root), work/ (job directories)
# Host hI answers SSH as root at 127.0.2.I port PORT (all of 127/8 is loopback).
# Its sshd sets DOCKER_HOST to hI's own engine, so `docker ...` run over SSH on
# hI sees only hI's containers. Engines run with --bridge none and no iptables
# (jobs use host networking) and --cgroup-parent /gctl-hI.
#
# `start` is idempotent: what runs is left alone, what is missing is started.
# Progress goes to stderr; the last line of stdout is the JSON that `env` prints.
# `stop` only touches processes whose command line names DIR (by pid file and
# by a sweep for dockerd/containerd/shim/sshd processes), never other engines.
set -Eeuo pipefail

IMAGE=gctl-test/train:1
PORT=${GCTL_TESTHOSTS_PORT:-2222}
MAX_HOSTS=16
HERE=$(cd -- "$(dirname -- "$0")" && pwd -P)
TRAIN_PY=$HERE/testimage/train.py
BUILD_ROOTFS=$HERE/testimage/build-rootfs.sh
MARKER=.gctl-testhosts
# Changes applied by `docker import` (part of the image checksum).
IMPORT_CHANGES=(
  'ENV PATH=/usr/local/bin:/usr/bin:/bin'
  'ENV PYTHONUNBUFFERED=1'
  'ENV PYTHONPATH=/opt/gctl/lib'
  'WORKDIR /'
  'CMD ["python3", "/opt/gctl/train.py"]'
)

log() { printf 'testhosts: %s\n' "$*" >&2; }
die() {
  printf 'testhosts: error: %s\n' "$*" >&2
  exit 1
}
on_err() {
  local rc=$1
  [ "$BASH_SUBSHELL" -gt 0 ] || printf 'testhosts: error: command failed (exit %s, line %s): %s\n' \
    "$rc" "$2" "$3" >&2
  exit "$rc"
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

# Our own view of Docker: only ever the engine named with -H.
unset DOCKER_HOST DOCKER_CONTEXT DOCKER_TLS_VERIFY DOCKER_CERT_PATH DOCKER_API_VERSION
for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
done
export PATH

DIR=${GCTL_TESTHOSTS_DIR:-/tmp/gctl-testhosts}
DIR=${DIR%/}
[[ $PORT =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1024 ] && [ "$PORT" -le 65535 ] ||
  die "GCTL_TESTHOSTS_PORT must be a port number from 1024 to 65535 (got '$PORT')"
# A plain absolute path: it goes unquoted into sshd_config, JSON and mountinfo.
[[ $DIR =~ ^/[A-Za-z0-9._+-][A-Za-z0-9._+/-]*$ && $DIR != *..* ]] ||
  die "GCTL_TESTHOSTS_DIR must be an absolute path of [A-Za-z0-9._+/-] (got '$DIR')"
# unix://DIR/h16/docker.sock must fit in sun_path (108 bytes).
[ "${#DIR}" -le 80 ] || die "GCTL_TESTHOSTS_DIR is too long for socket paths (max 80 chars): $DIR"
DIR_HASH=$(printf '%s' "$DIR" | sha256sum | cut -c1-10)
# Exec roots hold containerd's socket (DIR/hI/run/containerd/containerd.sock.ttrpc
# must stay under 100 chars); long DIRs get a short one under /run.
if [ "${#DIR}" -le 55 ]; then
  EXEC_BASE=""
else
  EXEC_BASE=/run/gctl-th-$DIR_HASH
fi
if [ "$DIR" = /tmp/gctl-testhosts ]; then CG_PREFIX=/gctl; else CG_PREFIX=/gctl-$DIR_HASH; fi
LOCK=/run/lock/gctl-testhosts.$DIR_HASH.lock
APT_LOCK=/run/lock/gctl-testhosts-apt.lock

hdir() { printf '%s/h%s' "$DIR" "$1"; }
addr() { printf '127.0.2.%s' "$1"; }
sock() { printf '%s/h%s/docker.sock' "$DIR" "$1"; }
exec_root() {
  if [ -z "$EXEC_BASE" ]; then printf '%s/h%s/run' "$DIR" "$1"; else printf '%s/h%s' "$EXEC_BASE" "$1"; fi
}
cgroup_parent() { printf '%s-h%s' "$CG_PREFIX" "$1"; }
dk() {
  local i=$1
  shift
  docker -H "unix://$(sock "$i")" "$@"
}

# Host numbers with a DIR/hI/FILE (default sshd_config: fully set up), ascending.
existing_hosts() {
  local i file=${1:-sshd_config}
  for ((i = 1; i <= MAX_HOSTS; i++)); do
    [ ! -e "$DIR/h$i/$file" ] || printf '%s\n' "$i"
  done
}

# Set HI to I for the existing host named "hI".
host_index() {
  [[ $1 =~ ^h([1-9][0-9]?)$ ]] || die "bad host name '$1' (expected h1..h$MAX_HOSTS)"
  HI=${BASH_REMATCH[1]}
  [[ $HI -le $MAX_HOSTS && -f $DIR/h$HI/sshd_config ]] ||
    die "no host $1 under $DIR (run: $0 start)"
}

# The pid in FILE if that process lives and its command line contains PATTERN.
live_pid() {
  local file=$1 pattern=$2 pid cmd
  [ -r "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file" 2>/dev/null) || return 1
  [ -n "$pid" ] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ $cmd == *"$pattern"* ]] || return 1
  printf '%s' "$pid"
}
dockerd_pid() { live_pid "$DIR/h$1/docker.pid" "$(sock "$1")"; }
sshd_pid() { live_pid "$DIR/h$1/sshd.pid" "$DIR/h$1/sshd_config"; }

# All descendants of pid $1 (children first found, deepest last).
descendants() {
  local -A kids=()
  local f line rest pid ppid
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null <"$f" || continue
    pid=${line%% *}
    rest=${line##*) }
    ppid=${rest#* }
    ppid=${ppid%% *}
    kids[$ppid]+=" $pid"
  done
  local queue=("$1") p c
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    for c in ${kids[$p]:-}; do
      printf '%s\n' "$c"
      queue+=("$c")
    done
  done
}

# Wait up to $1 seconds for all the given pids to exit; 1 if some still live.
wait_gone() {
  local secs=$1 p left
  shift
  local end=$((SECONDS + secs))
  while :; do
    left=0
    for p in "$@"; do
      if [ -d "/proc/$p" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$p/status" 2>/dev/null; then
        left=1
        break
      fi
    done
    [ "$left" -eq 1 ] || return 0
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

# TERM the pids, wait, then KILL what is left.
terminate() {
  local secs=$1
  shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  wait_gone "$secs" "$@" && return 0
  log "still running after ${secs}s, killing: $*"
  kill -KILL "$@" 2>/dev/null || true
  wait_gone 5 "$@" || log "could not kill: $*"
}

tail_log() {
  [ -f "$1" ] || return 0
  printf -- '--- last lines of %s ---\n' "$1" >&2
  tail -n "${2:-25}" -- "$1" >&2 || true
}

# ---------------------------------------------------------------- packages

install_missing() {
  local need=()
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  { command -v ssh && command -v ssh-keygen; } >/dev/null || need+=(openssh-client)
  { command -v dockerd && command -v docker; } >/dev/null || need+=(docker.io)
  command -v containerd >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  command -v iptables >/dev/null || need+=(iptables)
  [ -x /usr/bin/python3.11 ] || need+=(python3.11-minimal)
  [ ${#need[@]} -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || die "missing ${need[*]} and not root to apt-get them"
  exec 8>"$APT_LOCK"
  flock 8
  log "installing Debian packages: ${need[*]}"
  local made_policy=0 rc=0 apt=(apt-get install -y --no-install-recommends "${need[@]}")
  # policy-rc.d exit 101: the packages' init scripts must not start the
  # system's own sshd/dockerd.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >&2 8>&-; then
    log "install failed; running apt-get update and retrying"
    { DEBIAN_FRONTEND=noninteractive apt-get update >&2 8>&- &&
      DEBIAN_FRONTEND=noninteractive "${apt[@]}" >&2 8>&-; } || rc=1
  fi
  [ "$made_policy" -eq 0 ] || rm -f /usr/sbin/policy-rc.d
  flock -u 8
  exec 8>&-
  [ "$rc" -eq 0 ] || die "apt-get install ${need[*]} failed"
  { command -v dockerd && command -v docker && [ -x /usr/sbin/sshd ]; } >/dev/null ||
    die "dockerd, docker or sshd still missing after apt-get install"
}

# ---------------------------------------------------------------- image

image_sum() {
  {
    cat -- "$TRAIN_PY" "$BUILD_ROOTFS" "$HERE/../gctl/__init__.py" "$HERE/../gctl/job.py"
    printf '%s\n' "${IMPORT_CHANGES[@]}"
    sha256sum /usr/bin/python3.11
  } | sha256sum | cut -c1-64
}

# DIR/image.tar, rebuilt when train.py, the build script or python changed.
ensure_image_tar() {
  local sum=$1
  if [ -f "$DIR/image.tar" ] && [ "$(cat "$DIR/image.sum" 2>/dev/null)" = "$sum" ]; then
    return 0
  fi
  log "building the job image root filesystem"
  rm -f "$DIR/image.sum"
  "$BUILD_ROOTFS" "$DIR/image.tar" || die "building $DIR/image.tar failed"
  printf '%s\n' "$sum" >"$DIR/image.sum"
}

# Import the image into host I's engine unless it is there with this checksum.
ensure_image() {
  local i=$1 sum=$2 cur old args=() c
  cur=$(dk "$i" image inspect -f '{{index .Config.Labels "gctl.image.sum"}}' "$IMAGE" 2>/dev/null) ||
    cur=""
  [ "$cur" != "$sum" ] || return 0
  old=$(dk "$i" image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null) || old=""
  for c in "${IMPORT_CHANGES[@]}" "LABEL gctl.image.sum=$sum"; do args+=(--change "$c"); done
  log "h$i: importing $IMAGE"
  dk "$i" import "${args[@]}" --message "scripts/testhosts.sh" "$DIR/image.tar" "$IMAGE" >/dev/null ||
    die "h$i: docker import failed"
  # The old image is untagged now; drop it unless a container still uses it.
  [ -z "$old" ] || dk "$i" rmi "$old" >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------- dockerd

start_dockerd() {
  local i=$1 h er
  h=$(hdir "$i")
  er=$(exec_root "$i")
  if dockerd_pid "$i" >/dev/null; then
    log "h$i: dockerd already running"
    return 0
  fi
  rm -f -- "$h/docker.sock" "$h/docker.pid"
  # A containerd left by a dead dockerd: stop it. Its pid file must go too:
  # dockerd trusts kill(pid, 0), which also succeeds for a zombie that init
  # has not reaped yet, and would then wait forever for that containerd.
  local cpid
  if cpid=$(live_pid "$er/containerd/containerd.pid" "$er/containerd/containerd.toml"); then
    log "h$i: stopping containerd ($cpid) left by a dead dockerd"
    terminate 10 "$cpid"
  fi
  rm -f -- "$er/containerd/containerd.pid"
  mkdir -p -- "$er" "$h/docker"
  # Our own config file: /etc/docker/daemon.json must not leak in, and each
  # engine gets its own identity key (so engine IDs differ).
  printf '{"deprecated-key-path": "%s/key.json"}\n' "$h" >"$h/daemon.json"
  log "h$i: starting dockerd"
  printf '\n==== %s testhosts.sh: starting dockerd\n' "$(date -u +%FT%TZ)" >>"$h/dockerd.log"
  setsid -f "$(command -v dockerd)" \
    --config-file "$h/daemon.json" \
    --host "unix://$h/docker.sock" \
    --data-root "$h/docker" \
    --exec-root "$er" \
    --pidfile "$h/docker.pid" \
    --bridge none --iptables=false --ip-masq=false --ip-forward=false \
    --userland-proxy=false \
    --exec-opt native.cgroupdriver=cgroupfs \
    --cgroup-parent "$(cgroup_parent "$i")" \
    --log-level warn \
    </dev/null >>"$h/dockerd.log" 2>&1 3>&- 8>&- 9>&-
}

wait_dockerd() {
  local i=$1 h start=$SECONDS out
  h=$(hdir "$i")
  while ! out=$(dk "$i" version --format '{{.Server.APIVersion}}' 2>&1); do
    if [ $((SECONDS - start)) -ge 3 ] && ! dockerd_pid "$i" >/dev/null; then
      tail_log "$h/dockerd.log"
      die "h$i: dockerd exited during startup (log: $h/dockerd.log)"
    fi
    if [ $((SECONDS - start)) -ge 90 ]; then
      tail_log "$h/dockerd.log"
      printf 'docker version: %s\n' "$out" >&2
      die "h$i: dockerd did not answer on $h/docker.sock within 90s (log: $h/dockerd.log)"
    fi
    sleep 0.2
  done
}

stop_dockerd() {
  local i=$1 pid ids
  pid=$(dockerd_pid "$i") || return 0
  ids=$(timeout 30 docker -H "unix://$(sock "$i")" ps -aq 2>/dev/null) || ids=""
  if [ -n "$ids" ]; then
    log "h$i: removing $(wc -w <<<"$ids") container(s)"
    # shellcheck disable=SC2086
    timeout 60 docker -H "unix://$(sock "$i")" rm -f $ids >/dev/null 2>&1 ||
      log "h$i: docker rm -f failed; stopping the engine anyway"
  fi
  log "h$i: stopping dockerd ($pid)"
  terminate 30 "$pid"
}

# ---------------------------------------------------------------- sshd

write_sshd_config() {
  local i=$1 api=$2 h
  h=$(hdir "$i")
  cat >"$h/sshd_config.new" <<EOF
# Written by scripts/testhosts.sh: test host h$i.
ListenAddress $(addr "$i"):$PORT
HostKey $h/ssh_host_ed25519_key
PidFile $h/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
MaxStartups 100
MaxSessions 100
LogLevel VERBOSE
Subsystem sftp internal-sftp
# docker over SSH talks to this host's own engine (API pinned to the engine's
# so that any docker CLI on PATH works with it). SHLVL=1 keeps bash from
# sourcing root's ~/.bashrc for commands run over SSH (it does when SHLVL
# is below 2): this machine's may start pyenv, whose lock a frozen or killed
# session leaves behind, stalling every later login for a minute. A real
# GPU host's login shell is its own business; the test hosts stand for one
# with a plain shell.
SetEnv DOCKER_HOST=unix://$h/docker.sock DOCKER_API_VERSION=$api SHLVL=1
EOF
  if cmp -s "$h/sshd_config.new" "$h/sshd_config"; then
    rm -f -- "$h/sshd_config.new"
    return 1
  fi
  mv -f -- "$h/sshd_config.new" "$h/sshd_config"
}

# Die if something else listens on host I's address (only one set of hosts
# can own 127.0.2.I:PORT, whatever its GCTL_TESTHOSTS_DIR).
check_port_free() {
  if (exec 5<>"/dev/tcp/$(addr "$1")/$PORT") 2>/dev/null; then
    die "h$1: $(addr "$1"):$PORT is already taken by another process" \
      "(hosts of another GCTL_TESTHOSTS_DIR? see: ss -ltnp)"
  fi
}

start_sshd() {
  local i=$1 h
  h=$(hdir "$i")
  if sshd_pid "$i" >/dev/null; then
    log "h$i: sshd already running"
    return 0
  fi
  mkdir -p /run/sshd
  chmod 755 /run/sshd
  rm -f -- "$h/sshd.pid"
  check_port_free "$i"
  /usr/sbin/sshd -t -f "$h/sshd_config" 2>"$h/sshd-check.log" || {
    cat "$h/sshd-check.log" >&2
    die "h$i: sshd -t rejects $h/sshd_config"
  }
  log "h$i: starting sshd on $(addr "$i"):$PORT"
  printf '\n==== %s testhosts.sh: starting sshd\n' "$(date -u +%FT%TZ)" >>"$h/sshd.log"
  # shellcheck disable=SC2094 # sshd appends to its log (-E); so do early errors
  setsid -f /usr/sbin/sshd -f "$h/sshd_config" -E "$h/sshd.log" \
    </dev/null >>"$h/sshd.log" 2>&1 3>&- 8>&- 9>&-
}

# Stop host I's sshd and everything running in its sessions.
stop_sshd() {
  local i=$1 pid kids
  pid=$(sshd_pid "$i") || {
    rm -f -- "$DIR/h$i/sshd.pid"
    return 0
  }
  kids=$(descendants "$pid")
  log "h$i: stopping sshd ($pid)"
  # shellcheck disable=SC2086
  terminate 10 "$pid" $kids
  rm -f -- "$DIR/h$i/sshd.pid"
}

ssh_to() {
  local i=$1
  shift
  ssh -F /dev/null -n -p "$PORT" -i "$DIR/id_ed25519" \
    -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none \
    -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$DIR/known_hosts" \
    -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=5 -o LogLevel=ERROR \
    "root@$(addr "$i")" "$@"
}

# Wait until host I lets us in and `docker` there reaches its own engine.
wait_sshd() {
  local i=$1 h start=$SECONDS out="" rc
  h=$(hdir "$i")
  while :; do
    rc=0
    out=$(ssh_to "$i" docker info --format '{{.DockerRootDir}}' 2>&1) || rc=$?
    [ "$rc" -ne 0 ] || break
    if [ "$rc" -ne 255 ]; then # logged in, but docker failed there
      printf '%s\n' "$out" >&2
      die "h$i: 'docker info' over SSH failed (exit $rc)"
    fi
    if [ $((SECONDS - start)) -ge 3 ] && ! sshd_pid "$i" >/dev/null; then
      printf 'ssh: %s\n' "$out" >&2
      tail_log "$h/sshd.log"
      die "h$i: sshd exited during startup (log: $h/sshd.log)"
    fi
    if [ $((SECONDS - start)) -ge 30 ]; then
      printf 'ssh: %s\n' "$out" >&2
      tail_log "$h/sshd.log"
      die "h$i: no SSH login to root@$(addr "$i"):$PORT within 30s (log: $h/sshd.log)"
    fi
    sleep 0.1
  done
  [ "$out" = "$h/docker" ] ||
    die "h$i: 'docker' over SSH reaches an engine with data root '$out', not $h/docker"
}

# ---------------------------------------------------------------- keys

fingerprint() { ssh-keygen -lf "$DIR/h$1/ssh_host_ed25519_key.pub" | awk '{print $2}'; }

new_host_key() {
  local i=$1 h
  h=$(hdir "$i")
  rm -f -- "$h/ssh_host_ed25519_key.new" "$h/ssh_host_ed25519_key.new.pub"
  ssh-keygen -q -t ed25519 -N '' -C "h$i" -f "$h/ssh_host_ed25519_key.new" >/dev/null
  mv -f -- "$h/ssh_host_ed25519_key.new.pub" "$h/ssh_host_ed25519_key.pub"
  mv -f -- "$h/ssh_host_ed25519_key.new" "$h/ssh_host_ed25519_key"
}

write_known_hosts() {
  local i
  for i in $(existing_hosts); do
    [ -f "$DIR/h$i/ssh_host_ed25519_key.pub" ] || continue
    printf '[%s]:%s %s\n' "$(addr "$i")" "$PORT" \
      "$(cut -d' ' -f1-2 "$DIR/h$i/ssh_host_ed25519_key.pub")"
  done >"$DIR/known_hosts.new"
  mv -f -- "$DIR/known_hosts.new" "$DIR/known_hosts"
}

# ---------------------------------------------------------------- commands

take_lock() {
  mkdir -p /run/lock
  exec 9>"$LOCK"
  flock -w 900 9 || die "another testhosts.sh holds $LOCK"
}

cmd_env() {
  local i first=1
  printf '{"dir": "%s", "key": "%s/id_ed25519", "image": "%s", "hosts": [' "$DIR" "$DIR" "$IMAGE"
  for i in $(existing_hosts); do
    local fp="" ssh_up=false docker_up=false frozen=false
    [ ! -f "$DIR/h$i/ssh_host_ed25519_key.pub" ] || fp=$(fingerprint "$i")
    ! sshd_pid "$i" >/dev/null || ssh_up=true
    ! dockerd_pid "$i" >/dev/null || docker_up=true
    [ ! -f "$DIR/h$i/frozen" ] || frozen=true
    [ "$first" -eq 1 ] || printf ', '
    first=0
    printf '{"name": "h%s", "host": "%s", "port": %s, "user": "root", ' "$i" "$(addr "$i")" "$PORT"
    printf '"docker_host": "unix://%s", "work_dir": "%s/h%s/work", ' "$(sock "$i")" "$DIR" "$i"
    printf '"fingerprint": "%s", "ssh_running": %s, "docker_running": %s, ' "$fp" "$ssh_up" "$docker_up"
    printf '"frozen": %s}' "$frozen"
  done
  printf ']}\n'
}

cmd_start() {
  local n=$1 i sum api pids=() p
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le $MAX_HOSTS ]] ||
    die "N must be 1..$MAX_HOSTS (got '$n')"
  [ "$(id -u)" -eq 0 ] || die "must run as root (dockerd, sshd for root)"
  install_missing
  take_lock
  if [ -d "$DIR" ] && [ ! -e "$DIR/$MARKER" ] && [ -n "$(ls -A -- "$DIR")" ]; then
    die "$DIR exists and is not a testhosts directory (no $MARKER)"
  fi
  mkdir -p -- "$DIR"
  chmod 755 "$DIR"
  : >"$DIR/$MARKER"

  if [ ! -f "$DIR/id_ed25519" ] || [ ! -f "$DIR/id_ed25519.pub" ]; then
    rm -f -- "$DIR/id_ed25519" "$DIR/id_ed25519.pub"
    ssh-keygen -q -t ed25519 -N '' -C gctl-testhosts -f "$DIR/id_ed25519" >/dev/null
  fi
  chmod 600 "$DIR/id_ed25519"
  cp -f -- "$DIR/id_ed25519.pub" "$DIR/authorized_keys"

  for ((i = 1; i <= n; i++)); do
    mkdir -p -- "$DIR/h$i/work"
    [[ -f $DIR/h$i/ssh_host_ed25519_key && -f $DIR/h$i/ssh_host_ed25519_key.pub ]] ||
      new_host_key "$i"
    sshd_pid "$i" >/dev/null || check_port_free "$i"
    start_dockerd "$i"
  done

  # Build the image while the engines come up.
  sum=$(image_sum)
  ensure_image_tar "$sum"
  for ((i = 1; i <= n; i++)); do wait_dockerd "$i"; done
  for ((i = 1; i <= n; i++)); do
    ensure_image "$i" "$sum" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || die "importing $IMAGE failed (see above)"; done

  for ((i = 1; i <= n; i++)); do
    api=$(dk "$i" version --format '{{.Server.APIVersion}}')
    if write_sshd_config "$i" "$api" && sshd_pid "$i" >/dev/null; then
      log "h$i: sshd_config changed, restarting sshd"
      stop_sshd "$i"
    fi
  done
  write_known_hosts
  for ((i = 1; i <= n; i++)); do start_sshd "$i"; done
  pids=()
  for ((i = 1; i <= n; i++)); do
    wait_sshd "$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || die "a host did not come up (see above)"; done
  log "hosts h1..h$n ready"
  cmd_env >&3
}

cmd_ssh_stop() {
  local i
  host_index "$1"
  i=$HI
  take_lock
  stop_sshd "$i"
}

cmd_ssh_start() {
  local i
  host_index "$1"
  i=$HI
  take_lock
  start_sshd "$i"
  wait_sshd "$i"
}

cmd_freeze() {
  local i pid
  host_index "$1"
  i=$HI
  take_lock
  pid=$(sshd_pid "$i") || die "h$i: sshd is not running"
  # shellcheck disable=SC2046
  printf '%s\n' "$pid" $(descendants "$pid") >>"$DIR/h$i/frozen"
  # shellcheck disable=SC2046
  kill -STOP $(sort -u "$DIR/h$i/frozen") 2>/dev/null || true
  log "h$i: froze sshd and its sessions ($(sort -u "$DIR/h$i/frozen" | wc -l) processes)"
}

cmd_thaw() {
  local i
  host_index "$1"
  i=$HI
  take_lock
  [ -f "$DIR/h$i/frozen" ] || return 0
  # shellcheck disable=SC2046
  kill -CONT $(sort -u "$DIR/h$i/frozen") 2>/dev/null || true
  rm -f -- "$DIR/h$i/frozen"
  log "h$i: thawed"
}

cmd_engine_stop() {
  local i pid
  host_index "$1"
  i=$HI
  take_lock
  pid=$(dockerd_pid "$i") || return 0
  log "h$i: stopping dockerd ($pid), its containers left to it"
  terminate 60 "$pid"
}

cmd_engine_start() {
  local i
  host_index "$1"
  i=$HI
  take_lock
  start_dockerd "$i"
  wait_dockerd "$i"
}

cmd_rekey() {
  local i old
  host_index "$1"
  i=$HI
  take_lock
  old=$(fingerprint "$i")
  stop_sshd "$i"
  new_host_key "$i"
  write_known_hosts
  start_sshd "$i"
  wait_sshd "$i"
  log "h$i: host key $old -> $(fingerprint "$i")"
}

# Processes of ours that pid files may have missed: dockerd, containerd,
# shims, sshd, runc whose command line names DIR (or our exec base).
stray_pids() {
  local f pid exe cmd
  for f in /proc/[0-9]*; do
    pid=${f#/proc/}
    [ "$pid" != "$$" ] || continue
    exe=$(readlink "$f/exe" 2>/dev/null) || continue
    case ${exe##*/} in
      dockerd* | containerd* | sshd* | runc* | docker-proxy*) ;; # "* (deleted)" too
      *) continue ;;
    esac
    cmd=$(tr '\0' ' ' 2>/dev/null <"$f/cmdline") || continue
    if [[ $cmd == *"$DIR/"* ]] || { [ -n "$EXEC_BASE" ] && [[ $cmd == *"$EXEC_BASE/"* ]]; }; then
      printf '%s\n' "$pid"
    fi
  done
}

unmount_under() {
  local base=$1 mp
  [ -n "$base" ] || return 0
  # Deepest first; mountinfo field 5 is the mount point.
  awk -v b="$base" '$5 == b || index($5, b "/") == 1 { print length($5), $5 }' /proc/self/mountinfo |
    sort -rn | cut -d' ' -f2- | while read -r mp; do
    umount -- "$mp" 2>/dev/null || umount -l -- "$mp" 2>/dev/null || log "could not unmount $mp"
  done
}

cmd_stop() {
  [ -d "$DIR" ] || return 0
  [ -e "$DIR/$MARKER" ] || die "$DIR is not a testhosts directory (no $MARKER); not touching it"
  take_lock
  local i strays pids=() p
  for i in $(existing_hosts .); do
    # shellcheck disable=SC2046
    [ ! -f "$DIR/h$i/frozen" ] || kill -CONT $(cat "$DIR/h$i/frozen") 2>/dev/null || true
  done
  for i in $(existing_hosts .); do stop_sshd "$i"; done
  for i in $(existing_hosts .); do
    stop_dockerd "$i" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  strays=$(stray_pids)
  if [ -n "$strays" ]; then
    log "stopping leftover processes: ${strays//$'\n'/ }"
    # shellcheck disable=SC2086
    terminate 10 $strays
  fi
  unmount_under "$DIR"
  unmount_under "$EXEC_BASE"
  for ((i = 1; i <= MAX_HOSTS; i++)); do
    local cg d
    cg=$(cgroup_parent "$i")
    for d in /sys/fs/cgroup"$cg" /sys/fs/cgroup/*"$cg"; do
      [ ! -d "$d" ] || rmdir -- "$d" 2>/dev/null || true
    done
  done
  rm -rf -- "$DIR" || die "could not remove $DIR"
  [ -z "$EXEC_BASE" ] || rm -rf -- "$EXEC_BASE"
  log "stopped; removed $DIR"
}

usage() {
  die "usage: $0 start [N] | env | ssh-stop|ssh-start|rekey|freeze|thaw|engine-stop|engine-start NAME | stop"
}

[ $# -ge 1 ] || usage
# Everything but the final JSON goes to stderr; fd 3 is the real stdout.
exec 3>&1 1>&2
case $1 in
  start)
    [ $# -le 2 ] || usage
    cmd_start "${2:-2}"
    ;;
  env)
    [ $# -eq 1 ] || usage
    cmd_env >&3
    ;;
  ssh-stop | ssh-start | rekey | freeze | thaw | engine-stop | engine-start)
    [ $# -eq 2 ] || usage
    "cmd_${1//-/_}" "$2"
    ;;
  stop)
    [ $# -eq 1 ] || usage
    cmd_stop
    ;;
  *) usage ;;
esac

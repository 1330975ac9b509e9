#!/usr/bin/env bash
# Many light gctl test hosts on this machine, for scale runs (bench/scale.py).
#
#   scripts/scalehosts.sh start N [ENGINES]  # hosts s1..sN sharing ENGINES engines (default 2)
#   scripts/scalehosts.sh env                # JSON description of the hosts (as testhosts.sh env)
#   scripts/scalehosts.sh freeze NAME...     # SIGSTOP hosts' sshd and sessions, at once
#   scripts/scalehosts.sh thaw NAME...       # SIGCONT them
#   scripts/scalehosts.sh stop               # stop everything, delete the state dir
#
# Each light host sI is a real sshd of its own, answering as root at its own loopback
# address 127.4.X.Y (X = I / 250, Y = I % 250 + 1) on port PORT, so the daemon opens one
# SSH connection per host as it would on a real cluster. Nothing else runs per host: the
# Docker engines are those of scripts/testhosts.sh's hosts h1..hENGINES (real dockerd,
# the test image loaded), started under DIR/engines on port PORT+1, and host sI uses
# engine h((I-1) % ENGINES + 1): gctl tells the nodes of one engine apart by its
# container labels. Hosts share one SSH host key (DIR/ssh_host_ed25519_key) and the
# engines' client key; each has its own work directory (DIR/sI/work).
#
# What the hosts run (sshd, sessions, agents, watchdogs, engines; not the jobs' containers,
# in Docker's own cgroups) runs in one CPU cgroup of default weight, named as DIR: all the
# hosts together weigh as much as the daemon's session, which keeps about half the machine
# when both want more. Without it, every SSH session is a session of its own, and the
# kernel's autogroups share the CPU fairly between sessions (whatever their nice): a
# thousand hosts' sessions would leave the daemon a thousandth.
#
# State lives in DIR=${GCTL_SCALEHOSTS_DIR:-/tmp/gctl-scalehosts}; PORT is
# ${GCTL_SCALEHOSTS_PORT:-2322}. Needs root. Cost, measured on this project's 2-core CI
# machine: see README.md's "Many light hosts" section (every run: bench/scale-runs.md).
set -Eeuo pipefail

HERE=$(cd -- "$(dirname -- "$0")" && pwd -P)
DIR=${GCTL_SCALEHOSTS_DIR:-/tmp/gctl-scalehosts}
DIR=${DIR%/}
PORT=${GCTL_SCALEHOSTS_PORT:-2322}
MAX_HOSTS=2000
[[ $DIR =~ ^/[A-Za-z0-9._+/-]+$ && $DIR != *..* && ${#DIR} -le 40 ]] ||
  { echo "scalehosts: error: GCTL_SCALEHOSTS_DIR must be a short absolute path" >&2; exit 1; }
[[ $PORT =~ ^[0-9]+$ && $PORT -ge 1024 && $PORT -lt 65535 ]] ||
  { echo "scalehosts: error: GCTL_SCALEHOSTS_PORT must be 1024..65534" >&2; exit 1; }
ENGINES_DIR=$DIR/engines
CG_NAME=${DIR##*/} # the cgroup's name: the state dir's, so two harnesses keep apart

log() { printf 'scalehosts: %s\n' "$*" >&2; }
die() {
  printf 'scalehosts: error: %s\n' "$*" >&2
  exit 1
}

addr() { printf '127.4.%s.%s' $(($1 / 250)) $(($1 % 250 + 1)); }
testhosts() { GCTL_TESTHOSTS_DIR=$ENGINES_DIR GCTL_TESTHOSTS_PORT=$((PORT + 1)) "$HERE/testhosts.sh" "$@"; }
hosts() { [ -f "$DIR/count" ] && seq 1 "$(cat "$DIR/count")"; }
engines() { cat "$DIR/engines.count"; }

# The pid of host I's sshd, if it runs.
sshd_pid() {
  local pid
  pid=$(cat "$DIR/s$1/sshd.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && grep -qF "$DIR/s$1/sshd_config" "/proc/$pid/cmdline" 2>/dev/null || return 1
  printf '%s' "$pid"
}

write_config() {
  local i=$1 engine=$2 h=$DIR/s$1
  mkdir -p "$h/work"
  cat >"$h/sshd_config" <<EOF
# Written by scripts/scalehosts.sh: light host s$i (engine h$engine).
ListenAddress $(addr "$i"):$PORT
HostKey $DIR/ssh_host_ed25519_key
PidFile $h/sshd.pid
AuthorizedKeysFile $ENGINES_DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
X11Forwarding no
MaxStartups 100
MaxSessions 100
LogLevel ERROR
SetEnv DOCKER_HOST=unix://$ENGINES_DIR/h$engine/docker.sock SHLVL=1
EOF
}

# The CPU cgroup the hosts run in (default weight: cgroup v2's cpu.weight 100, v1's
# cpu.shares 1024), made if need be; its path. Fails where there is no cgroup to make.
host_cgroup() {
  local cg
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    cg=/sys/fs/cgroup/$CG_NAME
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
      echo +cpu >/sys/fs/cgroup/cgroup.subtree_control || return 1
    mkdir -p "$cg" && echo 100 >"$cg/cpu.weight" || return 1
  else
    cg=/sys/fs/cgroup/cpu/$CG_NAME
    [ -d "${cg%/*}" ] && mkdir -p "$cg" && echo 1024 >"$cg/cpu.shares" || return 1
  fi 2>/dev/null
  printf '%s' "$cg"
}

cmd_start() {
  local n=$1 e=$2 i started=0
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le $MAX_HOSTS ]] || die "N must be 1..$MAX_HOSTS"
  [[ $e =~ ^[0-9]+$ && $e -ge 1 && $e -le 16 ]] || die "ENGINES must be 1..16"
  [ "$(id -u)" -eq 0 ] || die "must run as root (sshd for root, dockerd)"
  if [ -f "$DIR/count" ] && [ "$(cat "$DIR/count")" != "$n" ]; then
    die "$DIR holds $(cat "$DIR/count") hosts; stop them first"
  fi
  mkdir -p "$DIR"
  log "starting $e engine(s) under $ENGINES_DIR"
  local cg
  cg=$(host_cgroup) || log "warning: no CPU cgroup of its own: the hosts share the CPU with the daemon"
  echo "$e" >"$DIR/engines.count"
  [ -f "$DIR/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/ssh_host_ed25519_key"
  echo "$n" >"$DIR/count"
  mkdir -p /run/sshd
  local began=$SECONDS
  started=$(
    [ -z "$cg" ] || echo "$BASHPID" >"$cg/cgroup.procs" # what starts here inherits it
    testhosts start "$e" >/dev/null || exit 1
    for i in $(seq 1 "$n"); do
      sshd_pid "$i" >/dev/null && continue
      write_config "$i" $(((i - 1) % e + 1))
      setsid -f /usr/sbin/sshd -f "$DIR/s$i/sshd_config" -E "$DIR/s$i/sshd.log" </dev/null \
        >/dev/null 2>&1
      started=$((started + 1))
    done
    echo "$started"
  )
  for i in $(seq 1 "$n"); do # every host answers before we say so
    local tries=0
    until (exec 5<>"/dev/tcp/$(addr "$i")/$PORT") 2>/dev/null; do
      tries=$((tries + 1))
      [ "$tries" -lt 300 ] || die "s$i did not listen on $(addr "$i"):$PORT (see $DIR/s$i/sshd.log)"
      sleep 0.1
    done
  done
  log "$n host(s) up ($started started) in $((SECONDS - began)) s"
  cmd_env
}

cmd_env() {
  local i first=1 fp e
  fp=$(ssh-keygen -l -E sha256 -f "$DIR/ssh_host_ed25519_key.pub" | awk '{print $2}')
  e=$(engines)
  printf '{"dir": "%s", "key": "%s/id_ed25519", "image": "gctl-test/train:1", "hosts": [' \
    "$DIR" "$ENGINES_DIR"
  for i in $(hosts); do
    [ "$first" -eq 1 ] || printf ', '
    first=0
    printf '{"name": "s%s", "host": "%s", "port": %s, "user": "root", ' "$i" "$(addr "$i")" "$PORT"
    printf '"docker_host": "unix://%s/h%s/docker.sock", ' "$ENGINES_DIR" $(((i - 1) % e + 1))
    printf '"work_dir": "%s/s%s/work", "fingerprint": "%s"}' "$DIR" "$i" "$fp"
  done
  printf ']}\n'
}

# The pids of processes ROOT... and all their descendants, from one look at the process table.
trees() {
  ps -e -o pid=,ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
    { parent[$1] = $2 }
    END {
      do {
        grew = 0
        for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
      } while (grew)
      for (p in keep) print p
    }'
}

# SIGSTOP or SIGCONT hosts NAME...: each one's sshd and every process of its sessions, all
# hosts at once (one look at the process table, one kill), as a switch failing would. Looked
# at again until no process is new: a session may fork between the look and the signal.
signal_hosts() {
  local sig=$1 name pid round roots=() fresh
  local -A sent=()
  shift
  for name in "$@"; do
    [[ $name =~ ^s([0-9]+)$ ]] || die "bad host name '$name' (expected s1..sN)"
    pid=$(sshd_pid "${BASH_REMATCH[1]}") || die "$name does not run"
    roots+=("$pid")
  done
  for round in 1 2 3 4 5; do
    fresh=()
    for pid in $(trees "${roots[@]}"); do
      [ -n "${sent[$pid]:-}" ] || { fresh+=("$pid") && sent[$pid]=1; }
    done
    [ "${#fresh[@]}" -gt 0 ] || return 0
    kill "-$sig" "${fresh[@]}" 2>/dev/null || true # a session may end meanwhile
  done
}

cmd_stop() {
  # Watchdogs first: with their daemon gone, each asks its (shared) engine every second.
  pkill -KILL -f "^/usr/bin/python3 $DIR/s[0-9]+/work/.*/watchdog.pyc" 2>/dev/null || true
  pkill -CONT -f "sshd -f $DIR/s[0-9]+/sshd_config" 2>/dev/null || true
  pkill -KILL -f "sshd -f $DIR/s[0-9]+/sshd_config" 2>/dev/null || true
  [ ! -d "$ENGINES_DIR" ] || testhosts stop
  rm -rf -- "$DIR"
  rmdir "/sys/fs/cgroup/$CG_NAME" "/sys/fs/cgroup/cpu/$CG_NAME" 2>/dev/null || true
}

case "${1:-}" in
  start) cmd_start "${2:-}" "${3:-2}" ;;
  env) cmd_env ;;
  freeze) shift && signal_hosts STOP "$@" ;;
  thaw) shift && signal_hosts CONT "$@" ;;
  stop) cmd_stop ;;
  *)
    sed -n '2,9p' "$0" >&2
    exit 2
    ;;
esac

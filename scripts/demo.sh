#!/usr/bin/env bash
# gctl's main job, for real, on this machine: two local hosts (each a real sshd
# and a real dockerd, with 2 emulated V100 GPUs), a SQLite store, `gctl daemon`,
# and a mixed workload with more jobs than GPUs: an elastic job, a high-priority
# job, light jobs that share a GPU well, and plain training jobs. The events show
# time slicing, packing, growing/shrinking and a migration as they happen; a
# summary ends it. Needs root (it starts sshd and dockerd, installing Debian's
# openssh-server and docker.io when missing). About 3 minutes once the packages
# are in. Everything it starts is stopped at the end, also on Ctrl-C; the store
# and the daemon's log stay in $GCTL_DEMO_DIR (default /tmp/gctl-demo) to look
# at. GCTL_DEMO_KEEP=1 leaves the hosts running; stop them later with
#   GCTL_TESTHOSTS_DIR=/tmp/gctl-demo/hosts GCTL_TESTHOSTS_PORT=2230 scripts/testhosts.sh stop
# The demo's hosts are its own (port 2230), apart from the test suite's (2222).
# GPUs are emulated: no figure printed here comes from a real GPU.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

DEMO=${GCTL_DEMO_DIR:-/tmp/gctl-demo}
export GCTL_TESTHOSTS_DIR=$DEMO/hosts GCTL_TESTHOSTS_PORT=${GCTL_DEMO_PORT:-2230}
export GCTL_DB=$DEMO/gctl.db GCTL_CONFIG=$DEMO/gctl.toml
GCTL=.venv/bin/gctl
TRAIN=(python3 /opt/gctl/train.py)
IMAGE=gctl-test/train:1
DAEMON_PID="" FOLLOW_PID=""

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() {
  printf 'demo: error: %s\n' "$*" >&2
  exit 1
}
cleanup() {
  set +e
  [ -z "$FOLLOW_PID" ] || kill "$FOLLOW_PID" 2>/dev/null
  if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" && wait "$DAEMON_PID" 2>/dev/null
  fi
  if [ "${GCTL_DEMO_KEEP:-0}" = 1 ]; then
    echo "demo: hosts left running; stop them with:"
    echo "  GCTL_TESTHOSTS_DIR=$GCTL_TESTHOSTS_DIR GCTL_TESTHOSTS_PORT=$GCTL_TESTHOSTS_PORT scripts/testhosts.sh stop"
  elif [ -d "$GCTL_TESTHOSTS_DIR" ]; then
    scripts/testhosts.sh stop 2>>"$DEMO/testhosts.log" >/dev/null ||
      echo "demo: stopping the hosts failed; see $DEMO/testhosts.log"
  fi
  [ ! -d "$DEMO" ] || echo "demo: the store and the daemon's log are in $DEMO (rm -rf $DEMO to remove)"
}

[ "$(id -u)" -eq 0 ] || die "the demo starts local sshd and dockerd hosts, so it must run as root" \
  "(scripts/demo-sim.sh runs the simulator comparison without root)"

say "Setting up gctl in .venv"
scripts/setup-venv.sh

if [ -d "$GCTL_TESTHOSTS_DIR" ]; then # a previous run's hosts, if it was stopped hard
  scripts/testhosts.sh stop >/dev/null 2>&1 || true
fi
rm -rf -- "$DEMO"
mkdir -p -- "$DEMO"
trap cleanup EXIT
trap 'exit 130' INT TERM

say "Two local hosts, each a real sshd + dockerd (log: $DEMO/testhosts.log)"
scripts/testhosts.sh start 2 >"$DEMO/hosts.json" 2>"$DEMO/testhosts.log" ||
  die "could not start the hosts; see $DEMO/testhosts.log"
$GCTL init --no-config
# Register each host with its pinned SSH host key (never trusted blindly).
.venv/bin/python - "$DEMO/hosts.json" "$GCTL" <<'PY'
import json, shlex, subprocess, sys
env = json.loads(open(sys.argv[1]).read().splitlines()[-1])
for h in env["hosts"]:
    args = [
        "node", "add", h["name"], "--host", h["host"], "--port", str(h["port"]),
        "--user", h["user"], "--key", env["key"], "--work-dir", h["work_dir"],
        "--host-key-fingerprint", h["fingerprint"], "--emulate-gpus", "2xV100-16GB",
    ]
    print("+ gctl", shlex.join(args), flush=True)
    subprocess.run([sys.argv[2], *args], check=True, stdout=subprocess.DEVNULL)
PY
$GCTL node probe >/dev/null
$GCTL node ls

say "gctl daemon (short periods for the demo; log: $DEMO/daemon.log)"
$GCTL daemon --tick 0.5 --heartbeat-every 1 --introspect-every 2 --reconcile-every 10 \
  --grace 15 -o quantum=4 -o reconsider_every=4 -o grow_idle_period=3 \
  >"$DEMO/daemon.log" 2>&1 &
DAEMON_PID=$!
sleep 1
kill -0 "$DAEMON_PID" 2>/dev/null || die "the daemon did not start: $(tail -n 3 "$DEMO/daemon.log")"

say "Events as they happen (gctl events --follow)"
$GCTL events --follow &
FOLLOW_PID=$!

submit() { $GCTL submit --parsable --image "$IMAGE" "$@"; }
kinds() { $GCTL events --json | grep -oE '"kind":"[a-z.]+"'; }
wait_for() { # wait_for SECONDS KINDS: until an event of a kind matching KINDS (ERE) is recorded
  local end=$((SECONDS + $1))
  while ((SECONDS < end)); do
    kinds | grep -qE "\"($2)\"" && return 0
    sleep 0.5
  done
  return 1
}
unfinished() { $GCTL queue -h -o %i | tr -d ' '; }

# 1. An elastic job alone on the cluster grows onto a second GPU...
ELASTIC=$(submit --name elastic --gpus 1 --elastic 1:2 -- "${TRAIN[@]}" --steps 900 --step-time 0.1)
wait_for 30 job.grow || echo "(the elastic job did not grow within 30 s)"

# 2. ...then work arrives and it shrinks back at once. Two light jobs (20 % of
#    each step on the GPU): the second finds no free GPU and takes turns, until
#    the daemon, having profiled both, packs it onto the first one's GPU.
LIGHT=$(submit --name light-1 --env GCTL_EMULATED_UTIL=20 -- \
  "${TRAIN[@]}" --steps 500 --step-time 0.1 --gpu-busy 0.2)
submit --name urgent --priority high -- "${TRAIN[@]}" --steps 300 --step-time 0.1 >/dev/null
submit --name train-1 -- "${TRAIN[@]}" --steps 200 --step-time 0.1 >/dev/null
submit --name light-2 --env GCTL_EMULATED_UTIL=20 -- \
  "${TRAIN[@]}" --steps 500 --step-time 0.1 --gpu-busy 0.2 >/dev/null
wait_for 60 job.pack || echo "(no pack within 60 s)"

# 3. More jobs than GPUs: the nodes time-slice (the high-priority job is never
#    the one frozen).
for i in 2 3 4; do
  submit --name "train-$i" -- "${TRAIN[@]}" --steps 200 --step-time 0.1 >/dev/null
done

# 4. Once the others are done, an operator moves the elastic job to the other
#    node: it checkpoints, its directory is copied over SSH, and it resumes there.
end=$((SECONDS + 300))
while ((SECONDS < end)) && [ -n "$(unfinished)" ] && [ "$(unfinished)" != "$ELASTIC" ]; do
  sleep 0.5
done
FROM=$($GCTL queue -t R -h -o "%i %N" | awk -v j="$ELASTIC" '$1 == j {print $2}')
if [ -n "$FROM" ]; then
  TO=$([ "$FROM" = h1 ] && echo h2 || echo h1)
  echo "+ gctl migrate $ELASTIC --to $TO"
  $GCTL migrate "$ELASTIC" --to "$TO"
  wait_for 60 'intent\.(done|failed)' || echo "(the migration was not carried out within 60 s)"
else
  echo "(the elastic job is not running now; no migration shown)"
fi

end=$((SECONDS + 300))
while ((SECONDS < end)) && [ -n "$(unfinished)" ]; do sleep 0.5; done
sleep 1.5 # the follower's last lines
kill "$FOLLOW_PID" 2>/dev/null || true
wait "$FOLLOW_PID" 2>/dev/null || true
FOLLOW_PID=""
[ -z "$(unfinished)" ] || echo "demo: some jobs had not finished in time"

say "Summary"
$GCTL queue -t all -o "%.5i %.9j %.9p %.10T %.8M %R"
$GCTL events --json | .venv/bin/python scripts/demo_summary.py
echo
PACKED=$($GCTL events --json | grep -oE '"kind":"job\.pack","job_id":[0-9]+' | head -n 1 | grep -oE '[0-9]+$' || true)
echo "+ gctl why ${PACKED:-$LIGHT}    # a light job"
$GCTL why "${PACKED:-$LIGHT}"
echo
echo "+ gctl show job $ELASTIC    # the elastic job"
$GCTL show job "$ELASTIC"
echo
echo "+ gctl logs $ELASTIC -n 3    # its output, kept on its node when its container went"
$GCTL logs "$ELASTIC" -n 3 || echo "(its output is not kept yet)"
echo
echo "+ gctl acct -a    # what each job used, as sacct (GPU-hours while running)"
$GCTL acct -a

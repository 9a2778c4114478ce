#!/usr/bin/env bash
# PolyTTS entry point for people and supervisors (launchd, systemd).
#
#   ./run.sh          set up the virtual environment and the default model, then serve (restarting on failure);
#                     the PyTorch backend's requirements too on GPU hosts (see serving_requirements)
#   ./run.sh test     set up, then run the whole test suite (extra arguments go to pytest)
#   ./run.sh setup    set up only
#
# Serving restarts the server after a non-zero exit, with a backoff of 1 s doubling to 60 s (reset once a run
# lasted 60 s), and stops after exit 0 (a clean stop). SIGTERM/SIGINT stop the server and this script.
set -uo pipefail
cd "$(dirname "$0")"

VENV=${POLYTTS_VENV:-.venv}
PYTHON=${PYTHON:-python3}

say() { printf 'run.sh: %s\n' "$*" >&2; }

install() {  # install a requirements file (plus pip options) into the venv unless unchanged since the last install
  local requirements=$1 stamp="$VENV/.installed-$(basename "$1")" sum
  shift
  sum=$(cat "$requirements" requirements*.txt | sha256sum | cut -d' ' -f1)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] && return 0
  say "installing $requirements into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" -r "$requirements" || return 1
  echo "$sum" >"$stamp"
}

setup() {
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV" || return 1
  fi
  install "$1" || { say "pip install -r $1 failed"; return 1; }
  if [ "$1" = requirements-torch.txt ] || [ "$1" = requirements-dev.txt ]; then  # voxcpm, without its declared dependencies
    install requirements-nodeps.txt --no-deps || { say "pip install --no-deps -r requirements-nodeps.txt failed"; return 1; }
  fi
  "$VENV/bin/python" -m models.assemble || { say "the default model could not be assembled (see above)"; return 1; }
}

serve() {
  local delay=1 child= sleeper= code started stopping=0
  # On SIGTERM/SIGINT: remember to stop and pass the signal on to whatever runs now (server or backoff sleep).
  # `child`/`sleeper` are cleared once reaped, so a stale pid (possibly reused) is never signalled.
  trap 'stopping=1; for pid in $child $sleeper; do kill -TERM "$pid" 2>/dev/null; done' TERM INT
  while [ "$stopping" = 0 ]; do
    started=$(date +%s)
    "$VENV/bin/python" server.py &
    child=$!
    # A signal that arrived before `child` was set found no server to stop; stop this one now.
    [ "$stopping" = 1 ] && kill -TERM "$child" 2>/dev/null
    wait "$child"; code=$?
    # A trapped signal interrupts wait; wait again for the server's own exit.
    while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done
    child=
    [ "$stopping" = 1 ] && break
    if [ "$code" = 0 ]; then say "server exited cleanly"; exit 0; fi
    [ $(($(date +%s) - started)) -ge 60 ] && delay=1
    say "server exited with status $code; restarting in ${delay}s"
    sleep "$delay" &
    sleeper=$!
    [ "$stopping" = 1 ] && kill -TERM "$sleeper" 2>/dev/null
    wait "$sleeper"
    sleeper=
    delay=$((delay * 2 > 60 ? 60 : delay * 2))
  done
  say "stopped"
  exit 0
}

# The PyTorch engines (requirements-torch.txt) are installed where they will run: when asked for explicitly, or on a
# host with an NVIDIA GPU; the MLX engines (requirements-mlx.txt) on Apple Silicon or when POLYTTS_RUNTIME=mlx.
# Everywhere else the embedded ONNX default needs only requirements.txt.
serving_requirements() {
  local backend=${POLYTTS_KOKORO_BACKEND:-auto} runtime=${POLYTTS_RUNTIME:-auto}
  if [ "$backend" = torch ] || [ "$runtime" = cuda ] || [ "$runtime" = mps ]; then
    echo requirements-torch.txt
  elif [ "$runtime" = mlx ] || { [ "$runtime" = auto ] && [ "$(uname -sm)" = "Darwin arm64" ]; }; then
    echo requirements-mlx.txt
  elif [ "$backend" = auto ] && nvidia-smi -L >/dev/null 2>&1; then
    echo requirements-torch.txt
  else
    echo requirements.txt
  fi
}

case "${1:-serve}" in
  serve) setup "$(serving_requirements)" || exit 1; serve ;;
  test) shift; setup requirements-dev.txt || exit 1; exec "$VENV/bin/python" -m pytest "$@" ;;
  setup) setup requirements-dev.txt ;;
  *) say "usage: ./run.sh [serve|test [pytest args]|setup]"; exit 2 ;;
esac

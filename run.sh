#!/usr/bin/env bash
# PolyTTS entry point for people and supervisors (launchd, systemd).
#
#   ./run.sh          set up the serving environment (.venv) and the default model, then serve (restarting on
#                     failure); the PyTorch backend's requirements too on GPU hosts (see serving_requirements)
#   ./run.sh test     set up the test environment (.venv-test: serving, PyTorch and MLX engines, test tools), then
#                     run the checks below, then the whole test suite, its test files shared out among parallel
#                     workers (pytest-xdist, one per CPU; see test_workers); extra arguments go to pytest:
#                     `-m "unit or http"` runs the in-process tiers alone, `-m "(unit or http) and not slow"` the
#                     quick loop (docs/testing.md), `-n 0` runs serially
#   ./run.sh check    set up the test environment (as `test` does, without the model), then only the lint, format
#                     and type checks (ruff check, ruff format --check, mypy), as the pre-commit hooks do
#   ./run.sh setup    set up the serving environment only
#
# Serving restarts the server after a non-zero exit, with a backoff of 1 s doubling to 60 s (reset once a run
# lasted 60 s), and stops after exit 0 (a clean stop) or 2 (an invalid setting). SIGTERM/SIGINT stop the server (it
# drains first; a second request later stops it at once) and this script.
set -uo pipefail
cd "$(dirname "$0")"

# Serving and testing use separate environments, so running the tests never changes the engines a node serves.
VENV=${POLYTTS_VENV:-.venv}
TEST_VENV=${POLYTTS_TEST_VENV:-.venv-test}
PYTHON=${PYTHON:-python3}

say() { printf 'run.sh: %s\n' "$*" >&2; }

# What each requirements tier brings, and roughly how long its first install takes on a 2-core machine with a warm
# package cache (a first download adds to it); shown so that a long silent pip run is not mistaken for a hang.
describe() {
  case $(basename "$1") in
    requirements.txt) echo "the server and the Kokoro ONNX default (about 1 minute)" ;;
    requirements-torch.txt) echo "PyTorch, Kokoro on PyTorch and VoxCPM2 (about 3 minutes; several GB on CUDA hosts)" ;;
    requirements-mlx.txt) echo "MLX and mlx-audio (about 1 minute)" ;;
    requirements-openvino.txt) echo "OpenVINO for Kokoro's OpenVINO routes (POLYTTS_KOKORO_ONNX_ROUTE; about 180 MB)" ;;
    requirements-dev.txt) echo "every engine and the test tools (about 4 minutes)" ;;
    requirements-nodeps.txt) echo "voxcpm, qwen-tts-hf, dots.tts and CosyVoice without their unused dependencies (seconds)" ;;
    *) echo "$1" ;;
  esac
}

install() {  # install a requirements file (plus pip options) into the venv unless unchanged since the last install
  local requirements=$1 stamp="$VENV/.installed-$(basename "$1")" sum started
  shift
  sum=$(cat "$requirements" requirements*.txt | sha256sum | cut -d' ' -f1)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$sum" ] && return 0
  say "installing $requirements into $VENV: $(describe "$requirements")"
  started=$(date +%s)
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@" -r "$requirements" || return 1
  say "installed $requirements in $(($(date +%s) - started))s"
  echo "$sum" >"$stamp"
}

# OpenVINO (about 180 MB) is installed for Kokoro's OpenVINO routes only: asked for by name, or `auto` (the default)
# on a processor that does bf16 in hardware; int8 does not use it.
openvino_route() {
  case ${POLYTTS_KOKORO_ONNX_ROUTE:-auto} in
    openvino-*) return 0 ;;
    auto) grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null ;;
    *) return 1 ;;
  esac
}

# Where a route names OpenVINO, a failure to install it or derive its float graph stops the setup; under `auto` the
# node serves on int8 instead (as the backend does when the route cannot load), saying so.
openvino_optional() {
  [ "${POLYTTS_KOKORO_ONNX_ROUTE:-auto}" = auto ] && say "Kokoro serves on its int8 route instead of OpenVINO's bf16"
}

environment() {  # the venv with a requirements tier installed
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV"
    "$PYTHON" -m venv "$VENV" || return 1
  fi
  install "$1" || { say "pip install -r $1 failed"; return 1; }
  if [ "$1" != requirements-mlx.txt ] && [ "$1" != requirements-dev.txt ] && openvino_route; then
    install requirements-openvino.txt || { say "pip install -r requirements-openvino.txt failed"; openvino_optional || return 1; }
  fi
  if [ "$1" = requirements-torch.txt ] || [ "$1" = requirements-dev.txt ]; then  # voxcpm, without its declared dependencies
    install requirements-nodeps.txt --no-deps || { say "pip install --no-deps -r requirements-nodeps.txt failed"; return 1; }
  fi
}

setup() {  # the environment, a valid configuration and the default model
  environment "$1" || return $?
  # Invalid settings exit 2: `python -m settings` printed which, and that is all there is to say.
  "$VENV/bin/python" -m settings || return $?
  # Exit 2 is a setting models.assemble reads itself (where the model goes), named by it already.
  "$VENV/bin/python" -m models.assemble || {
    local code=$?
    [ "$code" = 2 ] || say "the default model could not be assembled (see above)"
    return "$code"
  }
  # The bf16 route's float graph, derived here once (about 8 s) rather than at the server's first load.
  if [ "$1" != requirements-mlx.txt ] && openvino_route; then
    "$VENV/bin/python" -m models.float_graph || {
      say "Kokoro's float graph for OpenVINO could not be derived (see above); POLYTTS_KOKORO_ONNX_ROUTE=int8 serves without it"
      openvino_optional || return 1
    }
  fi
}

serve() {
  local delay=1 child= sleeper= code started stopping=0
  # On SIGTERM/SIGINT: remember to stop and pass the signal on to whatever runs now (server or backoff sleep), as
  # SIGTERM (background jobs of a script ignore SIGINT). Every signal is passed on, so a supervisor that signals only
  # this script reaches the server; one Ctrl+C reaches the server from the terminal too, and the server takes
  # signals that close together as one stop request (a drain), a later one as a second (stop at once).
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
    # An invalid setting (exit 2, named by the server) stays invalid however often the server restarts.
    if [ "$code" = 2 ]; then say "server exited with status 2 (invalid configuration); not restarting"; exit 2; fi
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

checks() {  # lint, format and type checks (configured in pyproject.toml): `check` alone, and before the test suite
  local started=$(date +%s)
  "$VENV/bin/ruff" check . || { say "ruff check failed"; return 1; }
  "$VENV/bin/ruff" format --check . || { say "ruff format --check failed (run: $VENV/bin/ruff format .)"; return 1; }
  "$VENV/bin/mypy" || { say "mypy failed"; return 1; }
  say "lint, format and type checks passed in $(($(date +%s) - started))s"
}

# Test files run in parallel, each file whole on one worker (its module fixtures, a server or an app, start once), one
# worker per CPU: more oversubscribes the cores, which the inference-bound and timing tests pay for. Files are handed
# out in collection order (--no-loadscope-reorder), the end-to-end ones first: few tests each but the longest files,
# so they do not all land at the end (xdist would otherwise hand out the files with the most tests first).
test_workers() {
  nproc 2>/dev/null || echo 1
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
  serve) setup "$(serving_requirements)" || exit $?; serve ;;
  test)
    shift; VENV=$TEST_VENV; setup requirements-dev.txt || exit $?; checks || exit 1
    # Bytecode kept in the test environment's own folder, never beside the sources, even where PYTHONDONTWRITEBYTECODE
    # is set: each worker's assertion-rewritten test modules and each of the ~100 processes the tests start would
    # otherwise compile the same sources again (about half of a worker's collection, 0.2 CPU-s a server start).
    export PYTHONPYCACHEPREFIX="$VENV/pycache"; unset PYTHONDONTWRITEBYTECODE
    exec "$VENV/bin/python" -m pytest -n "$(test_workers)" --dist loadfile --no-loadscope-reorder "$@" ;;
  check) VENV=$TEST_VENV; environment requirements-dev.txt || exit $?; checks ;;
  setup) setup "$(serving_requirements)" ;;
  *) say "usage: ./run.sh [serve|test [pytest args]|check|setup]"; exit 2 ;;
esac

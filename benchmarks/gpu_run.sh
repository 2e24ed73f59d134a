#!/usr/bin/env bash
# The whole device run, as one command on a lent GPU machine (docs/guides/gpu.md; DEVELOPERS.md says when):
#
#     bash benchmarks/gpu_wheels.sh                      # here, once: .whl/ (what the device lacks)
#     (device) bash benchmarks/gpu_run.sh                # there: writes gpu.json, gpu.md, logs into $OUT
#     bash benchmarks/gpu_run.sh --device cpu --quick    # here: the same run in about 2 minutes (a test runs it)
#
# Options: --device cuda|cpu (default cuda), --quick (short stages, small shapes), --out DIR (default $OUT, else
# benchmarks/out/gpu), --stages LIST (comma-separated, of tests, learner, maze_wide, maze_dcd, procgen_bigfish;
# default all: a rerun of what a first run showed). LEARNER_ARGS and WIDE_ENVS in the environment replace the
# learner benchmark's arguments and the wide maze run's envs. Stages, each under its own time limit so that one that hangs cannot spend the lease:
#   1. set-up: the carried wheels (.whl/, if the device lacks gymnasium) into a folder on PYTHONPATH, and levelray
#      without dependencies: its parts linked into one `levelray` package there (no build, no setuptools needed)
#   2. the CUDA tests (`pytest -m gpu tests/test_gpu.py`: skipped on a machine without CUDA)
#   3. benchmarks/gpu_learner.py: learner updates, actor steps, host-to-device copies
#   4. the inline fast path on maze:13x13 with LSTM-256, wide (4096 envs) and at DCD's shapes (32 envs x 256
#      steps), with nvidia-smi sampling the GPU's utilisation
#   5. the main job's network on procgen BigFish inline (if procgen imports: its wheel travels in .whl/)
# then benchmarks/gpu_report.py writes gpu.json and gpu.md and prints the page. Under 9 minutes on the device.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda QUICK=0 DIR=${OUT:-} STAGES=tests,learner,maze_wide,maze_dcd,procgen_bigfish
while [ $# -gt 0 ]; do
  case $1 in
    --stages) STAGES=${2:?--stages needs a comma-separated list}; shift 2 ;;
    --device) DEVICE=${2:?--device needs cuda or cpu}; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --out) DIR=${2:?--out needs a folder}; shift 2 ;;
    *) echo "gpu_run.sh: unknown argument '$1' (expected --device cuda|cpu, --quick, --out DIR, --stages LIST)" >&2
       exit 2 ;;
  esac
done
case $DEVICE in cuda|cpu) ;; *) echo "gpu_run.sh: --device must be cuda or cpu, got '$DEVICE'" >&2; exit 2 ;; esac
DIR=${DIR:-benchmarks/out/gpu}
mkdir -p "$DIR"
WORK=$(mktemp -d)
LOG="$DIR/gpu_run.log"
: > "$LOG"
PY=${PYTHON:-python3}
# PYTHONSAFEPATH: `python -m` would put the working directory first on sys.path, and its levelray/ (the package's
# top folder alone) would hide the linked package below
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 PYTHONSAFEPATH=1

say() { echo "gpu_run: $*" | tee -a "$LOG"; }
wanted() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# stage NAME SECONDS CMD...: run CMD under a limit (SIGINT first: a training run then stops with a checkpoint),
# its output into the log; records the exit code and the seconds it took.
stage() {
  local name=$1 limit=$2 start rc
  shift 2
  wanted "$name" || [ "$name" = wheels ] || return 0
  start=$(date +%s)
  say "[$name] $* (limit ${limit}s)"
  timeout -s INT -k 15 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  echo "{\"stage\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - start ))}" >> "$WORK/stages.jsonl"
  say "[$name] rc=$rc after $(( $(date +%s) - start ))s"
}

# -- 1. set-up ------------------------------------------------------------------------------------------------
SITE="$WORK/site"
mkdir -p "$SITE/levelray"
if ! "$PY" -c 'import gymnasium' 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  stage wheels 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl
fi
cp levelray/*.py "$SITE/levelray/"
for part in contracts policy actors learner level_service replay_service families deploy; do
  ln -s "$PWD/$part" "$SITE/levelray/$part"
done
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c 'import levelray.deploy.cli' >> "$LOG" 2>&1 || say "levelray does not import: see the log"

if [ "$QUICK" = 1 ]; then
  # a record every second, and time for several after a start that a loaded machine makes slow: the rates are
  # taken between the first and the last record, so a run stopped just after its first report would have none
  T_TESTS=100 T_LEARNER=90 T_WIDE=20 T_DCD=20 T_FISH=20 FISH_ENVS=16 DEFAULT_WIDE=64 DEFAULT_LEARNER=--quick REPORT_S=1
else
  T_TESTS=150 T_LEARNER=170 T_WIDE=100 T_DCD=45 T_FISH=45 FISH_ENVS=256 DEFAULT_WIDE=4096 DEFAULT_LEARNER="--budget 90"
  REPORT_S=5
fi
WIDE_ENVS=${WIDE_ENVS:-$DEFAULT_WIDE}
read -r -a LEARNER_ARGS <<< "${LEARNER_ARGS:-$DEFAULT_LEARNER}"
# procgen's libenv.so links libGL and X11's client libraries: carried in .whl/lib/ where the machine lacks them,
# and put on the library path of the procgen stage alone
GL_PATH="${LD_LIBRARY_PATH:-}"
[ -d .whl/lib ] && GL_PATH="$PWD/.whl/lib${GL_PATH:+:$GL_PATH}"

# -- 2. CUDA tests --------------------------------------------------------------------------------------------
stage tests "$T_TESTS" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_learner_host_reads.py tests/test_appo.py \
  --junitxml "$WORK/pytest.xml"

# -- 3. learner benchmark -------------------------------------------------------------------------------------
stage learner "$T_LEARNER" "$PY" -m benchmarks.gpu_learner --device "$DEVICE" --json "$WORK/gpu_learner.json" \
  "${LEARNER_ARGS[@]}"

# -- 4./5. training runs on the inline backend ----------------------------------------------------------------
# train NAME SECONDS ARGS...: `levelray train` for SECONDS (then Ctrl-C: it stops cleanly), GPU sampled meanwhile
train() {
  local name=$1 limit=$2 sampler=""
  shift 2
  wanted "$name" || return 0
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 \
      > "$WORK/util-$name.csv" 2>/dev/null &
    sampler=$!
  fi
  stage "$name" "$limit" "$PY" -m levelray.deploy.cli train --backend inline --device "$DEVICE" \
    --metrics-port 0 --report-interval "$REPORT_S" --total-steps 100000000000 --run-dir "$WORK/runs/$name" "$@"
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
}
MAZE=(--env maze:13x13 --num-levels 0 --level-strategy random --lstm-size 256 --num-actors 1 --batch-size 1)
train maze_wide "$T_WIDE" "${MAZE[@]}" --envs-per-actor "$WIDE_ENVS" --unroll-length 20
train maze_dcd "$T_DCD" "${MAZE[@]}" --envs-per-actor 32 --unroll-length 256
if ! wanted procgen_bigfish; then
  :
elif LD_LIBRARY_PATH="$GL_PATH" "$PY" -c 'from procgen import ProcgenGym3Env; ProcgenGym3Env(num=1, env_name="bigfish")' \
    >> "$LOG" 2>&1; then
  LD_LIBRARY_PATH="$GL_PATH" train procgen_bigfish "$T_FISH" --env procgen:bigfish --num-actors 1 --envs-per-actor "$FISH_ENVS"
else
  say "procgen_bigfish skipped: procgen does not start here (the log says why; its wheel and libraries travel in" \
      ".whl/: bash benchmarks/gpu_wheels.sh)"
  echo "procgen_bigfish: procgen does not start on this machine (gpu_run.log says why)" >> "$WORK/skipped.txt"
fi

# -- the report -----------------------------------------------------------------------------------------------
cp "$WORK/gpu_learner.json" "$DIR/" 2>/dev/null
cp "$WORK/pytest.xml" "$DIR/" 2>/dev/null
"$PY" -m benchmarks.gpu_report --work "$WORK" --out "$DIR"

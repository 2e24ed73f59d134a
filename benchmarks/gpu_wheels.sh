#!/usr/bin/env bash
# What a lent GPU machine lacks, as wheels in .whl/ for `benchmarks/gpu_run.sh` to install there.
#
#     bash benchmarks/gpu_wheels.sh        # here, once per checkout (needs the package index); ~49 MiB
#
# The device (Python 3.12, torch + CUDA, numpy 2, numba, msgpack, pyyaml, prometheus-client, tensorboard, imageio,
# cloudpickle) has no Ray and no gymnasium, and nothing can be fetched there. The inline backend needs gymnasium
# (every env family module imports it); procgen (the main job's BigFish) needs procgen-mirror's cp312 wheel, gym3,
# the old gym it imports and cffi. Versions are constraints.txt's. numpy is not carried: the device's numpy 2 runs
# everything the device run uses (measured here in a Python 3.12 venv with numpy 2.5: the maze and procgen inline
# runs and the CUDA-free part of the run, `bash benchmarks/gpu_run.sh --device cpu --quick`). gym has no wheel on
# the index, so it is built here from its source (pure Python). procgen's libenv.so links libGL and X11's client
# libraries, which the device image lacks: the ones `ldd` finds here, outside procgen's own bundled libraries and
# the C runtime, are copied into .whl/lib/ (gpu_run.sh puts it on LD_LIBRARY_PATH for procgen; they need a glibc at
# least this machine's, Debian 12's 2.36). .whl/ is listed in .git/info/exclude: never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -i "^$1==" constraints.txt | head -1; }
mkdir -p .whl .git/info
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PY=${PYTHON:-python3}
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform any)
for name in gymnasium Farama-Notifications procgen-mirror gym3 gym-notices cffi pycparser; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl "$(pin "$name")"
done
ls .whl/gym-0.26.2-*.whl >/dev/null 2>&1 || "$PY" -m pip wheel -q --no-deps -w .whl "$(pin gym)"
mkdir -p .whl/lib
libenv=$(mktemp -d)
unzip -q -o .whl/procgen_mirror-*.whl -d "$libenv"  # whole: libenv.so finds its bundled libraries by RPATH
ldd "$libenv/procgen/data/prebuilt/libenv.so" | awk '/=> \// {print $1, $3}' \
  | grep -Ev '^(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s)\.so|procgen_mirror\.libs' \
  | while read -r name path; do cp -L "$path" ".whl/lib/$name"; done
rm -rf "$libenv"
du -sh .whl .whl/lib
# A device call sends the tracked files, the untracked ones git does not ignore and .whl/, 64 MiB at most. A large
# tracked folder (a sweep's archive) can push it over: say so here, with the way to leave such a folder behind.
sizes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -b 2>/dev/null)
travel=$(( $(awk '{s += $1} END {print s}' <<< "$sizes") + $(du -sb .whl | cut -f1) ))
echo "a device call would send $(( travel / 1048576 )) MiB (limit 64)"
if [ "$travel" -gt $(( 64 * 1048576 )) ]; then
  echo "over the limit: leave the largest tracked folder behind for the call, then take it back:" >&2
  echo "  git rm -r -q --cached DIR && echo /DIR/ >> .git/info/exclude   # before" >&2
  echo "  git reset -q -- DIR && sed -i '\\#^/DIR/\$#d' .git/info/exclude   # after" >&2
  awk '{split($2, p, "/"); s[p[1] "/" p[2]] += $1} END {for (d in s) print s[d], d}' <<< "$sizes" | sort -rn \
    | head -3 >&2
fi

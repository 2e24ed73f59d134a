#!/usr/bin/env bash
# On the device: the IMPALA CNN's actor step at five batches fp32/bf16, then BigFish inline A/B:
# HEAD (old, 9e9a3d1: bf16 inference on cuda; .ab/old is its `git archive`) against the working tree (new: fp32), interleaved old, new, old, new.
set -u
ROOT=$PWD
cp -r .whl .ab/old/.whl
LEARNER_ARGS="--models impala_cnn,minigrid_cnn --budget 0 --seconds 2 --inference-batches 16,64,256,1024,4096" \
  bash benchmarks/gpu_run.sh --stages learner --out $OUT/infer > /dev/null 2>&1
grep -A40 "actor step" $OUT/infer/gpu.md | head -40
for round in 1 2; do
  for arm in old new; do
    tree=$ROOT; [ $arm = old ] && tree=$ROOT/.ab/old
    (cd $tree && bash benchmarks/gpu_run.sh --stages procgen_bigfish --out $OUT/fish-$arm-$round > /dev/null 2>&1)
    echo "== round $round $arm: $(grep procgen_bigfish $OUT/fish-$arm-$round/gpu.md | tail -1)"
  done
done

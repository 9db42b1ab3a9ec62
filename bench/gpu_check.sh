#!/usr/bin/env bash
# The GPU check, one short script for a machine with a CUDA build of torch (docs/gpu.md):
#   bash bench/gpu_check.sh [TRIALS]        (writes its log and JSON to $GPU_CHECK_OUT, else a temp dir)
# 1. torch, the GPU and its driver; 2. the CUDA-marked tests (the GPU path against the plain loop,
# host syncs, optimize and --workers on cuda); 3. seed-mlp studies on cuda and cpu, fp16 and bf16, with
# trials/s from the user's side; 4. --workers 2 placement; 5. a deep-mlp-large study on cuda;
# 6. P2 on cuda: our trainer against the original example's loop, and the same with a fused optimizer;
# 7. population mode on cuda: a --population 64 study through the command, and P5 (trials/s of
# populations of 64 and 256 against ordinary trials; target >= 20x). Its CUDA equivalence with the
# trainer is one of the CUDA-marked tests of step 2.
set -uo pipefail
trials=${1:-30}
py=${PYTHON:-python3}
out=${GPU_CHECK_OUT:-$(mktemp -d)}
work=$(mktemp -d)
mkdir -p "$out"
status=0
step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }

step "torch and the GPU"
$py - <<'PY'
import torch
print("torch", torch.__version__, "built for CUDA", torch.version.cuda, "available:", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device: {p.name}, {p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}, "
          f"{torch.cuda.device_count()} visible")
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

step "CUDA-marked tests"
$py -m pytest -q -s -m cuda -p no:cacheprovider tests/test_cuda.py > "$work/cuda-tests.txt" 2>&1 || status=1
tail -30 "$work/cuda-tests.txt"; cp "$work/cuda-tests.txt" "$out/"

step "seed-mlp: $trials trials per run, whole runs timed (start-up included)"
for device in cuda cpu; do
  for dtype in float16 bfloat16; do
    start=$(date +%s.%N)
    if ! $py -m search.optimize --trials "$trials" --device "$device" --amp-dtype "$dtype" \
        --storage "sqlite:///$work/$device-$dtype.db" --quiet --best-out "$work/$device-$dtype.json" \
        > "$work/$device-$dtype.txt" 2>&1; then
      echo "FAILED: $device $dtype"; tail -5 "$work/$device-$dtype.txt"; status=1; continue
    fi
    end=$(date +%s.%N)
    $py - "$work/$device-$dtype.json" "$device" "$dtype" "$trials" "$start" "$end" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
device, dtype, n, start, end = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
best = next(iter(data["best"].values()))
print(f"{device:5} {dtype:9} {n / (end - start):6.2f} trials/s whole run ({end - start:5.1f} s)  "
      f"train {data['mean_train_seconds'] * 1000:7.1f} ms/trial  best {best['value']:.4f}  "
      f"on {best['device']}  nonfinite {data['nonfinite_trials']}")
PY
  done
done
cp "$work/cuda-float16.txt" "$out/seed-mlp-cuda-summary.txt" 2>/dev/null || true

step "--workers 2: where trials ran"
if $py -m search.optimize --trials "$trials" --workers 2 --storage "sqlite:///$work/workers.db" --quiet \
    > "$work/workers.txt" 2>&1; then
  $py - "$work/workers.db" <<'PY'
import collections, sys, optuna
trials = optuna.load_study(storage=f"sqlite:///{sys.argv[1]}", study_name="seed-mlp").get_trials()
print("--workers 2:", dict(collections.Counter(t.user_attrs.get("device") for t in trials)))
PY
else
  echo "FAILED: --workers 2"; tail -5 "$work/workers.txt"; status=1
fi

step "deep-mlp-large on cuda"
large_trials=${LARGE_TRIALS:-20}
begin=$SECONDS
if $py -m search.optimize --task deep-mlp-large --trials "$large_trials" --device cuda \
    --storage "sqlite:///$work/large.db" --quiet > "$work/large.txt" 2>&1; then
  cat "$work/large.txt"
  echo "deep-mlp-large: $large_trials trials in $((SECONDS - begin)) s (whole run)"
  cp "$work/large.txt" "$out/deep-mlp-large-summary.txt"
else
  echo "FAILED: deep-mlp-large"; tail -5 "$work/large.txt"; status=1
fi

step "P2 on cuda: our trainer against the original example's loop (median of interleaved runs)"
$py -m bench --only P2 --device cuda --repeats 40 2>&1 | tail -8 || status=1
$py - <<'PY' || status=1
# The same with fused SGD: GradScaler.step then leaves the skip to the optimizer on the device and
# does not read found_inf on the host every step (torch's _step_supports_amp_scaling).
import dataclasses, statistics, time, torch
from search.tasks.seed_mlp import build
from search.training._trainer import ScalerConfig, train
device = torch.device("cuda")
problem = build(42).to(device)
fused = dataclasses.replace(problem, make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1, fused=True))
cfg = ScalerConfig(2.0**16, 2.0, 0.5, 2000)
times = {"task's SGD": [], "fused SGD": []}
for _ in range(3):
    train(problem, cfg, epochs=30); train(fused, cfg, epochs=30)
for _ in range(40):
    for name, p in (("task's SGD", problem), ("fused SGD", fused)):
        t0 = time.perf_counter(); r = train(p, cfg, epochs=30); times[name].append(time.perf_counter() - t0)
a, b = statistics.median(times["task's SGD"]), statistics.median(times["fused SGD"])
same = train(problem, cfg, epochs=30).loss_curve == train(fused, cfg, epochs=30).loss_curve
print(f"trainer on cuda, 30 steps: task's SGD {a * 1000:.1f} ms, fused SGD {b * 1000:.1f} ms ({a / b:.2f}x); "
      f"identical loss curves: {same}")
PY

step "population mode on cuda: a --population 64 study (whole run), then P5"
begin=$SECONDS
if $py -m search.optimize --population 64 --trials 133 --device cuda --storage "sqlite:///$work/population.db" \
    --quiet > "$work/population.txt" 2>&1; then
  head -3 "$work/population.txt"
  echo "--population 64: 133 trials in $((SECONDS - begin)) s (whole run, start-up included)"
  cp "$work/population.txt" "$out/population-summary.txt"
else
  echo "FAILED: --population 64"; tail -5 "$work/population.txt"; status=1
fi
$py -m bench --only P5 --device cuda --p5-populations 64,256 2>&1 | tail -8 || status=1

rm -rf "$work"
echo
echo "gpu_check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status

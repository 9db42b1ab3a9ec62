#!/usr/bin/env bash
# GPU check: a short study on cuda and the same on cpu, printing device, dtype and trials/s.
# Run on a machine with a CUDA build of torch:  bash bench/gpu_check.sh [TRIALS]
set -euo pipefail
trials=${1:-30}
work=$(mktemp -d)
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda available:", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
PY
for device in cuda cpu; do
  for dtype in float16 bfloat16; do
    start=$(date +%s.%N)
    python -m search.optimize --trials "$trials" --device "$device" --amp-dtype "$dtype" \
      --storage "sqlite:///$work/$device-$dtype.db" --quiet --best-out "$work/$device-$dtype.json" \
      > "$work/$device-$dtype.txt"
    end=$(date +%s.%N)
    python - "$work/$device-$dtype.json" "$device" "$dtype" "$trials" "$start" "$end" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
device, dtype, n, start, end = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
best = next(iter(data["best"].values()))
print(f"{device:5} {dtype:9} {n / (end - start):6.2f} trials/s (incl. start-up)  "
      f"train {data['mean_train_seconds'] * 1000:7.1f} ms/trial  best {best['value']:.4f}  "
      f"trial device {best['device']}  nonfinite {data['nonfinite_trials']}")
PY
  done
done
# --workers on the GPUs: worker i trains on cuda:(i mod device_count); print where trials ran.
python -m search.optimize --trials "$trials" --workers 2 --storage "sqlite:///$work/workers.db" --quiet \
  > "$work/workers.txt"
python - "$work/workers.db" <<'PY'
import collections, sys, optuna
trials = optuna.load_study(storage=f"sqlite:///{sys.argv[1]}", study_name="seed-mlp").get_trials()
print("--workers 2:", dict(collections.Counter(t.user_attrs.get("device") for t in trials)))
PY
rm -rf "$work"

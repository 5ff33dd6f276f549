#!/usr/bin/env bash
# The seed-cloud benchmark on one node with 4 NVIDIA GPUs (A100-80GB): four vLLM servers (prefix caching
# and cached-token reporting on), one kvroute router per policy over them, then `npm run bench` with
# cold caches per run. Everything started here is stopped on exit. Run from the repository root after
# `npm ci`, with vLLM installed (`pip install vllm`) and the model downloadable or cached.
#
#   MODEL=Qwen/Qwen2.5-14B-Instruct SCENARIO=seed-cloud bench/scripts/a100-vllm.sh [extra bench flags]
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-14B-Instruct}
SCENARIO=${SCENARIO:-seed-cloud}
GPUS=${GPUS:-0,1,2,3}
LOG_DIR=${LOG_DIR:-bench/results/a100-logs}
POLICIES=(roundrobin leastloaded prefixaware cacheaware)
mkdir -p "$LOG_DIR"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

wait_ready() { # url
  for _ in $(seq 1 900); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 1; done
  echo "timed out waiting for $1" >&2; return 1
}

backends=()
index=0
IFS=',' read -ra gpu_list <<<"$GPUS"
for gpu in "${gpu_list[@]}"; do
  port=$((8000 + index))
  echo "vLLM on GPU $gpu → :$port ($MODEL)"
  CUDA_VISIBLE_DEVICES=$gpu vllm serve "$MODEL" --port "$port" \
    --enable-prefix-caching --enable-prompt-tokens-details --gpu-memory-utilization 0.90 \
    >"$LOG_DIR/vllm-$gpu.log" 2>&1 &
  pids+=($!)
  backends+=("http://127.0.0.1:$port")
  index=$((index + 1))
done
BACKENDS=$(IFS=','; echo "${backends[*]}")
for url in "${backends[@]}"; do wait_ready "$url/health"; done

routers=()
ops_ports=()
index=0
for policy in "${POLICIES[@]}"; do
  port=$((9001 + index))
  ops_port=$((9101 + index)) # each router's /metrics and full /readyz, apart from the API port
  extra=()
  [[ $policy == prefixaware ]] && extra=(--saturation-inflight 4) # the seed's valve for its policy
  npx tsx apps/router/src/main.ts --port "$port" --ops-port "$ops_port" --backends "$BACKENDS" --policy "$policy" "${extra[@]}" >"$LOG_DIR/router-$policy.log" 2>&1 &
  pids+=($!)
  routers+=("$policy=http://127.0.0.1:$port")
  ops_ports+=("$ops_port")
  wait_ready "http://127.0.0.1:$port/readyz"
  index=$((index + 1))
done
ROUTERS=$(IFS=','; echo "${routers[*]}")
OPS_PORTS=$(IFS=','; echo "${ops_ports[*]}")

npm run bench -- --scenario "$SCENARIO" --router "$ROUTERS" --router-ops-port "$OPS_PORTS" --backends "$BACKENDS" --salt-runs --ignore-eos "$@"

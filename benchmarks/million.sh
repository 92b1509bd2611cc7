#!/usr/bin/env bash
# The store workloads of `memcore bench` at 1,000,000 random 384-d records (the long run of issue 6).
# Chroma is left out by default: its embedded client inserts about 1,000 records/s here (17 minutes
# for the load alone) and its filtered HNSW queries take seconds at this size; add it with
# STORES='memory://,jsonl://{tmp},qdrant://{tmp},chroma://{tmp}'. Needs about 12 GB of RAM.
set -euo pipefail
cd "$(dirname "$0")/.."
make --quiet .venv/.memcore-installed
STORES=${STORES:-'memory://,jsonl://{tmp},qdrant://{tmp}'}
exec .venv/bin/memcore bench --stores "$STORES" --sizes 1000000 --queries 100 --agent-loop 0 \
    --out "${OUT:-bench-1m}" "$@"

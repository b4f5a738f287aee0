#!/usr/bin/env bash
# The README's first command: installs dependencies if missing, builds, runs
# `segd demo` (arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec ./build/segd demo "$@"

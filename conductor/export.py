"""Export one user's note tree as a zip (``tandem notes export``)."""

from __future__ import annotations

import os
import tempfile
import zipfile
from contextlib import suppress
from pathlib import Path

from conductor.atomic import FILE_MODE, TEMP_SUFFIX, ensure_dir, fsync_dir


def export_tree(user_dir: Path, user: str, dest: Path) -> Path:
    """Zip every file of ``user_dir`` as ``<user>/...`` into ``dest`` (mode 0600).

    The zip is written to a temp file first, so a failed export never leaves half a zip.
    """
    ensure_dir(dest.parent)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for dirpath, dirnames, files in os.walk(user_dir):
                    dirnames.sort()
                    for name in sorted(files):
                        if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                            continue
                        path = Path(dirpath) / name
                        arcname = Path(user) / path.relative_to(user_dir)
                        archive.write(path, arcname.as_posix())
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, FILE_MODE)
        os.replace(tmp_name, dest)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(dest.parent)
    return dest

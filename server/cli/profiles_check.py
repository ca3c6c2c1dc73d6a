"""`tandem profiles check`: every profile loaded strictly, and a hybrid model's cache
settings checked against what vLLM will set, without a GPU and without a download.

A hybrid-attention model (Qwen3.5/3.6, Qwen3-Next: Gated DeltaNet layers with a recurrent
state, one full-attention layer in four) shares one page size between its attention blocks
and its recurrent states, so vLLM raises the block size until a block's attention pages
hold one state (`Platform._align_hybrid_block_size` in vllm/platforms/interface.py):

    block = alignment * ceil(state bytes / (alignment * attention bytes per token))

where a state is the conv state (kernel - 1 columns of the q, k and v channels, in the
model's dtype) plus the SSM state (value heads x key dim x value dim, float32 on Qwen3.5,
whose config says `mamba_ssm_dtype`, and on vLLM's CPU path), and the alignment is the
attention kernel's (16 on CUDA's FlashAttention, 128 on vLLM's CPU attention). The prefix
cache is reused a whole block at a time, and in align mode only the state at a block
boundary is kept: a profile says the block size it will get and is checked here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import ceil
from pathlib import Path

from engine.profiles import Profile, ProfileError, load_profile, profile_names

ALIGNMENT = {"cuda": 16, "cpu": 128}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class HybridShape:
    """What sets a hybrid model's page sizes (its config.json's text part)."""

    kv_heads: int
    head_dim: int
    key_heads: int  # linear_num_key_heads
    value_heads: int  # linear_num_value_heads
    key_dim: int = 128
    value_dim: int = 128
    conv_kernel: int = 4
    ssm_bytes: int = 4  # float32: Qwen3.5's mamba_ssm_dtype, and vLLM's CPU GDN backend

    @classmethod
    def of(cls, config: dict) -> HybridShape:
        text = config.get("text_config", config)
        return cls(kv_heads=text["num_key_value_heads"], head_dim=text["head_dim"],
                   key_heads=text["linear_num_key_heads"],
                   value_heads=text["linear_num_value_heads"],
                   key_dim=text["linear_key_head_dim"], value_dim=text["linear_value_head_dim"],
                   conv_kernel=text["linear_conv_kernel_dim"])

    def block_size(self, device: str, dtype_bytes: int = 2) -> int:
        """The block size vLLM sets for this model on `device` (bfloat16 KV and conv)."""
        conv = (self.conv_kernel - 1) * (2 * self.key_heads * self.key_dim
                                         + self.value_heads * self.value_dim) * dtype_bytes
        ssm = self.value_heads * self.key_dim * self.value_dim * self.ssm_bytes
        per_token = 2 * self.kv_heads * self.head_dim * dtype_bytes  # K and V, one layer
        align = ALIGNMENT[device]
        return align * ceil((conv + ssm) / (align * per_token))


# The published Qwen3.5/3.6 shapes the GPU profiles serve (their config.json's text_config):
# no download needed to check a profile. Qwen3.6-27B has Qwen3.5-27B's.
PUBLISHED: dict[str, HybridShape] = {
    "Qwen/Qwen3.5-4B": HybridShape(kv_heads=4, head_dim=256, key_heads=16, value_heads=32),
    "Qwen/Qwen3.5-9B": HybridShape(kv_heads=4, head_dim=256, key_heads=16, value_heads=32),
    "Qwen/Qwen3.5-27B": HybridShape(kv_heads=4, head_dim=256, key_heads=16, value_heads=48),
}


def shape_of(profile: Profile, home: Path) -> HybridShape | None:
    """The profile's model's shape: an embedded model's own config, else the table."""
    if profile.builtin_model:
        from engine.model_builder import BUILTIN_MODELS

        spec = BUILTIN_MODELS.get(profile.builtin_model)
        return HybridShape.of(spec.config) if spec and "layer_types" in spec.config else None
    name = profile.model.removesuffix("-FP8")  # an FP8 checkpoint keeps the shape
    if name in PUBLISHED:
        return PUBLISHED[name]
    local = Path(profile.model) / "config.json"
    return HybridShape.of(json.loads(local.read_text())) if local.is_file() else None


def check_profile(profile: Profile, home: Path) -> list[str]:
    """What is wrong with a profile's hybrid settings (nothing for a dense model)."""
    shape = shape_of(profile, home)
    if shape is None and profile.mamba_cache_mode == "none":
        return []
    if shape is None:
        return [f"mamba_cache_mode: align, but {profile.model} is not a hybrid model this "
                "check knows (an embedded one, a local folder, or one of "
                f"{', '.join(PUBLISHED)})"]
    problems = []
    if profile.mamba_cache_mode != "align":
        problems.append("a hybrid model: its prefix cache needs mamba_cache_mode: align "
                        "(vLLM's default 'none' keeps no state to reuse)")
    dtype = DTYPE_BYTES.get(profile.dtype, 2)
    want = shape.block_size(profile.device, dtype)
    if profile.block_size != want:
        problems.append(f"block_size {profile.block_size}: vLLM sets {want} for this model "
                        f"on {profile.device} (a block's attention pages hold one recurrent "
                        "state); write that, since cache hits come a whole block at a time")
    return problems


def run_check(names: list[str], home: Path) -> int:
    """Print one line a profile; 1 when any profile is invalid or its settings are off."""
    failed = 0
    for name in names or profile_names():
        try:
            profile = load_profile(name)
        except ProfileError as exc:
            print(f"{name}: invalid: {exc}")
            failed += 1
            continue
        problems = check_profile(profile, home)
        shape = shape_of(profile, home)
        note = (f" (hybrid: block {profile.block_size}, align mode, chunked prefill)"
                if shape is not None and not problems else "")
        print(f"{name}: " + ("; ".join(problems) if problems else f"ok{note}"))
        failed += bool(problems)
    return 1 if failed else 0

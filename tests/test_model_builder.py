"""The embedded model builds without a download, and a build is skipped only when intact."""

from __future__ import annotations

import json
import shutil

from engine.model_builder import MANIFEST, ensure_model, is_intact


def test_a_second_build_is_skipped_when_the_model_is_intact(built_models):
    target = built_models / "tiny-qwen3"
    before = (target / MANIFEST).stat().st_mtime_ns
    messages: list[str] = []
    ensure_model(built_models.parent, "tiny-qwen3", messages.append)
    assert (target / MANIFEST).stat().st_mtime_ns == before
    assert any("already built" in m for m in messages)


def test_a_changed_or_missing_file_is_not_intact(built_models, tmp_path):
    copy = tmp_path / "tiny-qwen3"
    shutil.copytree(built_models / "tiny-qwen3", copy)
    assert is_intact(copy)
    config = json.loads((copy / "config.json").read_text())
    config["hidden_size"] = 256
    (copy / "config.json").write_text(json.dumps(config))
    assert not is_intact(copy)
    shutil.copy(built_models / "tiny-qwen3" / "config.json", copy / "config.json")
    assert is_intact(copy)
    (copy / "model.safetensors").unlink()
    assert not is_intact(copy)


def test_the_tiny_model_has_the_shape_the_cpu_attention_needs(built_models):
    config = json.loads((built_models / "tiny-qwen3" / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (128, 2, 64)
    assert config["vocab_size"] == 151936

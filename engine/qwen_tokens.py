"""Qwen3's special tokens at their real ids, shared by the model builder and the server."""

ENDOFTEXT = 151643
IM_START = 151644
IM_END = 151645
TOOL_CALL = 151657
TOOL_CALL_END = 151658
TOOL_RESPONSE = 151665
TOOL_RESPONSE_END = 151666
THINK = 151667
THINK_END = 151668

# (id, text, special): "special" tokens are dropped by decode(skip_special_tokens=True);
# Qwen marks the tool-call, tool-response, think and FIM markers as not special so they
# stay visible in decoded text, where the output parsers look for them.
SPECIAL_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)

# Qwen2/Qwen3 pre-tokenizer split (single digits, unlike GPT-4's \p{N}{1,3}).
PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

VOCAB_SIZE = 151936  # the embedding rows of every Qwen3 model (padded past the last token)

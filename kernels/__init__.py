"""Logits processors that run on the batch's logits inside vLLM's sampler (engine-core process).

They are loaded by fully-qualified name in the spawned engine-core process, so each lives in
an importable module and reads its per-request switches from `SamplingParams.extra_args`.
"""

SCRIPTED_OUTPUT = "kernels.scripted:ScriptedOutputProcessor"
TOOL_CALL_BAN = "kernels.tool_call_ban:ToolCallBanProcessor"

# Order matters: the ban runs after the scripted driver, so a script cannot force a banned token.
ALL = (SCRIPTED_OUTPUT, TOOL_CALL_BAN)

# Loaded in the worker process with the processors above: see kernels/lazy_logprobs.py.
from kernels.lazy_logprobs import install as _install_lazy_logprobs  # noqa: E402

_install_lazy_logprobs()

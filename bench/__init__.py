"""Tandem's bench: TTFT, decode, prefix reuse and background-turn preemption, per memory mode."""

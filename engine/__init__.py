"""The vLLM engine room: profiles, the embedded model builder, Engine and its scheduler."""

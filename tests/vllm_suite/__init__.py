"""vLLM's own OpenAI-server tests, run against `tandem serve` (see README.md here)."""

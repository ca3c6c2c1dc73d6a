"""vLLM's own OpenAI-server tests, run against `tandem serve` (docs/serving/openai.md)."""

"""The OpenAI-compatible HTTP server over LLMEngine (`llmbench serve`, `python -m refengine.server`)."""

"""Online serving: the async engine, the OpenAI-compatible server (the `serve` extra) and its metrics."""

"""Seeing inside a run: the profiler (`LLM(..., profile=True)`, `llm.profiler`), its timelines and report."""

from nvllm.profiling.profiler import NullProfiler, Profiler, make_profiler

__all__ = ["NullProfiler", "Profiler", "make_profiler"]

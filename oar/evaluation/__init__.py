"""Sampling responses (transformers or vLLM) and grading them on the benchmarks."""

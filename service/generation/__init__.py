"""LLM backends, answer prompts and the extractive fallback."""

"""Utility measurements of a model: next-token accuracy, perplexity, FIM line exact match."""

"""Corpus building: sources, filters, dedup, splits, manifests and the tokenizer."""

"""Pretraining of the embedded default code model."""

"""The Middle seam (DESIGN §3): everything above it is written once against `Middle`."""

from umbra.middle.protocol import Middle

__all__ = ["Middle"]

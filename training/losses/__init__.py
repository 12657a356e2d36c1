"""Training losses, one per file (sentence-transformers style)."""

from training.losses.symmetric_infonce import SymmetricInfoNCELoss, symmetric_infonce

__all__ = ["SymmetricInfoNCELoss", "symmetric_infonce"]

"""Bi-encoder, per-domain stores and federated search."""

"""fedqa: federated multi-product question answering (MKP-QA)."""

__version__ = "0.1.0"

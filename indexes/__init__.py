"""Loading and segmenting documents, and building per-domain index versions."""

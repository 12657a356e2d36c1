"""Training data: synthetic queries, relevance labels, hard negatives, cross-domain examples, splits."""

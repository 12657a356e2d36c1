"""The reranker: a cross-encoder that reads the question and each passage of the merged top-N together.

:mod:`service.reranking.params` holds what a reranker version fitted (the combination with the retrieval score,
the depth, the calibration of its score), :mod:`service.reranking.model` runs it (ONNX Runtime int8, or
PyTorch), :mod:`service.reranking.onnx_export` exports it and :mod:`service.reranking.loading` finds the version
that may serve the active index. Trained by :mod:`training.reranker` (``fedqa train reranker``).
"""

"""Evaluation: strategies compared on labelled questions with retrieval and LLM-judged metrics.

Modules: ``retrieval_metrics`` (Acc@Top1, Recall@k, MRR, routing), ``stats`` (means and 95% intervals),
``judges`` (the Judge over the LLM protocol, structured-output parsing, the MKP-QA relevancy and
faithfulness prompts), ``wixqa``, ``rageval``, ``ragxplain`` (the seeds' metric suites), ``runner``
(one evaluation over the pipeline), ``jobs`` (SQLite persistence and the background worker) and
``report`` (the HTML report). The CLI (``fedqa evaluate``) and ``/evaluate`` share all of it.
"""

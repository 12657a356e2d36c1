"""Feedback from use: who said which passage answered a question (or did not), and which questions the documentation
does not cover; stored in the home (:mod:`.store`) and turned into a review queue and labelled questions
(:mod:`.review`) for ``fedqa feedback list|export`` and ``GET /admin/feedback``; curators' verdicts (``fedqa feedback
confirm``, ``POST /admin/feedback/confirm``) are stored as trusted feedback.

Feedback does not change answers yet: it becomes labelled questions through ``fedqa feedback export``, and a refit on
them (``fedqa train router --queries``, ``fedqa train abstention --out-of-scope``) is what changes the service.
"""

"""Hard negatives that the current model scores like the positive are dropped (issue 10.6)."""

from __future__ import annotations

from service.retrieval.passage import Passage
from training.data.dataset import RetrieverExample
from training.data.negatives import drop_false_negatives


def test_negatives_scoring_within_the_margin_of_the_positive_are_dropped(encoder):
    passages = {
        "gold": Passage("gold", "ledger", "Refunds", "ledger/refunds", "To refund a payment, open the invoice and click Refund."),
        "dup": Passage("dup", "ledger", "Refunds", "ledger/refunds", "To refund a payment, open the invoice and click Refund."),
        "far": Passage("far", "ledger", "Fonts", "ledger/fonts", "The report header uses a serif font at twelve points."),
    }
    ex = RetrieverExample("q1", "how do I refund a payment", ["gold"], ["dup", "far"], "labelled")
    [kept], counts = drop_false_negatives([ex], passages, encoder.model, margin=0.05)
    assert kept.negatives == ["far"]  # "dup" answers the question as well as the gold passage does
    assert counts == {"margin": 0.05, "negatives_checked": 2, "negatives_dropped": 1}
    [strict], _ = drop_false_negatives([ex], passages, encoder.model, margin=-1.0)  # only negatives 1.0 above the positive
    assert strict.negatives == ["dup", "far"]

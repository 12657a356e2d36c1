"""Before any labelled question: a question naming a product searches it (the "not covered" fit of an ingest:
tests/integration/indexes/test_untrained_defaults.py)."""

from __future__ import annotations

from service.retrieval.strategies.fused import named_domains

_TOPICS = {
    "mailer": [
        ("Relaying", "Set relayhost to the mail hub of your provider to send all outgoing mail through it."),
        ("Aliases", "The aliases file maps local names to other addresses; run newaliases after editing it."),
        ("Queue", "The mailq command lists the messages waiting in the queue and why each is deferred."),
        ("Virtual domains", "Virtual alias domains accept mail for several domains and forward it to local users."),
        ("TLS", "Set the certificate and key files to offer STARTTLS to clients that connect on port 25."),
        ("Size limits", "The message size limit refuses messages larger than the configured number of bytes."),
    ],
    "balancer": [
        ("Health checks", "Add check to a server line to probe it every two seconds and take it out when it fails."),
        ("Timeouts", "timeout connect sets how long to wait for a connection to a server to succeed."),
        ("Stickiness", "A stick table keeps a client on the server it first reached, by source address or cookie."),
        ("Logging", "The log directive sends one line per request to syslog, with timers and status codes."),
        ("ACLs", "An access control list matches requests by path, header or address to choose a backend."),
        ("Statistics", "The stats page shows every server's state, sessions and errors in the browser."),
    ],
}


def test_a_product_named_in_the_question_is_the_one_searched_before_a_router_is_trained():
    domains = ["mailer", "balancer", "api-gateway", "db"]
    assert named_domains("How do I set relayhost in Mailer?", domains) == ["mailer"]
    assert named_domains("does the API gateway log to the balancer's syslog?", domains) == ["balancer", "api-gateway"]
    assert named_domains("How do I reset a password?", domains) == []
    assert named_domains("which db engine?", domains) == []  # a name under 3 characters is never taken as said


def test_a_fit_that_ranks_as_uis_still_searches_the_product_a_question_names():
    """The fit's guard stores parameters that rank as uis when no fused ranking beat it (manuals_dev with 60 labelled
    questions, both folds): the product the question names is then searched alone, as before a router is trained."""
    from service.retrieval.strategies import select
    from service.routing.fitted import RouterFitted
    from service.routing.fusion import FusionParams

    as_uis = FusionParams(w_prior=1.0, w_best=0.0, w_share=0.0, bias=0.0, sharpness=0.0, tau0=0.0, unsure=0.0, evidence_k=20)
    fitted = RouterFitted(fusion=as_uis)
    probs = {"mailer": 0.4, "balancer": 0.35, "db": 0.25}
    searched: list[list[str]] = []

    def search(domains, limit):  # noqa: ANN001, ANN202 - records what was searched; returns no hit
        searched.append(list(domains))
        return {d: [] for d in domains}

    named = select("fused", probs, list(probs), tau0=0.5, search=search, fitted=fitted, query="How do I set relayhost in mailer?")
    assert named.active == ["mailer"] and named.weights == {"mailer": 1.0}
    plain = select("fused", probs, list(probs), tau0=0.5, search=search, fitted=fitted, query="How do I set a relay host?")
    assert plain.active == list(probs)  # no product named: every domain, as uis
    assert as_uis.ranks_as_uis and not FusionParams.paper(0.5).ranks_as_uis

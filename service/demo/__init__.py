"""The demo knowledge base shipped with fedqa: four products of a fictional company."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
DOCS = DATA / "docs.jsonl"
QUERIES = DATA / "queries.jsonl"
OUT_OF_SCOPE = DATA / "out_of_scope.jsonl"  # generic questions the demo does not cover (written for fedqa)


def setup_demo(settings: "Settings", *, progress: bool = True, router_epochs: int = 8) -> list[str]:  # noqa: F821
    """Ingest the demo docs, train the router on the demo questions and fit the "not covered" decision
    (demo questions against the generic out-of-scope ones) when the home has none yet.

    Returns what was done, for the log.
    """
    from indexes.ingest import ingest
    from service.artifacts import Registry
    from service.queries import load_queries
    from training.router import train_and_activate

    registry = Registry(settings.home_dir)
    done = []
    if not registry.active()["index"]:
        report = ingest([DOCS], settings, progress=progress)
        done.append(f"ingested {sum(report.domains.values())} demo passages into {report.version}")
    if not registry.active()["router"]:
        version = train_and_activate(settings, load_queries(QUERIES), epochs=router_epochs, progress=progress)
        done.append(f"trained router {version} on the demo questions")
    from service.generation.abstention import abstention_path

    active = registry.active()
    path = abstention_path(registry, active["router"], active["index"])
    if path is not None and not path.is_file():
        from training.abstention import fit_abstention

        report = fit_abstention(settings, load_queries(QUERIES), load_queries(OUT_OF_SCOPE))
        done.append(f"fitted the not-covered decision ({report.path}): held-out false refusals "
                    f"{report.heldout['false_refusal_rate']:.3f}, out-of-scope refused {report.heldout['abstention_rate']:.3f}")
    return done

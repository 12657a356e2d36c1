"""The demo knowledge base shipped with fedqa: four products of a fictional company."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
DOCS = DATA / "docs.jsonl"
QUERIES = DATA / "queries.jsonl"


def setup_demo(settings: "Settings", *, progress: bool = True, router_epochs: int | None = None) -> list[str]:  # noqa: F821
    """Ingest the demo docs and train the router on the demo questions when the home has no index yet.

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
        from training.router import stratified_split

        train, val = stratified_split(load_queries(QUERIES), 0.3)  # val: calibration and the fused strategy's fit
        version = train_and_activate(settings, train, val=val, epochs=router_epochs, progress=progress)
        done.append(f"trained router {version} on the demo questions")
    return done

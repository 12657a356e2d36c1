"""Probe: fit a home's "not covered" default again with this checkout's code, as ``fedqa ingest`` fits it.

    FEDQA_HOME=<copy of a no-label home> python benchmarks/probes/refit_not_covered_default.py

For comparing two checkouts on the same ingested passages (``benchmarks/manuals.py --home`` reuses a home's index and
its stored decision): :func:`training.abstention.fit_untrained` (the index's heading questions against the shipped
general ones) replaces the index version's ``abstention.json``; prints the verdict, threshold and k-fold figures.
Run it on a copy: it writes into the home.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.config import Settings  # noqa: E402
from training.abstention import fit_untrained  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    report = fit_untrained(Settings())
    if report.model is None:
        raise SystemExit("too few section headings to make in-scope questions from: no default fitted")
    print(json.dumps({**report.summary(), "coef": dict(zip(report.model.features, report.model.coef, strict=True))}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a refresh reads and records (its inputs, options, stages and their outcomes, ``$FEDQA_HOME/refresh.json``)
and how it reports its progress: :mod:`training.refresh` runs the stages."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from service.artifacts import ArtifactError, Bundle, Kind, Registry, write_json_atomic
from training.refresh_feedback import RefreshFeedback

RECORD_FILE = "refresh.json"
DATA_FOLDER = "refresh"  # $FEDQA_HOME/refresh/data-<fingerprint>: the training sets the refreshes built


class Stage(str, Enum):
    """A refresh's stages, in serving order."""

    DATA = "data build"
    RETRIEVER = "retriever"
    INDEX = "index"
    ROUTER = "router"
    RERANKER = "reranker"
    RANKING = "ranking"
    ANSWER = "answer policy"
    SPLIT = "split"
    NOT_COVERED = "not covered"


class Outcome(str, Enum):
    """What a stage did."""

    FITTED = "fitted"
    DEFAULT = "default kept"  # a decision whose labelled questions were too few, or whose fit measured worse
    UNCHANGED = "skipped (unchanged)"
    SKIPPED = "skipped"


class Flow(str, Enum):
    """Which stages a refresh's inputs call for (module doc)."""

    CORPUS = "corpus"  # data build, retriever and index, then the rest
    QUESTIONS = "questions"  # router and the decisions over the index as ingested


#: Share of the labelled questions held out for the router's fits, by flow: ``fedqa data build``'s and
#: ``fedqa train router --queries``' defaults, so that a refresh fits what those commands did.
VAL_FRACTION = {Flow.CORPUS: 0.3, Flow.QUESTIONS: 0.2}


@dataclass(frozen=True)
class StageResult:
    """One stage's line of the summary: what it did, how long it took, its key figure (or why it was skipped)."""

    stage: Stage
    outcome: Outcome
    seconds: float
    figure: str = ""
    version: str | None = None


@dataclass(frozen=True)
class RefreshInputs:
    """The files a refresh reads (``fedqa data build``'s inputs)."""

    corpus: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    out_of_scope: tuple[str, ...] = ()

    @property
    def flow(self) -> Flow:
        """The corpus flow when a corpus is given, else the questions flow."""
        return Flow.CORPUS if self.corpus else Flow.QUESTIONS

    @property
    def given(self) -> bool:
        """Whether any input is named."""
        return bool(self.corpus or self.queries or self.out_of_scope)

    def absolute(self) -> RefreshInputs:
        """The same inputs as absolute paths (what the record keeps)."""

        def paths(names: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(str(Path(n).expanduser().resolve()) for n in names)

        return RefreshInputs(paths(self.corpus), paths(self.queries), paths(self.out_of_scope))

    def fingerprint(self) -> str:
        """A hash of every input file's name and bytes (a folder: every file under it)."""
        h = hashlib.sha256()
        for group, names in (("corpus", self.corpus), ("queries", self.queries), ("out_of_scope", self.out_of_scope)):
            for name in names:
                root = Path(name)
                files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
                for f in files:
                    h.update(f"{group}\0{f.relative_to(root) if root.is_dir() else f.name}\0".encode())
                    h.update(f.read_bytes())
        return h.hexdigest()


@dataclass(frozen=True)
class RefreshOptions:
    """Choices of one refresh (not values fitted on data)."""

    reranker: bool = False  # train the cross-encoder (off: the active reranker, if any, stays)
    val_fraction: float | None = None  # share of the labelled questions held out (None: the flow's default, VAL_FRACTION)
    seed: int = 0
    router_epochs: int | None = None  # None: RouterConfig's
    progress: bool = True
    lenient: bool = False  # labels the corpus does not hold are warned about and dropped
    feedback: bool = True  # add what the home's feedback establishes to the questions (off: --no-feedback)


@dataclass
class RefreshRecord:
    """What the home's last refresh read and made: ``refresh.json``."""

    inputs: RefreshInputs = field(default_factory=RefreshInputs)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage value -> {"fingerprint", "version"}
    bundle: dict[str, str | None] = field(default_factory=dict)
    feedback: dict[str, Any] = field(default_factory=dict)  # RefreshFeedback.counts() and its fingerprint

    @classmethod
    def load(cls, registry: Registry) -> RefreshRecord:
        """The record of ``registry``'s home (empty when it has none)."""
        path = registry.home / RECORD_FILE
        if not path.is_file():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        inputs = data.get("inputs") or {}
        return cls(
            RefreshInputs(*(tuple(inputs.get(k) or ()) for k in ("corpus", "queries", "out_of_scope"))),
            dict(data.get("stages") or {}),
            dict(data.get("bundle") or {}),
            dict(data.get("feedback") or {}),
        )

    def save(self, registry: Registry) -> None:
        """Write ``refresh.json`` atomically."""
        write_json_atomic(
            registry.home / RECORD_FILE, {"inputs": asdict(self.inputs), "stages": self.stages, "bundle": self.bundle, "feedback": self.feedback}
        )

    def version(self, stage: Stage, fingerprint: str) -> str | None:
        """The version ``stage`` made from inputs of ``fingerprint`` last time, or None."""
        entry = self.stages.get(stage.value) or {}
        return entry.get("version") if entry.get("fingerprint") == fingerprint else None


@dataclass
class RefreshReport:
    """The stages' results, the bundle fitted and whether it was activated."""

    stages: list[StageResult]
    bundle: Bundle
    activated: list[str]
    inputs: RefreshInputs
    seconds: float
    feedback: RefreshFeedback

    def table(self) -> str:
        """The summary table: stage, status, seconds, key figure."""
        rows = [("stage", "status", "seconds", "figure")]
        rows += [(r.stage.value, r.outcome.value, f"{r.seconds:.1f}", r.figure) for r in self.stages]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["  ".join([*(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)), row[3]]).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 6)
        return "\n".join(lines)


def fingerprint(*parts: Any) -> str:
    """A hash of JSON-serialisable parts (a stage's inputs)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def is_complete(registry: Registry, kind: Kind, version: str | None) -> bool:
    """Whether ``version`` is a complete version of ``kind``."""
    if not version:
        return False
    try:
        registry.manifest(kind, version)
    except ArtifactError:
        return False
    return True


class Progress:
    """One line per stage on ``say``: stage i/n, its name, the refresh's elapsed time, then its result."""

    def __init__(self, stages: Sequence[Stage], say: Callable[[str], None]) -> None:
        self.stages, self.say, self.t0 = list(stages), say, time.perf_counter()
        self.results: list[StageResult] = []

    def _prefix(self, stage: Stage) -> str:
        return f"refresh {self.stages.index(stage) + 1}/{len(self.stages)} {stage.value}"

    @contextmanager
    def stage(self, stage: Stage) -> Iterator[Callable[..., None]]:
        """A stage's block; it calls the yielded ``done(outcome, figure, version)`` once (default: fitted)."""
        self.say(f"{self._prefix(stage)}: started (elapsed {time.perf_counter() - self.t0:.0f} s)")
        t0 = time.perf_counter()
        result: list[StageResult] = []

        def done(outcome: Outcome = Outcome.FITTED, figure: str = "", version: str | None = None) -> None:
            result.append(StageResult(stage, outcome, round(time.perf_counter() - t0, 1), figure, version))

        try:
            yield done
        except BaseException:
            self.say(f"{self._prefix(stage)}: failed after {time.perf_counter() - t0:.1f} s; the active versions are unchanged")
            raise
        r = result[0] if result else StageResult(stage, Outcome.FITTED, round(time.perf_counter() - t0, 1))
        self.results.append(r)
        self.say(f"{self._prefix(stage)}: {r.outcome.value} in {r.seconds:.1f} s{': ' + r.figure if r.figure else ''}")

    def skip(self, stage: Stage, outcome: Outcome, why: str, version: str | None = None) -> None:
        """A stage that does not run."""
        self.results.append(StageResult(stage, outcome, 0.0, why, version))
        self.say(f"{self._prefix(stage)}: {outcome.value}: {why}")

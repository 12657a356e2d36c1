"""Reading a training-set folder written by :func:`training.data.build.build_training_data`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from service.queries import LabelledQuery, load_queries
from service.retrieval.passage import Passage
from training.data.build import MANIFEST


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@dataclass
class RetrieverExample:
    """A query with its gold passages and hard negatives (doc_ids)."""

    qid: str
    query: str
    positives: list[str]
    negatives: list[str]
    origin: str
    generator: str | None = None
    domains: list[str] = field(default_factory=list)


@dataclass
class TrainingData:
    """A training-set folder, loaded."""

    path: Path
    manifest: dict
    router_rows: list[LabelledQuery]
    router_origins: list[str]
    retriever_rows: list[RetrieverExample]
    passages: dict[str, Passage]
    val: list[LabelledQuery]
    val_pool: list[str]
    val_oos: list[LabelledQuery] = field(default_factory=list)

    @property
    def fingerprint(self) -> str:
        """The training-data fingerprint recorded by the build."""
        return str(self.manifest.get("fingerprint", ""))

    @property
    def domains(self) -> list[str]:
        """Domains of the corpus the data was made from."""
        return list(self.manifest.get("domains", []))

    @classmethod
    def load(cls, path: str | Path) -> TrainingData:
        """Load a complete training-set folder (its manifest is written last)."""
        path = Path(path)
        if not (path / MANIFEST).is_file():
            raise FileNotFoundError(f"{path} is not a training-set folder (no {MANIFEST}; run 'fedqa data build')")
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        router = _read_jsonl(path / "router_train.jsonl")
        retriever = _read_jsonl(path / "retriever_train.jsonl")
        passages = {r["doc_id"]: Passage.from_payload(r) for r in _read_jsonl(path / "passages.jsonl")}
        pool_file = path / "val_pool.json"
        return cls(
            path=path,
            manifest=manifest,
            router_rows=[LabelledQuery(r["qid"], r["query"], list(r["domains"]), kind=r.get("origin")) for r in router],
            router_origins=[r.get("origin", "labelled") for r in router],
            retriever_rows=[
                RetrieverExample(
                    r["qid"],
                    r["query"],
                    list(r["positives"]),
                    list(r["negatives"]),
                    r.get("origin", "labelled"),
                    r.get("generator"),
                    list(r.get("domains") or []),
                )
                for r in retriever
            ],
            passages=passages,
            val=load_queries(path / "val.jsonl") if (path / "val.jsonl").is_file() else [],
            val_pool=json.loads(pool_file.read_text(encoding="utf-8")) if pool_file.is_file() else [],
            val_oos=load_queries(path / "val_oos.jsonl") if (path / "val_oos.jsonl").is_file() else [],
        )

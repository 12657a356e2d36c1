"""An ingest fits "not covered" from its headings, so off-topic questions are refused before any labelled question (a real ingest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.artifacts import Registry
from service.generation.abstention import ABSTENTION_FILE, EVIDENCE_FORM
from tests.unit.service.retrieval.test_untrained_defaults import _TOPICS


@pytest.mark.slow
def test_an_ingest_fits_not_covered_from_its_headings_so_off_topic_questions_are_refused(tmp_path: Path, monkeypatch) -> None:
    from service.cli import main
    from service.config import get_settings

    site = tmp_path / "site"
    for product, sections in _TOPICS.items():
        (site / product).mkdir(parents=True)
        for title, text in sections:
            page = title.lower().replace(" ", "-")
            (site / product / f"{page}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
    home = tmp_path / "home"
    monkeypatch.setenv("FEDQA_HOME", str(home))
    monkeypatch.setenv("FEDQA_ENCODER_BACKEND", "torch")
    get_settings.cache_clear()
    try:
        assert main(["ingest", str(site), "--quiet"]) == 0
        registry = Registry(home)
        index = registry.active()["index"]
        assert index and (registry.path("index", index) / ABSTENTION_FILE).is_file()
        from service.ask import answer
        from service.loading import load_pipeline
        from service.schemas import AskRequest

        pipeline = load_pipeline(get_settings(), with_llm=False)
        try:
            off = answer(pipeline, AskRequest(query="How do I bake sourdough bread?"))
            on = answer(pipeline, AskRequest(query="How do I send all outgoing mail through my provider's mail hub?"))
            assert not [w for w in pipeline.warnings if "not covered" in w]
        finally:
            pipeline.close()
        assert off.answer_mode == "not_covered"
        assert on.answer_mode == "extractive" and on.sources[0].doc_id == "mailer/relaying#000"
        path = registry.path("index", index) / ABSTENTION_FILE
        fitted = json.loads(path.read_text(encoding="utf-8"))
        assert fitted["fit"]["out_of_scope_sources"]["headings"] == 12 and fitted["evidence_form"] == EVIDENCE_FORM

        # a model stored before the vocabulary's evidence left everyday words out: served with a warning, and the next
        # ingest of the same pages (no new index version) fits it again
        path.write_text(json.dumps({k: v for k, v in fitted.items() if k != "evidence_form"}), encoding="utf-8")
        pipeline = load_pipeline(get_settings(), with_llm=False)
        try:
            assert pipeline.abstention is not None and pipeline.abstention.stale
            assert [w for w in pipeline.warnings if "fitted before everyday words" in w and "fedqa ingest" in w]
        finally:
            pipeline.close()
        assert main(["ingest", str(site), "--quiet"]) == 0
        assert registry.active()["index"] == index
        refitted = json.loads(path.read_text(encoding="utf-8"))
        assert refitted["evidence_form"] == EVIDENCE_FORM and refitted["asked"]["dim"] == 384

        # one stored before its known questions were (no "asked"): served with a warning, fitted again by the ingest
        path.write_text(json.dumps({k: v for k, v in refitted.items() if k != "asked"}), encoding="utf-8")
        pipeline = load_pipeline(get_settings(), with_llm=False)
        try:
            assert pipeline.abstention is not None and pipeline.abstention.unasked and pipeline.answerer.asked is None
            assert [w for w in pipeline.warnings if "before the questions it is fitted on were stored" in w]
        finally:
            pipeline.close()
        assert main(["ingest", str(site), "--quiet"]) == 0
        assert json.loads(path.read_text(encoding="utf-8"))["asked"] is not None
    finally:
        get_settings.cache_clear()

"""The index's vocabulary: counted at build, kept in step by every re-ingest, and read by "not covered"."""

from __future__ import annotations

import gzip
from pathlib import Path

from indexes.ingest import ingest
from service.artifacts import Registry
from service.ask import answer
from service.loading import load_pipeline
from service.retrieval.edge_store import EdgeBackend
from service.retrieval.passage import Passage
from service.retrieval.vocabulary import VOCABULARY_FILE, Vocabulary, everyday_words, identifiers, stem
from service.schemas import AskRequest
from tests.conftest import make_settings
from tests.utils import present


def _passage(doc_id: str, title: str, text: str) -> Passage:
    return Passage(doc_id=doc_id, domain="orbit", title=title, text=text, source=f"{doc_id}.md")


def test_rarity_is_one_for_a_word_no_passage_holds_and_halves_for_one_that_one_holds(tmp_path):
    vocab = Vocabulary.of(
        [_passage("a", "Contacts", "Import contacts from a CSV file."), _passage("b", "Contacts > Merge", "Merge duplicate contacts.")]
    )
    assert vocab.passages == 2 and vocab.counts[stem("contacts")] == 2 and vocab.counts["csv"] == 1
    assert vocab.rarity(["Where are my contacts?"]) == 1 / 3  # "contacts": in two passages
    assert vocab.rarity(["How do I import contacts?"]) == 1 / 2  # the rarest, "import": in one
    assert vocab.rarity(["Does it run on TortoiseHg?"]) == 1.0
    assert vocab.rarity(["How do I do it?"]) == 0.0  # no counted word (stop words, short words)
    assert vocab.rarity(["Import contacts?", "And on TortoiseHg?"]) == 1.0  # the rarest word of every question
    assert Vocabulary.load(vocab.save(tmp_path).parent) == vocab
    assert Vocabulary.load(tmp_path / "nowhere") is None


def test_uncovered_weighs_the_question_words_the_passages_leave_unsaid_by_how_specific_they_are():
    vocab = Vocabulary.of(
        [
            _passage("a", "Contacts", "Import contacts from a CSV file."),
            _passage("b", "Contacts > Merge", "Merge duplicate contacts."),
            _passage("c", "Sync", "Sync contacts and calendars every hour."),
        ]
    )
    assert vocab.specificity(stem("tortoisehg")) == 1.0 and vocab.specificity(stem("contacts")) == 0.0  # in no passage / in all
    assert 0 < vocab.specificity(stem("merge")) < 1
    found = "Contacts Import contacts from a CSV file."
    assert vocab.uncovered(["How do I import contacts from CSV?"], [found]) == 0.0  # every word said
    # the same passage for a question on another topic: "merge" and "duplicate" (one passage each) unsaid;
    # "contacts" (every passage) weighs nothing
    assert vocab.uncovered(["How do I merge duplicate contacts?"], [found]) == 1.0
    # half the specific words said: a share strictly between
    half = vocab.uncovered(["Import duplicate CSV rows?"], [found])
    assert 0 < half < 1
    assert vocab.uncovered(["Import duplicate CSV rows?"], [found, "Merge duplicate contacts."]) < half  # more passages, less unsaid
    assert vocab.uncovered(["How do I do it?"], [found]) == 0.0  # no counted word
    assert Vocabulary({}, 0).uncovered(["TortoiseHg at all?"], []) == 1.0  # an empty index says nothing


def test_the_vocabulary_counts_each_product_and_a_caller_of_some_products_reads_theirs_only(tmp_path):
    """Issue 50, fault 4: the counts of products outside a caller's tell it what their documentation holds."""
    ledger = Passage(doc_id="l", domain="ledger", title="Dunning", text="Dunning retries failed payments.", source="l.md")
    vocab = Vocabulary.of([_passage("a", "Contacts", "Import contacts."), _passage("b", "Payments", "Log payments of deals."), ledger])
    assert vocab.passages == 3 and vocab.counts[stem("payments")] == 2 and vocab.rarity(["What is dunning?"]) == 1 / 2
    orbit = vocab.within(frozenset({"orbit"}))
    assert orbit.passages == 2 and orbit.counts[stem("payments")] == 1 and stem("dunning") not in orbit.counts
    assert orbit.rarity(["What is dunning?"]) == 1.0 and orbit.uncovered(["What is dunning?"], ["Contacts Import contacts."]) == 1.0
    assert vocab.within(frozenset({"orbit", "ledger", "ghost"})) == vocab and vocab.within(None) is vocab
    assert vocab.within(frozenset({"ghost"})).passages == 0
    loaded = present(Vocabulary.load(vocab.save(tmp_path).parent))
    assert loaded == vocab and loaded.within(frozenset({"orbit"})) == orbit
    # a file stored before it counted by product is not read (the pipeline counts the passages again)
    with gzip.open(tmp_path / VOCABULARY_FILE, "wt", encoding="utf-8") as f:
        f.write("#passages\t3\ndunning\t1\n")
    assert Vocabulary.load(tmp_path) is None
    # nor one stored before it counted stems (by product, words as written)
    with gzip.open(tmp_path / VOCABULARY_FILE, "wt", encoding="utf-8") as f:
        f.write("#product\tledger\t1\ndunning\t1\n")
    assert Vocabulary.load(tmp_path) is None


def test_an_everyday_word_no_passage_holds_says_nothing_a_name_no_passage_holds_does():
    """On a few pages most of a user's words are in no passage: "come" of "Which themes come with Sitewright?" is not a
    name the documentation never uses (issue 53's few-label home refused that question on it); "TortoiseHg" is."""
    themes = "Sitewright ships two themes, plain and docs; pick one with theme = docs."
    vocab = Vocabulary.of([_passage("a", "Themes", themes), _passage("b", "Install", "Install Sitewright with pip.")])
    assert vocab.question_words(["Which themes come with Sitewright?"]) == {stem("themes"), stem("sitewright")}
    assert vocab.rarity(["Which themes come with Sitewright?"]) == 1 / 2  # "themes": one passage
    assert vocab.uncovered(["Which themes come with Sitewright?"], [themes]) == 0.0
    assert vocab.rarity(["Which themes come with TortoiseHg?"]) == 1.0 and vocab.uncovered(["Which themes come with TortoiseHg?"], [themes]) > 0.5
    # an everyday word the documentation holds is counted as before: "pick" in passage a, unsaid by passage b
    assert stem("pick") in vocab.question_words(["How do I pick a theme?"])
    assert vocab.uncovered(["How do I pick a theme?"], ["Install Sitewright with pip."]) == 1.0
    assert {"come", "server", "bread"} <= everyday_words() and not {"sourdough", "nginx", "matplotlib", "sitewright"} & everyday_words()


def test_a_word_the_documentation_holds_in_another_form_is_not_unseen():
    """A user's "clogging" is the manual's "clogged": counted as the same stem, it is neither rare nor unsaid."""
    vocab = Vocabulary.of([_passage("a", "Queue", "A clogged queue drains slowly; flush it."), _passage("b", "Contacts", "Import contacts.")])
    assert vocab.rarity(["Why is my queue clogging?"]) == 1 / 2  # every word in a passage: "clogging" as "clogged"
    assert vocab.rarity(["Why is my queue backlogged?"]) == 1.0  # a word no passage holds in any form
    assert vocab.uncovered(["Why is my queue clogging?"], ["A clogged queue drains slowly; flush it."]) == 0.0


def test_a_setting_of_another_product_is_unseen_though_its_parts_are_not(tmp_path):
    """A question naming another product's setting ("least_conn") splits into words the documentation holds; the
    snake_case name itself is counted whole, so it reads as a word no passage holds, and is left unsaid. One the
    documentation writes is seen; names joined by dots (a user's own files and hosts) are not counted whole."""
    text = "balance leastconn sends each request to the server with the least active conn count; see use_backend in main.cf."
    vocab = Vocabulary.of([_passage("a", "Balancing", text), _passage("b", "Contacts", "Import contacts.")])
    assert vocab.counts["use_backend"] == 1 and vocab.counts[stem("least")] == 1 and "main.cf" not in vocab.counts
    assert vocab.rarity(["How do I use least_conn balancing?"]) == 1.0  # was 1/2: "least" and "conn" are in passage a
    assert vocab.rarity(["Which balance is leastconn in use_backend?"]) == 1 / 2
    assert vocab.rarity(["Is balance leastconn in main.cf?"]) == 1 / 2  # "main.cf" is "main" (and "cf", too short)
    assert vocab.uncovered(["least_conn balancing"], [text]) > vocab.uncovered(["least conn balancing"], [text])
    assert identifiers("FEATURE(masquerade_envelope), MASQUERADE_AS, sendmail.mc, me@box.localdomain, x-axis") == {
        "masquerade_envelope",
        "masquerade_as",
    }
    # a file stored before snake_case names were counted (stems by product) is counted again
    with gzip.open(tmp_path / VOCABULARY_FILE, "wt", encoding="utf-8") as f:
        f.write("#form\tstem\n#product\torbit\t2\nleast\t1\n")
    assert Vocabulary.load(tmp_path) is None
    assert Vocabulary.load(vocab.save(tmp_path).parent) == vocab


def _site(root: Path) -> Path:
    (root / "orbit").mkdir(parents=True)
    (root / "orbit" / "contacts.md").write_text("# Contacts\n\n## Importing\n\nImport a CSV file of contacts.\n", encoding="utf-8")
    (root / "orbit" / "sync.md").write_text("# Sync\n\nOrbit synchronises calendars every hour.\n", encoding="utf-8")
    return root


def _stored(settings, version: str) -> Vocabulary:
    return present(Vocabulary.load(Registry(settings.home_dir).path("index", version)))


def _counted(settings, version: str) -> Vocabulary:
    store = EdgeBackend(Registry(settings.home_dir)).open(version)
    try:
        return Vocabulary.of(p for d in store.domains() for p in store.iter_passages(d))
    finally:
        store.close()


def test_every_index_version_stores_the_vocabulary_of_the_passages_it_holds(tmp_path, encoder):
    site = _site(tmp_path / "site")
    settings = make_settings(tmp_path / "home")
    first = present(ingest([site], settings, encoder=encoder, progress=False).version)
    assert _stored(settings, first) == _counted(settings, first)
    assert _stored(settings, first).counts[stem("calendars")] == 1

    (site / "orbit" / "sync.md").unlink()  # a page leaves, another changes: the next version counts what it holds
    (site / "orbit" / "contacts.md").write_text("# Contacts\n\nExport contacts to vCard.\n", encoding="utf-8")
    second = present(ingest([site], settings, encoder=encoder, progress=False).version)
    vocab = _stored(settings, second)
    assert vocab == _counted(settings, second) and vocab.passages == 1
    assert stem("calendars") not in vocab.counts and "csv" not in vocab.counts and vocab.counts["vcard"] == 1
    assert _stored(settings, first).counts[stem("calendars")] == 1  # the earlier version's is its own


def test_the_pipeline_reads_the_stored_vocabulary_or_counts_an_older_versions(tmp_path, encoder):
    settings = make_settings(tmp_path / "home")
    version = present(ingest([_site(tmp_path / "site")], settings, encoder=encoder, progress=False).version)
    stored = _stored(settings, version)
    (Registry(settings.home_dir).path("index", version) / VOCABULARY_FILE).unlink()  # as built before vocabularies
    pipeline = load_pipeline(settings, with_llm=False)
    try:
        assert pipeline.answerer.vocabulary == stored
        # a question naming what no passage mentions carries rare_word 1 in its evidence; an in-scope one less
        off = answer(pipeline, AskRequest(query="How do I import contacts into TortoiseHg?"))
        on = answer(pipeline, AskRequest(query="How do I import a CSV of contacts?"))
    finally:
        pipeline.close()
    assert present(off.confidence).evidence["rare_word"] == 1.0
    assert present(on.confidence).evidence["rare_word"] == 0.5
    # the first passage of the in-scope question holds its words; the other's leaves "tortoisehg" unsaid
    assert present(on.confidence).evidence["uncovered"] == 0.0
    assert present(off.confidence).evidence["uncovered"] > 0.5

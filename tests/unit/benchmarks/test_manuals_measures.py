"""benchmarks/manuals.py's navigation measure: a passage of link labels counts, a code example whose keywords the
page's index links does not (unless code lines are counted, as before 2026-11-30), nor does prose."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.manuals import link_label_share
from service.retrieval.passage import Passage

PAGE = """<html><body>
<div class="nav"><ul>
  <li><a href="#timeout-connect">timeout connect</a></li>
  <li><a href="#timeout-client">timeout client</a></li>
  <li><a href="#option-http-server-close">option http-server-close</a></li>
  <li><a href="next.html">Next topic: logging</a></li>
</ul></div>
<h2 id="timeout-connect">timeout connect</h2>
<p>Set the maximum time to wait for a connection attempt to a server to succeed.</p>
<pre>defaults http
    option http-server-close
    timeout connect 5s
    timeout client 30s
</pre>
</body></html>"""


def _passage(n: int, text: str) -> Passage:
    return Passage(doc_id=f"p#{n}", domain="proxy", title="Proxy > timeout connect", source="proxy/config.html", text=text)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    (tmp_path / "proxy").mkdir()
    (tmp_path / "proxy" / "config.html").write_text(PAGE, encoding="utf-8")
    return tmp_path


def test_navigation_counts_and_a_code_example_does_not(docs: Path) -> None:
    navigation = _passage(0, "timeout connect\ntimeout client\noption http-server-close\nNext topic: logging")
    code = _passage(1, "defaults http\n    option http-server-close\n    timeout connect 5s\n    timeout client 30s")
    prose = _passage(2, "Set the maximum time to wait for a connection attempt to a server to succeed.")
    assert link_label_share([navigation], docs) == 1.0
    assert link_label_share([code], docs) == 0.0
    assert link_label_share([code], docs, code=True) == 1.0
    assert link_label_share([prose], docs) == 0.0
    assert link_label_share([navigation, code, prose], docs) == pytest.approx(1 / 3)


def test_labels_in_prose_lines_weigh_against_the_whole_passage(docs: Path) -> None:
    """A code example under one linked keyword line is not mostly links: the code still counts in its length."""
    headed = _passage(3, "timeout connect\n    option http-server-close\n    timeout connect 5s\n    timeout client 30s\ndefaults http")
    assert link_label_share([headed], docs) == 0.0

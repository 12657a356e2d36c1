"""Words and sentences in any script: answer terms, grounding, sentence splitting and segmentation."""

from __future__ import annotations

from indexes.segment import split_section
from service.generation.prompt import grounding
from service.retrieval.passage import Passage, RankedHit
from service.text import sentences, terms, words

ZH = "要重置密码，请打开设置页面。然后点击「重置密码」按钮！系统会发送一封邮件吗？会的，邮件在五分钟内到达。"
AR = "لإعادة تعيين كلمة المرور افتح صفحة الإعدادات. ثم اضغط على زر إعادة التعيين وستصلك رسالة خلال خمس دقائق."


def _hit(text: str, domain: str = "orbit") -> RankedHit:
    return RankedHit(Passage("p#000", domain, "Passwords", "orbit/p.md", text), 0.8, 1.0, 0.8)


def test_a_word_with_letters_outside_ascii_stays_one_word():
    assert terms("Um Ihr Passwort zurückzusetzen, öffnen Sie die Einstellungen") == {
        "um",
        "ihr",
        "passwort",
        "zurückzusetzen",
        "öffnen",
        "sie",
        "die",
        "einstellungen",
    }
    # The same word written with a combining diaeresis (NFD) is the same term.
    assert terms("zuru\u0308ckzusetzen") == {"zurückzusetzen"}
    assert terms("إعادة تعيين") == {"إعادة", "تعيين"}
    assert terms("重置密码") == {"重", "置", "密", "码"}  # CJK: each character is a term
    # ASCII text is cut as before ([a-z0-9]+ on the lower-cased text).
    assert words("Use API_KEY v2.1, e-mail!") == ["use", "api", "key", "v2", "1", "e", "mail"]


def test_an_answer_copied_word_for_word_from_a_chinese_or_arabic_source_is_fully_grounded():
    for text in (ZH, AR):
        answer = sentences(text)[1] + " [1]"
        assert grounding(answer, [_hit(text)]) == 1.0
    # Words the source does not hold are not grounded.
    assert grounding("删除账户需要联系管理员。 [1]", [_hit(ZH)]) < 0.5


def test_chinese_text_is_split_into_sentences_at_its_own_end_marks():
    assert sentences(ZH) == [
        "要重置密码，请打开设置页面。",
        "然后点击「重置密码」按钮！",
        "系统会发送一封邮件吗？",
        "会的，邮件在五分钟内到达。",
    ]
    assert sentences("他说：“好的。”然后走了。") == ["他说：“好的。”", "然后走了。"]
    assert len(sentences(AR)) == 2
    assert sentences("Open Settings. Click Reset. Über alles.") == ["Open Settings.", "Click Reset.", "Über alles."]


def test_a_long_chinese_paragraph_is_segmented_at_sentence_ends():
    text = ZH * 4
    chunks = split_section(text, len, 60)  # a character count stands in for the tokenizer
    assert len(chunks) > 1 and all(len(c) <= 60 for c in chunks)
    assert all(c.endswith(("。", "！", "？")) for c in chunks)

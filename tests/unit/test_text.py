import pytest

from django_jobs.text import ELIDED, first_line, keep_end, storable_text

TRACE = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "x.py", line {n}, in f\n    g()\n' for n in range(200))
    + "ValueError: boom\n"
)


def test_keep_end_leaves_a_short_text_as_it_is():
    assert keep_end(TRACE, len(TRACE)) == TRACE


@pytest.mark.parametrize("limit", [300, 1000, 5000])
def test_keep_end_keeps_the_first_line_and_the_end_from_a_line_start(limit):
    kept = keep_end(TRACE, limit)
    assert len(kept) <= limit
    head = "Traceback (most recent call last):\n" + ELIDED
    assert kept.startswith(head)
    assert TRACE.endswith(kept[len(head) :])  # the end of the text,
    assert "\n" + kept[len(head) :] in TRACE  # from a line's start
    assert len(kept) > limit - 40  # and as much of it as fits


def test_keep_end_of_one_long_line_keeps_its_end():
    assert keep_end("x" * 50 + "END", 10) == ELIDED + "xEND"
    assert keep_end("x" * 50 + "END", 4) == "xEND"


def test_first_line_of_a_message_or_the_type():
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(ValueError()) == "ValueError"


def test_storable_text_writes_nul_and_replaces_lone_surrogates():
    assert storable_text("a\x00b\udc80") == "a\\x00b\ufffd"

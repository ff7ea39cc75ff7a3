"""The answer's text stream (engine.decoding.text_stream): UTF-8 safe, stop strings cut at the
first one, a possible start held back, and never more held than a stop string is long."""

from __future__ import annotations

from engine.decoding.text_stream import TextStream


def test_text_stream_is_utf8_safe_and_stops_on_stop_strings():
    s = TextStream(["STOP"])
    emoji = "é🙂".encode()
    out = s.feed(emoji[:1]) + s.feed(emoji[1:3]) + s.feed(emoji[3:])
    assert out == "é🙂"
    out = s.feed(b"abc ST")
    assert out == "abc "  # "ST" held back: could be the start of STOP
    out += s.feed(b"OP and more")
    assert s.stopped and s.text == "é🙂abc " and out == "abc "


def test_the_earliest_stop_string_wins_whatever_their_order():
    s = TextStream(["END", "halt"])
    assert s.feed(b"go on, halt here, END") == "go on, " and s.stopped


def test_only_a_possible_start_of_a_stop_string_is_held_back():
    """What is held is never longer than the longest stop string minus one character: each
    feed searches only that and the new text, so a long answer costs linear time."""
    stops = ["</answer>", "\n\nUser:"]
    s = TextStream(stops)
    shown = []
    for i in range(2000):
        shown.append(s.feed(f"word{i} <".encode() if i % 7 == 0 else f"word{i} ".encode()))
        assert len(s.held) < max(map(len, stops))
    shown.append(s.feed(b"end </answ"))
    assert s.held == "</answ" and shown[-1] == "end "
    shown.append(s.feed(b"er> trailing"))
    assert s.stopped and "".join(shown) == s.text and s.text.endswith("word1999 end ")
    assert "</answer>" not in s.text and "trailing" not in s.text

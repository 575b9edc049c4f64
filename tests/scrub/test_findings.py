"""umbra/scrub/findings.py: overlap resolution and positions."""

from umbra.scrub import PLACEHOLDERS
from umbra.scrub.findings import KINDS, Span, line_starts, offset_of, resolve, to_finding


def test_placeholders_are_typed_plain_text():
    assert PLACEHOLDERS == {"secret": "<SECRET>", "url": "<URL>", "email": "<EMAIL>", "host": "<HOST>",
                            "ip": "<IP>", "name": "<NAME>"}
    assert set(PLACEHOLDERS) == set(KINDS)


def test_a_contained_span_joins_the_longer_one():
    assert resolve([Span(10, 20, "host"), Span(0, 40, "url")]) == [Span(0, 40, "url")]


def test_partial_overlap_becomes_the_union_under_the_longest_kind():
    # nothing of either member may survive: the union is replaced
    assert resolve([Span(0, 10, "secret"), Span(6, 30, "email")]) == [Span(0, 30, "email")]


def test_equal_lengths_go_to_the_more_specific_kind():
    assert resolve([Span(5, 15, "ip"), Span(5, 15, "secret")]) == [Span(5, 15, "secret")]
    assert resolve([Span(5, 15, "name"), Span(5, 15, "host")]) == [Span(5, 15, "host")]


def test_disjoint_and_touching_spans_stay_apart_and_ordered():
    spans = [Span(20, 25, "ip"), Span(0, 5, "name"), Span(5, 9, "email"), Span(3, 3, "secret")]
    assert resolve(spans) == [Span(0, 5, "name"), Span(5, 9, "email"), Span(20, 25, "ip")]


def test_chains_of_overlaps_merge_into_one():
    assert resolve([Span(0, 5, "ip"), Span(4, 9, "host"), Span(8, 20, "url")]) == [Span(0, 20, "url")]


def test_findings_are_one_based_and_invert_to_offsets():
    text = "ab\ncd\n\nefgh"
    starts = line_starts(text)
    assert starts == [0, 3, 6, 7]
    for offset in range(len(text)):
        finding = to_finding(Span(offset, offset + 1, "ip"), starts)
        assert offset_of(finding, starts) == offset
    assert to_finding(Span(8, 10, "name"), starts).line == 4
    assert to_finding(Span(8, 10, "name"), starts).column == 2

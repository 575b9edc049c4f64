"""benchmarks/attention_gqa.py: the two attentions it times agree, and it reports positive times."""

from attention_gqa import measure


def test_measure_times_two_agreeing_attentions():
    copy_us, gqa_us, ratio = measure(4, 2, 8, 16, reps=1)
    assert copy_us > 0 and gqa_us > 0 and ratio > 0

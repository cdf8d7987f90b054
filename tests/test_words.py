"""hfpolicy.words: counts in printed lines, singular or plural as they should be."""

from hfpolicy.words import counted


def test_counted_says_one_in_the_singular():
    assert [counted(n, "episode") for n in (0, 1, 2)] == ["0 episodes", "1 episode", "2 episodes"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"

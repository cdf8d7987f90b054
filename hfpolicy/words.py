"""How hfpolicy's printed lines say a number of things: `counted(1, "episode")` is "1 episode", never "1 episodes"."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 episode", "2 episodes" (`plural` for a noun whose plural is not noun + "s": "processes")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"

"""How printed lines say numbers: `counted(1, "episode")` is "1 episode", never "1 episodes"."""


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 episode", "2 episodes" (`plural` for a noun whose plural is not noun + "s": "processes")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def byte_size(n: float) -> str:
    """ "5.61 MB", "812 kB", "1.20 GB": a number of bytes with 3 significant digits and a decimal (SI) unit."""
    unit = "B"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if round(abs(n), 2 if abs(n) < 10 else 1 if abs(n) < 100 else 0) < 1000 or unit == "TB":
            break
        n /= 1000
    if unit == "B":
        return f"{n:.0f} B"
    return f"{n:.{2 if abs(n) < 9.995 else 1 if abs(n) < 99.95 else 0}f} {unit}"

"""Numbers as English words: cardinals, ordinals, decimals, years, digit strings."""

from __future__ import annotations

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}


def _below_1000(n: int) -> list[str]:
    words: list[str] = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10])
        n %= 10
        if n:
            words.append(_ONES[n])
    elif n or not words:
        words.append(_ONES[n])
    return words


def cardinal(n: int) -> str:
    """12345 -> "twelve thousand three hundred forty five". Negative numbers get "minus"."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n >= 10**15:
        return digits(str(n))
    words: list[str] = []
    for value, name in _SCALES:
        if n >= value:
            words += [*_below_1000(n // value), name]
            n %= value
    if n or not words:
        words += _below_1000(n)
    return " ".join(words)


def ordinal(n: int) -> str:
    """21 -> "twenty first"."""
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def digits(s: str) -> str:
    """"0042" -> "zero zero four two"."""
    return " ".join(_ONES[int(c)] for c in s if c.isdigit())


def decimal(s: str) -> str:
    """"3.14" -> "three point one four"; "-0.5" -> "minus zero point five"."""
    neg = s.startswith("-")
    whole, _, frac = s.lstrip("-").partition(".")
    out = cardinal(int(whole.replace(",", "") or "0"))
    if frac:
        out += " point " + digits(frac)
    return ("minus " + out) if neg else out


def year(n: int) -> str:
    """1999 -> "nineteen ninety nine"; 2005 -> "two thousand five"; 2024 -> "twenty twenty four"."""
    if n < 1000 or n >= 10000:
        return cardinal(n)
    hi, lo = divmod(n, 100)
    if lo == 0:
        return cardinal(n) if n % 1000 == 0 else f"{cardinal(hi)} hundred"
    if 2000 <= n < 2010:
        return cardinal(n)
    return f"{cardinal(hi)} {'oh ' + cardinal(lo) if lo < 10 else cardinal(lo)}"

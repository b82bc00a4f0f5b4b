"""Text normalization for speech: what an LLM writes -> what a voice should say.

Markdown, emoji and URLs are rewritten first (they contain digits and dots), then currency,
percentages, times, dates, ordinals, years and plain numbers, then abbreviations and symbols.
Each pass is a regular expression with a function; the order matters and is fixed here.
"""

from __future__ import annotations

import re

from tts.numbers import cardinal, decimal, digits, ordinal, year

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
_MONTH_RE = "|".join(_MONTHS + [m[:3] for m in _MONTHS] + ["Sept"])
_ABBREVIATIONS = {
    "dr": "doctor", "mr": "mister", "mrs": "missus", "ms": "miz", "prof": "professor",
    "st": "saint", "jr": "junior", "sr": "senior", "vs": "versus", "etc": "et cetera",
    "approx": "approximately", "dept": "department", "est": "established", "inc": "incorporated",
    "ltd": "limited", "co": "company", "corp": "corporation", "mt": "mount", "ave": "avenue",
    "e.g": "for example", "i.e": "that is", "a.m": "a m", "p.m": "p m", "u.s": "u s",
}
_UNITS = {"km": "kilometers", "kg": "kilograms", "cm": "centimeters", "mm": "millimeters",
          "mph": "miles per hour", "kph": "kilometers per hour", "lb": "pounds", "lbs": "pounds",
          "ms": "milliseconds", "gb": "gigabytes", "mb": "megabytes", "kb": "kilobytes",
          "ghz": "gigahertz", "mhz": "megahertz", "khz": "kilohertz", "hz": "hertz"}
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", "")}
_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "°": " degrees ",
            "×": " times ", "~": " about ", "<": " less than ", ">": " greater than ", "#": " number ",
            "/": " slash ", "|": ", ", "…": "...", "—": ", ", "–": ", "}
_EMOJI = re.compile("[\U0001f000-\U0001faff\U00002600-\U000027bf\U0001f1e6-\U0001f1ff"
                    "\u200d\ufe0f\u2b00-\u2bff\u2300-\u23ff]+")
_MERIDIEM = r"([ap]\.m\.|[ap]m\b)"
_SENTENCE_FINAL = {"etc", "inc", "ltd", "co", "corp", "u.s"}  # may end a sentence; titles never do
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"


def _plain_number(s: str) -> str:
    s = s.replace(",", "")
    return decimal(s) if "." in s else cardinal(int(s))


def _markdown(text: str) -> str:
    text = re.sub(r"```[^\n]*\n?", " ", text)  # code fences (keep the code's words)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images -> their text
    text = re.sub(r"<[^>\n]{1,80}>", " ", text)  # HTML tags
    text = re.sub(r"(?m)^\s{0,3}(?:#{1,6}|>+)\s*", "", text)  # headers, quotes
    text = re.sub(r"(?m)^\s*(?:[-*+•]|\d{1,3}[.)])\s+", "", text)  # list markers
    text = re.sub(r"(\*\*|__|\*|`|~~)(?=\S)(.+?)(?<=\S)\1", r"\2", text)  # emphasis, code spans
    text = re.sub(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)", r"\1", text)
    text = re.sub(r"(?m)^\s*[-=*_]{3,}\s*$", " ", text)  # horizontal rules
    text = re.sub(r"\*+|`+", " ", text)  # stray markers
    return _EMOJI.sub(" ", text)


def _url(m: re.Match) -> str:
    s = re.sub(r"^(?:https?://)?(?:www\.)?", "", m.group(0)).rstrip("/")
    s = s.replace(".", " dot ").replace("/", " slash ").replace("-", " dash ").replace("@", " at ")
    s = s.replace("_", " underscore ").replace("?", " ").replace("=", " equals ").replace("&", " and ")
    return " " + re.sub(r"(\d+)", lambda d: " " + digits(d.group(1)) + " ", s) + " "


def _currency(m: re.Match) -> str:
    one, many, sub_one, sub_many = _CURRENCIES[m.group(1)]
    amount, scale = m.group(2).replace(",", ""), m.group(3)
    if scale:
        scale = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion"}.get(scale.lower(), scale)
        return f"{_plain_number(amount)} {scale.lower()} {many}"
    whole, _, frac = amount.partition(".")
    n = int(whole)
    out = f"{cardinal(n)} {one if n == 1 else many}"
    if frac and sub_one and int(frac.ljust(2, "0")[:2]):
        c = int(frac.ljust(2, "0")[:2])
        cents = f"{cardinal(c)} {sub_one if c == 1 else sub_many}"
        out = cents if n == 0 else f"{out} and {cents}"
    return out


def _time(m: re.Match) -> str:
    h, mins, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    if h > 24 or mins > 59:
        return m.group(0)
    spoken = cardinal(h)
    if mins == 0:
        spoken += "" if suffix else " o'clock"
    elif mins < 10:
        spoken += " oh " + cardinal(mins)
    else:
        spoken += " " + cardinal(mins)
    if suffix:
        spoken += " " + _meridiem(m, suffix)
    return spoken


def _meridiem(m: re.Match, suffix: str) -> str:
    """"p.m." -> "p m", keeping the full stop when it also ends the sentence."""
    spoken = " ".join(suffix.replace(".", "").lower())
    return spoken + "." if suffix.endswith(".") and _ends_sentence(m) else spoken


def _ends_sentence(m: re.Match) -> bool:
    return re.match(r"\s*(?:$|[A-Z])", m.string[m.end():]) is not None


def _date_words(month: int, day: int, yr: str | None) -> str:
    out = f"{_MONTHS[month - 1]} {ordinal(day)}"
    return f"{out}, {year(int(yr))}" if yr else out


def _numeric_date(m: re.Match) -> str:
    a, b, c = m.group(1), m.group(2), m.group(3)
    if len(a) == 4:  # ISO 2024-03-15
        yr, mo, dy = a, int(b), int(c)
    else:  # US 3/15/2024
        mo, dy, yr = int(a), int(b), c
    if not (1 <= mo <= 12 and 1 <= dy <= 31):
        return m.group(0)
    if len(yr) == 2:
        yr = "20" + yr
    return _date_words(mo, dy, yr)


def _month_day(m: re.Match) -> str:
    name = m.group(1)
    month = next(i for i, full in enumerate(_MONTHS) if full.lower().startswith(name.lower()[:3])) + 1
    day = int(m.group(2))
    if not 1 <= day <= 31:
        return m.group(0)
    return _date_words(month, day, m.group(3))


def _abbreviation(m: re.Match) -> str:
    word = m.group(1)
    spoken = _ABBREVIATIONS.get(word.lower())
    if spoken is None:
        return m.group(0)
    if word[0].isupper() and " " not in spoken:
        spoken = spoken.capitalize()
    return spoken + "." if word.lower() in _SENTENCE_FINAL and _ends_sentence(m) else spoken


def _numbers(text: str) -> str:
    text = re.sub(r"(?<=\d)\s?(" + "|".join(_UNITS) + r")\b", lambda m: f" {_UNITS[m.group(1).lower()]}",
                  text, flags=re.I)
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: ordinal(int(m.group(1))), text)
    text = re.sub(r"\b(?i:(in|since|by|from|until|of|year|around|circa))\s+(1[1-9]\d\d|20\d\d)\b(?!\.\d|,\d)",
                  lambda m: f"{m.group(1)} {year(int(m.group(2)))}", text)
    text = re.sub(r"(?<![\d.])(\d+(?:\.\d+)?)\s?(?:-|–|to)\s?(\d+(?:\.\d+)?)(?![\d.]*\d)",
                  lambda m: f"{_plain_number(m.group(1))} to {_plain_number(m.group(2))}", text)
    text = re.sub(r"(?<![\w.])-(?=\d)", "minus ", text)
    return re.sub(_NUM, lambda m: " " + _plain_number(m.group(0)) + " ", text)


def normalize_text(text: str) -> str:
    """Rewrite `text` into words a voice can say. Idempotent on its own output."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = _markdown(text)
    text = re.sub(r"\b(?:https?://\S+|www\.\S+|[\w.+-]+@[\w-]+\.[\w.]+|[\w-]+\.(?:com|org|net|io|dev|ai|edu|gov)"
                  r"(?:/\S*)?)(?<![.,;:!?)])", _url, text)
    text = re.sub(r"([$€£¥])\s?(" + _NUM + r")(?:\s?(thousand|million|billion|trillion|k|m|bn|b)\b)?",
                  _currency, text, flags=re.I)
    text = re.sub(r"(" + _NUM + r")\s?(%|percent\b)", lambda m: f"{_plain_number(m.group(1))} percent", text)
    text = re.sub(r"\b(\d{1,2}):(\d{2})(?::\d{2})?(?:\s*" + _MERIDIEM + ")?", _time, text, flags=re.I)
    text = re.sub(r"\b(\d{1,2})\s*" + _MERIDIEM,
                  lambda m: f"{cardinal(int(m.group(1)))} {_meridiem(m, m.group(2))}", text, flags=re.I)
    text = re.sub(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b|\b(\d{1,2})/(\d{1,2})/(\d{2}|\d{4})\b",
                  lambda m: _numeric_date(_Groups(m)), text)
    text = re.sub(r"\b(" + _MONTH_RE + r")\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b(?:,?\s+(\d{4})\b)?",
                  _month_day, text)
    text = re.sub(r"(?<![\w.])([A-Za-z]\.[A-Za-z]|[A-Za-z]{2,6})\.(?=\s|$|,)", _abbreviation, text)
    text = re.sub(r"\b(No|no)\.\s?(?=\d)", "number ", text)
    text = _numbers(text)
    for sym, spoken in _SYMBOLS.items():
        text = text.replace(sym, spoken)
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    return re.sub(r"\s+", " ", text).strip()


class _Groups:
    """Adapts the two alternatives of the numeric-date pattern to one (a, b, c) match."""

    def __init__(self, m: re.Match) -> None:
        g = m.groups()
        self._g = g[:3] if g[0] else g[3:]
        self._all = m.group(0)

    def group(self, i: int) -> str:
        return self._all if i == 0 else self._g[i - 1]

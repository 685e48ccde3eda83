"""``format`` values as regexes over the string's value (no character here needs a JSON escape).

Syntax only (RFC 3339, RFC 4122, dotted quads, ...), not calendar validity (``2023-02-31`` passes). A format not
listed here (``int32``, ``uri-reference``, custom ones) constrains nothing: the value is a plain string. These are
what the grammar accepts; the strictness of other implementations differs (LLGuidance and XGrammar have their own
lists), which the audits show.
"""
from __future__ import annotations

_DATE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_H16 = r"[0-9a-fA-F]{1,4}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

FORMATS = {
    "date-time": _DATE + r"[Tt ]" + _TIME,
    "date": _DATE,
    "time": _TIME,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": rf"{_OCTET}(?:\.{_OCTET}){{3}}",
    # any colon-separated hex groups with at most one '::' is not regular to count exactly; the usual textual
    # forms: 8 groups, or a '::' with fewer, optionally an IPv4 tail
    "ipv6": rf"(?:(?:{_H16}:){{7}}{_H16}|(?:{_H16}:){{0,7}}:(?::{_H16}){{0,7}}|(?:{_H16}:){{0,6}}:?(?::{_H16}){{0,5}}"
            rf":?{_OCTET}(?:\.{_OCTET}){{3}})",
    "hostname": rf"{_LABEL}(?:\.{_LABEL})*",
    "email": r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
             r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*",
    # RFC 3986 absolute URI: scheme ':' then any run of URI characters (percent-escapes included)
    "uri": r"[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*",
}


def format_regex(name: str) -> str | None:
    """The regex of a known format's values, else None (the format constrains nothing)."""
    return FORMATS.get(name)

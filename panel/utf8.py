"""Which query or form fields were not valid UTF-8 as sent, so none becomes U+FFFD.

Django decodes a query string or a form body leniently: `%FF` becomes U+FFFD, raw non-UTF-8 bytes
are read as Latin-1, and nothing tells the view. The panel must not turn either into a prompt or a
session ID, so it reads the bytes as they were sent, strictly, and refuses what does not decode
(the JSON API does the same for its bodies).
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

REPLACEMENT = "\ufffd"


def undecodable_pairs(raw: bytes) -> list[str]:
    """The names of the fields in an application/x-www-form-urlencoded string whose name or value
    is not valid UTF-8 once percent-decoded, in order (a name that is itself undecodable is given
    with U+FFFD in it, as Django's QueryDict names it)."""
    names = []
    for pair in raw.split(b"&"):
        if not pair:
            continue
        name, _, value = pair.partition(b"=")
        name_bytes = unquote_to_bytes(name.replace(b"+", b" "))
        try:
            name_bytes.decode("utf-8")
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            shown = name_bytes.decode("utf-8", errors="replace")
            if shown not in names:
                names.append(shown)
    return names


def undecodable_query(request) -> list[str]:
    """The query parameters of a request that were not valid UTF-8."""
    scope = getattr(request, "scope", None)
    if scope is not None:  # ASGI (uvicorn): the bytes as sent
        raw = scope.get("query_string", b"")
        raw = raw.encode() if isinstance(raw, str) else raw
    else:  # WSGI (PEP 3333): the bytes as sent, one per code point of a Latin-1 string
        raw = request.META.get("QUERY_STRING", "").encode("iso-8859-1")
    return undecodable_pairs(raw)


def undecodable_form(request) -> list[str]:
    """The form fields of a POST that were not valid UTF-8."""
    if request.method != "POST":
        return []
    if request.content_type == "application/x-www-form-urlencoded":
        return undecodable_pairs(request.body)  # QueryDict read request.body, so it is still there
    # multipart/form-data: Django's parser has already put U+FFFD for undecodable bytes and the raw
    # body is gone (the CSRF check reads the form first), so a U+FFFD is taken for one. A person's
    # browser sends the panel's forms url-encoded; only a hand-made multipart post can meet this.
    return [
        name
        for name, values in request.POST.lists()
        if REPLACEMENT in name or any(REPLACEMENT in value for value in values)
    ]

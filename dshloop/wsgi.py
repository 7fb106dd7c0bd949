"""The WSGI application: Django, plus what Django leaves to the server and servers differ on.

1. A body without Content-Length (`Transfer-Encoding: chunked`): Django reads CONTENT_LENGTH bytes
   and, with none, an empty body, so a valid chunked request would fail as "no body". Servers that
   de-chunk say so with `wsgi.input_terminated` (gunicorn, mod_wsgi, uWSGI; dshloop.asgi for
   a2wsgi): then the input is read to its end, at most DATA_UPLOAD_MAX_MEMORY_SIZE + 1 bytes, and
   handed to Django with its length, so the size limit holds as for any other body (413 on /api/).
2. The caller's session header is UTF-8 (contract §2: a session ID is any printable Unicode), but
   WSGI hands every header over as Latin-1 (PEP 3333). It is decoded here, once; bytes that are not
   UTF-8 survive as lone surrogates, which dshloop.api refuses (422) instead of guessing.
3. A path is bytes (PATH_INFO, as Latin-1); Django decodes it to text, re-escaping bytes that are
   not UTF-8 ("%FF" stays "%FF"), and overwrites PATH_INFO with that text. The bytes are kept as
   RAW_PATH_INFO, so that dshloop.api can refuse an ID that is not UTF-8 (422) instead.
"""

import io
import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from core.http import CALLER_META_KEY, RAW_PATH_INFO

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dshloop.settings")

UTF8_HEADERS = (CALLER_META_KEY,)
_READ_SIZE = 64 * 1024


def _read_terminated_input(environ) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    stream, chunks, size = environ["wsgi.input"], [], 0
    while limit is None or size <= limit:
        chunk = stream.read(_READ_SIZE if limit is None else min(_READ_SIZE, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    # Over the limit, the rest is left unread: Django refuses a CONTENT_LENGTH above the limit
    # before it reads a byte (RequestDataTooBig), and the server discards what was not read.
    body = b"".join(chunks)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


def server_fixes(app):
    """WSGI middleware for the rules above; a no-op for requests they do not concern."""

    def fixed(environ, start_response):
        environ[RAW_PATH_INFO] = environ.get("PATH_INFO", "")
        if environ.get("wsgi.input_terminated") and not environ.get("CONTENT_LENGTH"):
            _read_terminated_input(environ)
        for key in UTF8_HEADERS:
            value = environ.get(key)
            if value and not value.isascii():
                try:
                    environ[key] = value.encode("latin-1").decode("utf-8", "surrogateescape")
                except UnicodeEncodeError:  # not bytes-as-Latin-1 (an in-process client): text already
                    pass
        return app(environ, start_response)

    return fixed


application = server_fixes(get_wsgi_application())

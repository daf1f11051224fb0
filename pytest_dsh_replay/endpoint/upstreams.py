"""The upstream base URL (``serve --upstream``, ``--dsh-upstream``): what it may be, and the URL each
wire format's call goes to. The one home of that rule.

The two SDK families spell a base URL differently: the OpenAI SDKs' includes the API version
(``https://api.openai.com/v1``) and they append ``/chat/completions``; the Anthropic SDK's has none
(``https://api.anthropic.com``) and it appends ``/v1/messages`` (google-genai's, too, appends
``/v1beta/models/...``). Either form is accepted for every
format, by one rule (:func:`format_url`):

* a base URL whose path has a version segment (``/v1``, ``/v1beta``, ``/v2``: ``v`` and a digit,
  anywhere in the path, e.g. ``https://openrouter.ai/api/v1``,
  ``https://generativelanguage.googleapis.com/v1beta/openai``) gets the format's path after its
  own version segment: ``.../v1/chat/completions``, ``.../v1/messages``, ``.../v1/responses``,
  ``https://generativelanguage.googleapis.com/v1beta`` + ``/models/M:streamGenerateContent?alt=sse``;
* any other base URL (``http://127.0.0.1:8080``, ``https://api.anthropic.com``,
  ``https://gateway.example/anthropic``) gets the format's whole path, ``/v1`` included.

A base URL must be ``http(s)://host[:port][/path]`` without a query, a fragment or credentials:
credentials in a URL (``http://user:pass@host/v1``) would be sent as a second ``Authorization``
beside the key, so they are refused at start-up; the key goes in its environment variable.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..errors import HarnessError

#: What a host may hold: a name's letters (IDN ones too), digits, ``.``, ``-``, ``_``, or an IP literal
#: (``::1``, a zone's ``%``); a space or ``<`` in a host is no URL, however ``urlsplit`` cuts it.
_HOST = re.compile(r"[\w.:%-]+")
#: A space or control character: no URL has one as it is (a path's is percent-encoded, ``%20``).
_UNQUOTED = re.compile(r"[\x00-\x20\x7f]")

#: A path segment naming an API version (``v1``, ``v1beta``, ``v2``).
_VERSION_SEGMENT = re.compile(r"(?i)^v[0-9][a-z0-9]*$")


class UpstreamUrlError(HarnessError):
    """The upstream base URL cannot be used (module doc): a usage error at start-up."""

    code = "ENDPOINT_UPSTREAM"


def check_base_url(url: str, flag: str = "--upstream") -> str:
    """The base URL ``url`` without trailing ``/``, once it is one the endpoint can call (module doc).

    ``flag``: how the caller's option is spelled in the message.

    Raises:
        UpstreamUrlError: not ``http(s)://host[:port][/path]`` (a space or control character, a host
            that is no name or IP address, ``http://a b/v1``); a query or fragment; credentials
            (their password is never shown).
    """
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise UpstreamUrlError(f"{flag} {_shown(url)}: not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UpstreamUrlError(
            f"{flag} {_shown(url)}: give an http(s) base URL, e.g. https://api.openai.com/v1 or "
            "https://api.anthropic.com"
        )
    unquoted = _UNQUOTED.search(url.strip())
    if unquoted is not None:
        raise UpstreamUrlError(
            f"{flag} {_shown(url)}: not a URL: {unquoted.group()!r} at character {unquoted.start() + 1} "
            "(a URL has no space or control character; a space in a path is %20)"
        )
    if not _HOST.fullmatch(parts.hostname):
        raise UpstreamUrlError(
            f"{flag} {_shown(url)}: not a URL: its host {parts.hostname!r} is no host name or IP address"
        )
    if parts.username is not None or parts.password is not None:
        raise UpstreamUrlError(
            f"{flag} {_shown(url)}: credentials in the URL are not sent (they would be a second "
            "Authorization beside the API key); give the URL without them and the key in its "
            "environment variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, or the one --api-key-env names)"
        )
    if parts.query or parts.fragment:
        raise UpstreamUrlError(
            f"{flag} {_shown(url)}: a base URL has no query or fragment; the endpoint appends each "
            "format's path to it"
        )
    return url.strip().rstrip("/")


def format_url(base_url: str, path: str) -> str:
    """The URL a call of the format served at ``path`` (``/v1/chat/completions``) goes to, from a base
    URL :func:`check_base_url` accepted (module doc: the version segment rule)."""
    base = base_url.rstrip("/")
    segments = urlsplit(base).path.split("/")
    first = path.split("/", 2)[1] if path.startswith("/") else ""
    if any(_VERSION_SEGMENT.match(s) for s in segments) and _VERSION_SEGMENT.match(first):
        return base + path[len("/" + first) :]
    return base + path


def _shown(url: str) -> str:
    """``url`` with the password of its credentials shown as ``***``."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url)


__all__ = ["UpstreamUrlError", "check_base_url", "format_url"]

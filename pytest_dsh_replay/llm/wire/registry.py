"""The wire formats the endpoint serves: one :class:`Format` object per API, one line each in :data:`FORMATS`.

A format object carries everything that is true of one API, so the endpoint's server (its routes), its
upstream client (URL, key header), the ``dsh_endpoint`` fixture's environment, ``serve --help``, the
prefix cache and the recording's manifest ask it instead of branching on format names:

* ``routes``: the aiohttp route patterns it is served at, with path parameters where the API puts
  them in the path (``/v1beta/models/{model}:generateContent``); the first is the format's ``key``,
  the name the manifest's ``formats`` lists and the endpoint keys its tables by;
* ``key_envs``: the environment variables its SDKs read the key from, in the order the endpoint reads
  an upstream key (``GEMINI_API_KEY`` before ``GOOGLE_API_KEY``);
* ``key_header``: how the key is sent upstream: ``Authorization`` as a Bearer token, or the header
  named (``x-api-key``, ``x-goog-api-key``); the module's ``upstream_headers(key)`` adds what else the
  API needs (Anthropic's ``anthropic-version``);
* ``base_urls``: each client's base-URL variable and the suffix its value has after the endpoint's
  root (``http://127.0.0.1:PORT``, with its path prefix on the shared server) (``OPENAI_BASE_URL``,
  and ``OPENAI_API_BASE`` that LlamaIndex's ``OpenAI``
  LLM, LangChain's older ``ChatOpenAI`` and LiteLLM read: ``/v1``; LiteLLM's Anthropic provider reads
  ``ANTHROPIC_API_BASE``; ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_BASE`` and ``GOOGLE_GEMINI_BASE_URL``:
  none, the SDK appends the version itself);
* ``module``: the ``llm/wire`` module (or package, such as ``chat``, split by direction) reading a
  request, translating upstream events into chunks and encoding chunks back (:mod:`.base` spells the
  interface out), imported on first use so this table costs the CLI's start-up nothing.

A format whose routes have path parameters gives its module a ``bind(params, path)`` returning the request's
wire object (the model and action of the path bound); the others are their module. The URL rule (which
upstream URL a call goes to) is :func:`~pytest_dsh_replay.endpoint.upstreams.format_url` over the bound
wire object's ``upstream_path``, or its ``PATH``.

Adding a format: its module (or package) under ``llm/wire/``, written on :class:`~.parts.AnswerParts`, and
one line in :data:`FORMATS`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, cast

from msgspec import Struct

from .base import WireFormat


class Format(Struct, frozen=True):
    """One wire format (module doc): its routes, key variables and header, SDK base-URL forms and module.

    ``name``: a short name (``"chat"``, ``"gemini"``); ``module``: the ``llm/wire`` module's dotted name
    relative to this package (``".gemini"``).
    """

    name: str
    title: str
    routes: tuple[str, ...]
    key_envs: tuple[str, ...]
    key_header: str
    base_urls: tuple[tuple[str, str], ...]
    module: str
    #: the paths of this API beside its routes, as prefixes (``/v1/messages/``) or route patterns
    #: (``/v1/models/{model}:{action}``): a refusal of a request there takes this format's error shape
    #: (OpenAI's is the default)
    family: tuple[str, ...] = ()
    #: ``"conversation"`` (a model call: bound to a conversation, its answer chunks) or ``"embeddings"``
    #: (one request, one answer, kept in the recording's embeddings log: ``endpoint/embeddings.py``)
    kind: str = "conversation"

    def matches(self, path: str) -> bool:
        """Whether ``path`` is one of this format's routes (a path parameter matching one segment)."""
        return any(_route_regex(route).fullmatch(path) for route in self.routes)

    def in_family(self, path: str) -> bool:
        """Whether ``path`` belongs to this format's API (:attr:`family`)."""
        return any(_route_regex(p).fullmatch(path) if "{" in p else path.startswith(p) for p in self.family)

    @property
    def key(self) -> str:
        """The format's name in the manifest and the endpoint's tables: its first route pattern."""
        return self.routes[0]

    @property
    def wire(self) -> Any:
        """The format's ``llm/wire`` module (imported now if it was not)."""
        return importlib.import_module(self.module, __package__)

    def bind(self, params: Mapping[str, str], path: str) -> WireFormat:
        """The wire object serving one request for ``path`` whose route matched with path parameters
        ``params`` (``{"model": "gemini-2.5-flash"}``): the module's ``bind(params, path)``, or the
        module itself for a route without parameters."""
        wire = self.wire
        binder = getattr(wire, "bind", None)
        return cast(WireFormat, binder(params, path) if binder is not None else wire)

    def upstream_headers(self, wire: WireFormat, api_key: str | None) -> dict[str, str]:
        """The headers an upstream call of ``wire`` authenticates with: the module's own
        ``upstream_headers`` (which sends the key as the API does), else ``key_header`` with the key
        (a Bearer token in ``Authorization``); none without a key."""
        own = getattr(wire, "upstream_headers", None)
        if callable(own):
            return cast(dict[str, str], own(api_key))
        if not api_key:
            return {}
        if self.key_header.lower() == "authorization":
            return {"Authorization": f"Bearer {api_key}"}
        return {self.key_header: api_key}

    def upstream_path(self, wire: WireFormat) -> str:
        """The path (and query) of the upstream call of ``wire``, before the URL rule puts it under the
        base URL: the bound wire object's ``upstream_path`` (a path with parameters, always streamed),
        else the format's ``PATH``."""
        return cast(str, getattr(wire, "upstream_path", wire.PATH))


def _gemini_routes(*actions: str) -> tuple[str, ...]:
    """Gemini's routes of ``actions``: the model in the path, both API versions (``v1beta`` first)."""
    return tuple(
        f"/{version}/models/{{model}}:{action}" for version in ("v1beta", "v1") for action in actions
    )


#: Every format the endpoint serves, one line each.
FORMATS: tuple[Format, ...] = (
    Format(
        "chat",
        "OpenAI Chat Completions",
        ("/v1/chat/completions",),
        ("OPENAI_API_KEY",),
        "Authorization",
        (("OPENAI_BASE_URL", "/v1"), ("OPENAI_API_BASE", "/v1")),
        ".chat",
    ),
    Format(
        "messages",
        "Anthropic Messages",
        ("/v1/messages",),
        ("ANTHROPIC_API_KEY",),
        "x-api-key",
        (("ANTHROPIC_BASE_URL", ""), ("ANTHROPIC_API_BASE", "")),
        ".messages",
        ("/v1/messages/",),
    ),
    Format(
        "responses",
        "OpenAI Responses",
        ("/v1/responses",),
        ("OPENAI_API_KEY",),
        "Authorization",
        (("OPENAI_BASE_URL", "/v1"), ("OPENAI_API_BASE", "/v1")),
        ".responses",
    ),
    Format(
        "gemini",
        "Google Gemini (AI Studio)",
        _gemini_routes("generateContent", "streamGenerateContent"),
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        "x-goog-api-key",
        # google-genai adds the version itself; LiteLLM's gemini/ provider reads its base with it
        (("GOOGLE_GEMINI_BASE_URL", ""), ("GEMINI_API_BASE", "/v1beta")),
        ".gemini",
        ("/v1beta/", "/v1/models/{model}:{action}"),
    ),
    Format(
        "embeddings",
        "OpenAI Embeddings",
        ("/v1/embeddings",),
        ("OPENAI_API_KEY",),
        "Authorization",
        (("OPENAI_BASE_URL", "/v1"), ("OPENAI_API_BASE", "/v1")),
        ".embeddings",
        kind="embeddings",
    ),
    Format(
        "gemini-embeddings",
        "Google Gemini embeddings",
        _gemini_routes("embedContent", "batchEmbedContents"),
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        "x-goog-api-key",
        (("GOOGLE_GEMINI_BASE_URL", ""),),
        ".embeddings",
        kind="embeddings",
    ),
)


#: what a path parameter may be (a model name: ``gemini-2.5-flash``); the route's ``[^/]`` alone admits
#: ``..`` and, decoded from ``%2F``, ``/``, which would move the upstream call to another path with the key
_PATH_PARAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def path_param_problem(params: Mapping[str, str]) -> str | None:
    """Why a request's path parameters (``{"model": ...}``, decoded) cannot be forwarded: a value that
    is not a model name (letters, digits, ``.``, ``_``, ``-``; at most 200; not ``..``), or ``None``."""
    for name, value in params.items():
        if not _PATH_PARAM.fullmatch(value) or ".." in value:
            shown = value if len(value) <= 80 else value[:77] + "..."
            return (
                f"the path's {{{name}}} must be a model name (letters, digits, '.', '_', '-'; at most 200), "
                f"got {shown!r}: refused, nothing forwarded"
            )
    return None


def _route_regex(route: str) -> re.Pattern[str]:
    """A route pattern as aiohttp reads it: ``{name}`` one path segment's characters, the rest literal."""
    parts = re.split(r"(\{[^{}]+\})", route)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


#: key (first route) -> format.
BY_KEY: dict[str, Format] = {f.key: f for f in FORMATS}


def sdk_environment(url: str) -> dict[str, str]:
    """The SDK base-URL variables pointing at an endpoint whose root is ``url`` (``http://HOST:PORT`` and
    the endpoint's path prefix, if any): each format's ``base_urls`` with its suffix, every variable once."""
    out: dict[str, str] = {}
    for fmt in FORMATS:
        for env, suffix in fmt.base_urls:
            out.setdefault(env, url + suffix)
    return out


def key_variables() -> list[str]:
    """Every format's key variables, each once, in table order."""
    out: list[str] = []
    for fmt in FORMATS:
        out += [env for env in fmt.key_envs if env not in out]
    return out


def client_key_variables() -> tuple[list[str], list[str]]:
    """The key variables a client pointed at the endpoint is given a (dummy) key in, and those taken
    from it: each format's first variable, its others removed, each variable once (a variable one format
    sets is never removed). One variable per API, because an SDK reading two warns when both are set
    (google-genai: "Both GOOGLE_API_KEY and GEMINI_API_KEY are set"), and a key left in the other would
    be the user's own, which the client must not hold: ``GEMINI_API_KEY`` is read by google-genai,
    LiteLLM's ``gemini/`` provider and pydantic-ai alike.

    Returns:
        ``(given, removed)``: ``["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"]``,
        ``["GOOGLE_API_KEY"]``.
    """
    given: list[str] = []
    for fmt in FORMATS:
        if fmt.key_envs[0] not in given:
            given.append(fmt.key_envs[0])
    return given, [env for env in key_variables() if env not in given]


__all__ = [
    "BY_KEY",
    "FORMATS",
    "Format",
    "client_key_variables",
    "key_variables",
    "path_param_problem",
    "sdk_environment",
]

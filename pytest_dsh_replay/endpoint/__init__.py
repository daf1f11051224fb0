"""A loopback HTTP endpoint that records and replays any agent speaking an OpenAI-style API.

Beside ``scenario/``: it reuses the replay engine (``ReplayModel``, the request check, the loaders), the
scenario's harvest, scrubbing and the one stable writer, and the session store with its persistence
backends. Modules: :mod:`.conversations` (binding requests to conversations), :mod:`.record` (sessions
written as the bundled agent would, the upstream model, the recorder), :mod:`.prefixes` (the
prefix cache: a growing history is mapped and keyed once), :mod:`.formats` (the table of served wire
formats), :mod:`.recording` (the start-up gate of a replay, the ``endpoint.json`` manifest),
:mod:`.server` (the aiohttp app, the plans), :mod:`.kept` (the run a recording with problems keeps
beside its directory, ``dsh-replay accept``), :mod:`.fixture` (the pytest fixture's body).
"""

from __future__ import annotations

from .conversations import CONVERSATION_HEADER, PARENT_HEADER, Binder, BindingError
from .formats import FORMATS
from .recording import EndpointManifestError, EndpointRecordingError, check_recording, read_manifest
from .server import Endpoint, EndpointConfig, EndpointConfigError, EndpointOutcome, EndpointThread

__all__ = [
    "CONVERSATION_HEADER",
    "FORMATS",
    "PARENT_HEADER",
    "Binder",
    "BindingError",
    "Endpoint",
    "EndpointConfig",
    "EndpointConfigError",
    "EndpointManifestError",
    "EndpointOutcome",
    "EndpointRecordingError",
    "EndpointThread",
    "check_recording",
    "read_manifest",
]

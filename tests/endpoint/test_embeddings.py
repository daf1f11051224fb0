"""Embedding calls through the endpoint (``endpoint/embeddings.py``): the openai SDK's
``embeddings.create`` (a string, a list, token arrays, ``dimensions``, float and base64), langchain-openai's
``OpenAIEmbeddings``, a retrieval agent (embed the documents and a question, rank, answer with the best),
and google-genai's ``embed_content``: recorded from fake upstreams on 127.0.0.1 into ``embeddings.jsonl``,
replayed offline three times with the same vectors, red naming the changed field, unused calls reported."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.embeddings import read_calls

from .conftest import record_then_replay as recorded_and_replayed
from .conftest import served
from .embeddings_upstream import FakeEmbeddingsUpstream

openai = pytest.importorskip("openai")

UPSTREAM_KEY = "sk-upstream-embeddings-0123456789"
MODEL = "text-embedding-3-small"
DOCUMENTS = [
    "The Eiffel tower is in Paris.",
    "The Colosseum is in Rome.",
    "Tokyo is known for sushi.",
]


def record_then_replay(tmp_path: Path, upstream: FakeEmbeddingsUpstream, agent: Callable[[str], Any]) -> Any:
    """The agent recorded from ``upstream``, then replayed three times offline (``conftest``)."""
    return recorded_and_replayed(tmp_path, upstream, agent, UPSTREAM_KEY)


def sdk_calls(url: str) -> list[Any]:
    client = openai.OpenAI(base_url=url, api_key="client-key", max_retries=0)
    out = []
    out.append(client.embeddings.create(model=MODEL, input="paris weather").data[0].embedding)
    out.append([d.embedding for d in client.embeddings.create(model=MODEL, input=["rome", "tokyo"]).data])
    out.append(client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4, 5]]).data[1].embedding)
    out.append(client.embeddings.create(model=MODEL, input="city", dimensions=4).data[0].embedding)
    floats = client.embeddings.create(model=MODEL, input="food", encoding_format="float")
    out.append(floats.data[0].embedding)
    return out


def test_the_openai_sdk_records_and_replays_embeddings(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    recorded = record_then_replay(tmp_path, emb_upstream, sdk_calls)
    assert recorded[0][0] == 1.0 and len(recorded[3]) == 4  # paris counted; dimensions cut the vector
    calls = read_calls(tmp_path / "embeddings.jsonl")
    assert [c["request"].get("encoding_format") for c in calls] == ["base64"] * 4 + ["float"]
    # kept as sent: base64 stays the upstream's text, floats its numbers
    assert isinstance(calls[0]["response"]["data"][0]["embedding"], str)
    assert isinstance(calls[4]["response"]["data"][0]["embedding"], list)
    assert {k for k in emb_upstream.keys} == {f"Bearer {UPSTREAM_KEY}"}
    # a re-record of the same calls keeps the log's bytes (stable)
    before = (tmp_path / "embeddings.jsonl").read_bytes()
    up = FakeEmbeddingsUpstream()
    up.start()
    try:
        with served(tmp_path, RecordMode.REWRITE, up.url, api_key=UPSTREAM_KEY) as ep:
            sdk_calls(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        up.stop()
    assert (tmp_path / "embeddings.jsonl").read_bytes() == before


def test_a_changed_input_is_red_naming_it_and_unused_calls_are_reported(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        client.embeddings.create(model=MODEL, input=["rome", "tokyo"])
        client.embeddings.create(model=MODEL, input="paris")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    emb_upstream.stop()
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            client.embeddings.create(model=MODEL, input=["rome", "kyoto"])
    assert "input[1]" in str(raised.value)
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "input[1]" in report and "'tokyo'" in report
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        client.embeddings.create(model=MODEL, input="paris")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "1 recorded embedding call(s) left unused" in ep.outcome.report()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


def retrieval_agent(url: str, question: str = "Where is the Eiffel tower?") -> str:
    """A retrieval step as langchain-openai's docs show one: embed the documents and the question,
    rank by cosine similarity, answer with the best document in the prompt."""
    langchain_openai = pytest.importorskip("langchain_openai")
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=MODEL, base_url=url, api_key="client-key", check_embedding_ctx_length=False, max_retries=0
    )
    index = embeddings.embed_documents(DOCUMENTS)
    query = embeddings.embed_query(question)
    best = max(range(len(DOCUMENTS)), key=lambda i: cosine(index[i], query))
    chat = openai.OpenAI(base_url=url, api_key="client-key", max_retries=0)
    reply = chat.chat.completions.create(
        model="fake-1",
        messages=[{"role": "user", "content": f"Context: {DOCUMENTS[best]}\nQuestion: {question}"}],
    )
    return str(reply.choices[0].message.content)


def test_a_retrieval_agent_records_and_replays_offline(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    answer = record_then_replay(tmp_path, emb_upstream, retrieval_agent)
    assert (
        answer == "Answer from: Context: The Eiffel tower is in Paris.\nQuestion: Where is the Eiffel tower?"
    )
    assert len(read_calls(tmp_path / "embeddings.jsonl")) == 2  # the index, the question


def test_gemini_embed_content_records_and_replays(tmp_path: Path) -> None:
    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    from .gemini_upstream import FakeGeminiUpstream

    up = FakeGeminiUpstream()
    up.start()

    def agent(url: str) -> list[Any]:
        options = types.HttpOptions(base_url=url.removesuffix("/v1"))
        client = genai.Client(api_key="client-key", http_options=options)
        one = client.models.embed_content(model="gemini-embedding-001", contents="paris")
        many = client.models.embed_content(
            model="gemini-embedding-001",
            contents=["rome", "tokyo"],
            config=types.EmbedContentConfig(output_dimensionality=4),
        )
        return [e.values for e in [*(one.embeddings or []), *(many.embeddings or [])]]

    vectors = record_then_replay(tmp_path, up, agent)
    assert len(vectors) == 3 and len(vectors[1]) == 4
    routes = [c["route"] for c in read_calls(tmp_path / "embeddings.jsonl")]
    # google-genai embeds through :batchEmbedContents, a route of its own in the log (its shapes differ)
    assert routes == ["/v1beta/models/{model}:batchEmbedContents"] * 2
    assert json.dumps(read_calls(tmp_path / "embeddings.jsonl")[0]["request"]).startswith(
        '{"model": "gemini-embedding-001"'
    )


def test_masks_apply_and_secrets_are_scrubbed(tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream) -> None:
    """A volatile value in an input is masked on both sides of the check; the upstream key in an input
    is written redacted, and the same input replays against it (scrubbed before it is compared)."""
    from pytest_dsh_replay.session.masks import Masks

    masks = Masks.parse([r"order [0-9]+"], source="--dsh-mask")

    def agent(order: str) -> Callable[[str], Any]:
        def run(url: str) -> Any:
            client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
            inputs = [f"paris order {order}", f"secret {UPSTREAM_KEY}"]
            return [d.embedding for d in client.embeddings.create(model=MODEL, input=inputs).data]

        return run

    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY, masks=masks) as ep:
        recorded = agent("1234")(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    text = (tmp_path / "embeddings.jsonl").read_text()
    assert UPSTREAM_KEY not in text and "REDACTED" in text
    emb_upstream.stop()
    with served(tmp_path, masks=masks) as ep:
        assert agent("5678")(ep.url) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    # without the mask the order number is a change
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match=r"input\[0\]"):
        agent("5678")(ep.url)


def test_show_validate_diff_and_the_report_read_the_embeddings_log(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    with served(tmp_path / "a", RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        retrieval_agent(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    runner = CliRunner()
    shown = runner.invoke(main, ["show", str(tmp_path / "a")])
    assert shown.exit_code == 0, shown.output
    assert "embeddings.jsonl" in shown.output
    valid = runner.invoke(main, ["validate", str(tmp_path / "a")])
    assert valid.exit_code == 0 and "2 log(s)" in valid.output, valid.output
    (tmp_path / "b").mkdir()
    for f in (tmp_path / "a").iterdir():
        (tmp_path / "b" / f.name).write_bytes(f.read_bytes())
    log = tmp_path / "b" / "embeddings.jsonl"
    log.write_text(log.read_text().replace("Tokyo is known for sushi.", "Kyoto is known for tea."))
    diff = runner.invoke(main, ["diff", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "data.request.input[2]" in diff.output, diff.output
    bad = log.read_text().splitlines()
    log.write_text("\n".join([bad[0], "{not json", *bad[2:]]) + "\n")
    invalid = runner.invoke(main, ["validate", str(tmp_path / "b")])
    assert invalid.exit_code != 0 and "embeddings.jsonl" in invalid.output, invalid.output
    page = tmp_path / "report.html"
    made = runner.invoke(main, ["report", str(tmp_path / "a"), "-o", str(page)])
    assert made.exit_code == 0, made.output
    assert "embedding calls" in page.read_text()


def test_show_presents_the_embeddings_log_as_its_calls(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """``show`` of a recording with embedding calls: the sessions' tree, then the embeddings log as what
    it is, its calls numbered as a session's turns are (route, model, inputs, vectors, status), never a
    session of its own; an embeddings-only recording alike.

    Regression: the log was a tree node like a session's, ``embeddings.jsonl parent
    dsh-replay-embeddings (2 events)``, its header's id for a session id and its calls for events."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    with served(tmp_path / "a", RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        retrieval_agent(ep.url)
    with served(tmp_path / "b", RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        sdk_calls(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    shown = CliRunner().invoke(main, ["show", str(tmp_path / "a")])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert "dsh-replay-embeddings" not in shown.output
    assert lines[-3:] == [
        "└── embeddings.jsonl: 2 embedding call(s)",
        "    ├── call #1 (seq 0): /v1/embeddings text-embedding-3-small: 3 input(s), 3 vector(s), HTTP 200",
        "    └── call #2 (seq 1): /v1/embeddings text-embedding-3-small: 1 input(s), 1 vector(s), HTTP 200",
    ]
    assert lines[1].startswith("├── session.jsonl parent ")
    only = CliRunner().invoke(main, ["show", str(tmp_path / "b")])
    assert only.exit_code == 0, only.output
    calls = read_calls(tmp_path / "b" / "embeddings.jsonl")
    assert only.output.splitlines()[:2] == [
        str(tmp_path / "b"),
        f"└── embeddings.jsonl: {len(calls)} embedding call(s)",
    ]


def test_an_upstream_refusal_reaches_the_client_and_is_not_recorded(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key="wrong-key-0123456789") as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
            client.embeddings.create(model=MODEL, input="paris")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "upstream answered HTTP 401: Incorrect API key provided" in ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()


def test_dimensions_and_encoding_are_checked_and_new_episodes_adds_calls(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A change of ``dimensions`` or ``encoding_format`` is named; ``new_episodes`` serves the recorded
    call and forwards and records the new one."""
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        client.embeddings.create(model=MODEL, input="paris", dimensions=8, encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    for change, named in (
        ({"dimensions": 4}, "dimensions"),
        ({"encoding_format": "base64"}, "encoding_format"),
    ):
        with served(tmp_path) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
            asked: dict[str, Any] = {"dimensions": 8, "encoding_format": "float", **change}
            with pytest.raises(openai.BadRequestError, match=named):
                client.embeddings.create(model=MODEL, input="paris", **asked)
    with served(tmp_path, RecordMode.NEW_EPISODES, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=0)
        client.embeddings.create(model=MODEL, input="paris", dimensions=8, encoding_format="float")
        client.embeddings.create(model=MODEL, input="rome", encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert len(emb_upstream.embedding_requests) == 2  # the recorded call was served, not forwarded
    assert [c["request"]["input"] for c in read_calls(tmp_path / "embeddings.jsonl")] == ["paris", "rome"]


def test_a_recording_counts_its_embedding_calls_as_sent_upstream(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A retrieval agent's recording run sends every request upstream, and its summary says so.

    Regression: the embedding calls were counted as replayed ("from 3 request(s): 2 replayed, 1 sent
    upstream") because only the model's requests were counted as sent."""
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        retrieval_agent(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    notes = "\n".join(ep.outcome.notes)
    assert "from 3 request(s) into" in notes and "replayed" not in notes, notes

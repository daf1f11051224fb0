"""The embeddings log held to one rule (``recording/embeddings.py``): what the endpoint serves from,
``validate`` reports and ``show`` prints are the same calls, read by the same reader; an embedding body
is read and typed before anything is forwarded; the log is written where the run's conversations go.

Each case below was found by trying to break the endpoint with hand-edited logs and odd requests: before,
a hand-edited ``status`` gave a 500 or a bad status line on replay while ``validate`` called the log
clean, ``show`` crashed on a ``request`` that was a list, a wrongly typed body was forwarded upstream, a
call whose line passed the line limit was recorded and then refused on replay, a run with one bad
request lost its good embedding calls, and a failed test's embedding calls were lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.embeddings import call_problem, read_calls

from .conftest import served
from .embeddings_upstream import FakeEmbeddingsUpstream

openai = pytest.importorskip("openai")

UPSTREAM_KEY = "sk-upstream-embeddings-0123456789"
MODEL = "text-embedding-3-small"


def client(url: str) -> Any:
    return openai.OpenAI(base_url=url, api_key="client-key", max_retries=0)


def recorded(tmp_path: Path, upstream: FakeEmbeddingsUpstream) -> Path:
    """A recording of two embedding calls (``paris``, ``rome``, floats) in ``tmp_path``."""
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key=UPSTREAM_KEY) as ep:
        for text in ("paris", "rome"):
            client(ep.url).embeddings.create(model=MODEL, input=text, encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return tmp_path / "embeddings.jsonl"


def edit_call(log: Path, line: int, edit: Any) -> None:
    """Apply ``edit(data)`` to the call on 1-based ``line`` of ``log``."""
    lines = log.read_text().splitlines()
    event = json.loads(lines[line - 1])
    edit(event["data"])
    lines[line - 1] = json.dumps(event)
    log.write_text("\n".join(lines) + "\n")


def validate(path: Path) -> Any:
    return CliRunner().invoke(main, ["validate", str(path)])


@pytest.mark.parametrize("status", [404, "200", None, 99, True])
def test_a_hand_edited_status_is_refused_alike_by_validate_and_replay(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream, status: Any
) -> None:
    """Before: replay answered a 500 (or wrote a bad status line) while validate called the log clean."""
    log = recorded(tmp_path, emb_upstream)
    edit_call(log, 2, lambda data: data.__setitem__("status", status))
    result = validate(tmp_path)
    assert result.exit_code != 0, result.output
    assert "EMBEDDINGS_BAD_LOG" in result.output and "embeddings.jsonl:2" in result.output, result.output
    assert "status must be an HTTP success status" in result.output
    with pytest.raises(HarnessError, match=r"embeddings\.jsonl:2: .*status must be"), served(tmp_path):
        pass


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d.__setitem__("route", 5), "route must be one of"),
        (lambda d: d.__setitem__("request", ["paris"]), "request must be a JSON object"),
        (lambda d: d.__setitem__("response", None), "response must be a JSON object"),
        (
            lambda d: d["request"].__setitem__("dimensions", "8"),
            "request.dimensions must be a positive integer",
        ),
        (
            lambda d: d["response"]["data"][0].__setitem__("embedding", "%%not base64%%"),
            "response.data[0].embedding must be a list of numbers",
        ),
    ],
)
def test_validate_show_and_replay_read_a_damaged_call_alike(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream, edit: Any, said: str
) -> None:
    """Before: validate accepted each of these, replay refused some and served the others as they were,
    and ``show`` crashed on a ``request`` that was a list."""
    log = recorded(tmp_path, emb_upstream)
    edit_call(log, 2, edit)
    result = validate(tmp_path)
    assert result.exit_code != 0 and said in result.output, result.output
    shown = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert shown.exit_code == 1 and isinstance(shown.exception, SystemExit), shown.output  # its findings
    assert "call #1 (seq 0): not a recorded embedding call: " + said in shown.output
    with pytest.raises(HarnessError, match=r"embeddings\.jsonl:2: "):
        read_calls(log)


def test_a_base64_vector_that_is_not_base64_is_refused() -> None:
    data = {
        "route": "/v1/embeddings",
        "model": MODEL,
        "request": {"model": MODEL, "input": "x", "encoding_format": "base64"},
        "status": 200,
        "response": {"data": [{"embedding": "AAAA!"}]},
    }
    assert "not base64" in (call_problem(data) or "")
    data["response"] = {"data": [{"embedding": "AAAAAA=="}]}  # 4 bytes: one float32
    assert call_problem(data) is None
    data["response"] = {"data": [{"embedding": "AAA="}]}  # 2 bytes: no float32
    assert "decodes to 2 bytes" in (call_problem(data) or "")


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"model": MODEL, "input": "paris", "dimensions": "8"}, "dimensions: must be a positive integer"),
        ({"model": MODEL, "input": "paris", "encoding_format": "hex"}, "encoding_format: must be"),
        ({"model": MODEL, "input": 5}, "input: must be"),
        ({"model": MODEL, "input": ["a", 1]}, "input: must be"),
        ({"model": 7, "input": "paris"}, "model: must be"),
        ({"input": "paris"}, "model: is required"),
    ],
)
def test_a_wrongly_typed_body_is_refused_and_nothing_is_forwarded(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream, body: dict[str, Any], named: str
) -> None:
    """Before: each was forwarded upstream (with the endpoint's key) and its answer recorded."""
    import httpx

    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        answer = httpx.post(f"{ep.url}/embeddings", json=body, timeout=10)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert f"request body: {named}" in message and "nothing forwarded" in message, message
    assert emb_upstream.embedding_requests == []
    assert ep.outcome is not None and not ep.outcome.ok
    assert not (tmp_path / "embeddings.jsonl").exists()


def test_a_call_over_the_line_limit_is_refused_or_not_recorded(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body over the line limit is refused with a 413 as a model call's is; a body under it whose
    answer makes the call's line longer is answered but not recorded, a problem of the run. Before: the
    second was recorded and then refused on replay."""
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "20000")
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        with pytest.raises(openai.APIStatusError) as raised:
            client(ep.url).embeddings.create(model=MODEL, input="paris " * 4000, encoding_format="float")
        assert raised.value.status_code == 413
        # a body under the limit whose answer (2,000 numbers) makes the call's line longer than it
        asked = {"input": "x" * 10_000, "dimensions": 2000, "encoding_format": "float"}
        assert client(ep.url).embeddings.create(model=MODEL, **asked).data
    assert len(emb_upstream.embedding_requests) == 1
    assert ep.outcome is not None and not ep.outcome.ok
    assert "over the line limit of 20000" in ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()


def test_good_calls_of_a_run_with_a_refused_one_are_written(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A first recording whose run had a refused embedding request writes its answered calls, as it
    writes its good conversations, and says so. Before: it said nothing and wrote nothing."""
    import httpx

    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
        httpx.post(f"{ep.url}/embeddings", json={"model": MODEL, "input": 5}, timeout=10)
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "1 embedding call(s): embeddings.jsonl written" in report, report
    assert [c["request"]["input"] for c in read_calls(tmp_path / "embeddings.jsonl")] == ["paris"]


def test_a_failed_tests_embedding_calls_are_kept_and_accept_takes_them(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A failed test's run never becomes the recording silently: its embedding calls go to
    ``.dsh-kept`` with its conversations, the summary says so, ``validate`` of the directory names the
    kept run, and ``dsh-replay accept`` takes them. Before: they were dropped."""
    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

    config = EndpointConfig(tmp_path, record=RecordMode.ONCE, upstream=emb_upstream.url, api_key=UPSTREAM_KEY)
    thread = EndpointThread(config)
    thread_url = thread.start()
    client(thread_url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
    chat = [{"role": "user", "content": "hi"}]
    client(thread_url).chat.completions.create(model="fake-1", messages=chat)
    outcome = thread.stop(failed="assert 1 == 2")
    assert not (tmp_path / "embeddings.jsonl").exists()
    kept = tmp_path / ".dsh-kept" / "embeddings.jsonl"
    assert len(read_calls(kept)) == 1
    assert "dsh-replay accept" in outcome.report()
    # said where it went (before: "embeddings.jsonl written", beside "nothing was recorded into DIR")
    assert "embeddings.jsonl written with the run kept in" in outcome.report(), outcome.report()
    assert "dsh-replay accept" in CliRunner().invoke(main, ["validate", str(tmp_path)]).output
    taken = CliRunner().invoke(main, ["accept", str(tmp_path)])
    assert taken.exit_code == 0, taken.output
    assert len(read_calls(tmp_path / "embeddings.jsonl")) == 1
    with served(tmp_path) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
        client(ep.url).chat.completions.create(model="fake-1", messages=chat)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_rewrite_counts_the_embeddings_log_among_the_files_changed(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """The recording note counts ``embeddings.jsonl`` with the conversations' files; a rewrite that makes
    no embedding call removes a recording's embeddings log. Before: the note said "0 file(s) changed"
    when only the embeddings log changed, and a stale log stayed to be reported unused."""
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
        client(ep.url).chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path, RecordMode.REWRITE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="rome", encoding_format="float")
        client(ep.url).chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert "(1 file(s) changed, 0 removed)" in ep.outcome.report(), ep.outcome.report()
    with served(tmp_path, RecordMode.REWRITE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()
    assert "1 removed" in ep.outcome.report(), ep.outcome.report()


def test_a_mismatch_names_the_re_record_command_and_new_episodes_says_what_was_not_paid(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """An embedding mismatch says how to re-record, as a model call's does; a run replaying part of its
    embedding calls says which were served from the recording and their usage, not paid again. Before:
    neither was said."""
    recorded(tmp_path, emb_upstream)
    with (
        served(tmp_path) as ep,
        pytest.raises(
            openai.BadRequestError,
            match=r"seq 0 of embeddings.jsonl\) differs: .*input.*--record changed .*"
            r"re-record: .* --record rewrite",
        ),
    ):
        client(ep.url).embeddings.create(model=MODEL, input="tokyo", encoding_format="float")
    with served(tmp_path, RecordMode.NEW_EPISODES, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        for text in ("paris", "rome", "tokyo"):
            client(ep.url).embeddings.create(model=MODEL, input=text, encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    said = (
        "3 embedding call(s): embeddings.jsonl written; 2 served from the recording (not paid again: 6 input"
    )
    assert said in ep.outcome.report(), ep.outcome.report()
    assert "1 sent upstream" in ep.outcome.report()


#: model -> (status, body, content type) of an odd upstream answer that is no JSON
NOT_JSON: dict[str, tuple[int, bytes, str]] = {
    "html400": (400, b"<html><body>400 Bad Request \xe2\x80\x94 nginx</body></html>", "text/html"),
    "empty503": (503, b"", "text/plain"),
    "text200": (200, b"not json \xff", "application/json"),
}


class OddEmbeddingsUpstream(FakeEmbeddingsUpstream):
    """The fake embeddings upstream, answering oddly by the model asked: ``deep-N`` a vector list
    nested N levels, ``flaky`` a 429 (with ``Retry-After: 0``) on every other call, ``novectors`` a 200
    without ``data``, ``error200`` a 200 carrying an ``error``, ``short`` one vector for two inputs,
    ``slow`` an answer after 30 s."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.flaky_calls = 0
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()  # a slow answer in progress ends now
        super().stop()

    async def _handle(self, request: Any) -> Any:
        import asyncio

        from aiohttp import web

        if request.match_info["what"] != "embeddings":
            return await super()._handle(request)
        body = await request.json()
        model = body["model"]
        if model.startswith("deep-"):
            nested: Any = [0.5]
            for _ in range(int(model[5:])):
                nested = {"x": nested}
            return web.json_response({"object": "list", "data": [{"embedding": [0.1]}], "extra": nested})
        if model == "flaky":
            self.flaky_calls += 1
            if self.flaky_calls % 2:
                error = {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
                return web.json_response({"error": error}, status=429, headers={"Retry-After": "0"})
        if model == "novectors":
            return web.json_response({"object": "list", "usage": {}})
        if model == "error200":
            return web.json_response({"error": {"message": "quota exceeded"}})
        if model == "short":
            return web.json_response({"object": "list", "data": [{"embedding": [0.1]}]})
        if model in NOT_JSON:  # a gateway's page, a body that is no JSON
            status, text, content_type = NOT_JSON[model]
            return web.Response(status=status, body=text, content_type=content_type)
        if model == "slow":
            for _ in range(300):  # 30 s at most, less when the fake is stopped
                if self.stopping.is_set():
                    break
                await asyncio.sleep(0.1)
        return await super()._handle(request)


@pytest.fixture
def odd_upstream() -> Iterator[OddEmbeddingsUpstream]:
    up = OddEmbeddingsUpstream()
    up.start()
    yield up
    up.stop()


@pytest.mark.parametrize("depth", [200, 300])
def test_an_answer_nested_too_deep_reaches_the_client_and_is_not_recorded(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream, depth: int
) -> None:
    """Before: at depth 300 the client got an untyped 500 and the run exited clean; at depth 200 the call
    was recorded into a line every reader then refused."""
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        import httpx

        answer = httpx.post(f"{ep.url}/embeddings", json={"model": f"deep-{depth}", "input": "x"}, timeout=10)
    assert answer.status_code == 200 and answer.json()["data"] == [{"embedding": [0.1]}]
    assert ep.outcome is not None and not ep.outcome.ok
    assert "the answer is nested deeper than 125 levels: not recorded" in ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()


def test_a_request_nested_too_deep_for_its_line_is_refused(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream
) -> None:
    """A body under the endpoint's nesting limit whose line in the log would pass it is refused before
    it is forwarded. Before: it was forwarded, paid for and written into a line the reader refused."""
    import httpx

    nested: Any = "x"
    for _ in range(126):
        nested = {"x": nested}
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        answer = httpx.post(
            f"{ep.url}/embeddings", json={"model": MODEL, "input": "x", "extra": nested}, timeout=10
        )
    assert answer.status_code == 400 and "nested deeper than 125 levels" in answer.text
    assert odd_upstream.embedding_requests == []


def test_a_refusal_the_sdk_retries_is_passed_on_with_its_headers_and_not_a_problem(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream
) -> None:
    """A 429 answered with ``Retry-After`` reaches the client with it; the SDK's retry is answered and
    recorded, and the run is clean. Before: the header was dropped and the run failed on the 429."""
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        retrying = openai.OpenAI(base_url=ep.url, api_key="k", max_retries=2)
        assert retrying.embeddings.create(model="flaky", input="paris", encoding_format="float").data
        with pytest.raises(openai.RateLimitError) as raised:
            client(ep.url).embeddings.create(model="flaky", input="rome", encoding_format="float")
        assert raised.value.response.headers["retry-after"] == "0"
        assert client(ep.url).embeddings.create(model="flaky", input="rome", encoding_format="float").data
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert [c["request"]["input"] for c in read_calls(tmp_path / "embeddings.jsonl")] == ["paris", "rome"]


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("novectors", "response.data must hold 1 vector(s)"),
        ("error200", "response.error is an error, not an answer"),
        ("short", "response.data must hold 2 vector(s)"),
    ],
)
def test_an_answer_without_the_vectors_asked_is_passed_on_and_not_recorded(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream, model: str, said: str
) -> None:
    """Before: each was recorded as an answered call (and served on replay as one)."""
    import httpx

    inputs = ["a", "b"] if model == "short" else "a"
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        answer = httpx.post(f"{ep.url}/embeddings", json={"model": model, "input": inputs}, timeout=10)
    assert answer.status_code == 200
    assert ep.outcome is not None and not ep.outcome.ok
    assert said in ep.outcome.report(), ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("html400", "upstream answered HTTP 400: <html><body>400 Bad Request \u2014 nginx</body></html>"),
        ("empty503", "upstream answered HTTP 503: (an empty body)"),
        ("text200", "response must be a JSON object (the API's answer), got 'not json \ufffd'"),
    ],
)
def test_an_answer_that_is_no_json_is_passed_on_as_sent_and_not_recorded(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream, model: str, said: str
) -> None:
    """The upstream's status, body and content type reach the client as sent (an SDK reads a 400 as a
    refusal and retries a 503 by its own rule), the call is not recorded and the run says why.

    Regression: the client got an invented 502 ``BAD_RESPONSE`` ("answered HTTP 400 that is not JSON"),
    which an SDK retries, for a refusal it would have raised at once."""
    import httpx

    status, body, content_type = NOT_JSON[model]
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        answer = httpx.post(f"{ep.url}/embeddings", json={"model": model, "input": "a"}, timeout=10)
    assert (answer.status_code, answer.content) == (status, body)
    assert answer.headers["Content-Type"].startswith(content_type), answer.headers
    assert ep.outcome is not None and not ep.outcome.ok
    assert said in ep.outcome.report(), ep.outcome.report()
    assert "BAD_RESPONSE" not in ep.outcome.report(), ep.outcome.report()
    assert not (tmp_path / "embeddings.jsonl").exists()


def test_a_gemini_body_naming_another_model_than_its_path_is_refused(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream
) -> None:
    """Before: the body's ``model`` took the path's place in the request check, so a call to another
    model was served the recorded model's vectors."""
    import httpx

    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        path = f"{ep.url.removesuffix('/v1')}/v1beta/models/gemini-embedding-001:embedContent"
        body = {"model": "models/text-embedding-004", "content": {"parts": [{"text": "a"}]}}
        answer = httpx.post(path, json=body, timeout=10)
    assert answer.status_code == 400, answer.text
    assert "model: must be the path's model" in answer.json()["error"]["message"]
    assert odd_upstream.embedding_requests == []


def test_a_null_optional_field_is_taken_as_left_out(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream
) -> None:
    """The API takes ``null`` for an optional field. Before: the endpoint refused it with a 400."""
    import httpx

    body = {"model": MODEL, "input": "a", "dimensions": None, "encoding_format": None, "user": None}
    with served(tmp_path, RecordMode.ONCE, odd_upstream.url, api_key=UPSTREAM_KEY) as ep:
        answer = httpx.post(f"{ep.url}/embeddings", json=body, timeout=10)
    assert answer.status_code == 200, answer.text


def test_a_stop_cancels_an_embedding_call_in_flight_after_its_grace(
    tmp_path: Path, odd_upstream: OddEmbeddingsUpstream
) -> None:
    """``cancel_upstream`` (a stop whose grace ran out) ends embedding calls in flight too, each a 503.
    Before: only model calls were cancelled, and a stop waited for the upstream's answer."""
    import threading

    import httpx

    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

    thread = EndpointThread(
        EndpointConfig(tmp_path, record=RecordMode.ONCE, upstream=odd_upstream.url, api_key=UPSTREAM_KEY)
    )
    url = thread.start()
    got: list[Any] = []
    asking = threading.Thread(
        target=lambda: got.append(
            httpx.post(f"{url}/embeddings", json={"model": "slow", "input": "a"}, timeout=60)
        )
    )
    asking.start()
    for _ in range(200):  # until the call reached the upstream (bounded: 10 s)
        if odd_upstream.embedding_requests:
            break
        threading.Event().wait(0.05)
    import asyncio

    async def cancel() -> int:
        return thread.endpoint.cancel_upstream("the grace ran out")

    cancelled = asyncio.run_coroutine_threadsafe(cancel(), thread._loop).result(5)
    asking.join(20)
    outcome = thread.stop()
    assert cancelled == 1
    assert got and got[0].status_code == 503 and "the grace ran out" in got[0].text
    assert not outcome.ok


def test_a_folder_of_embeddings_only_recordings_is_validated(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A recording of embedding calls alone (no endpoint.json) is a unit of ``validate`` on its folder,
    and a non-regular ``embeddings.jsonl`` is named. Before: the folder was "clean" (or "no session log")
    while a replay of the damaged recording failed."""
    log = recorded(tmp_path / "suite" / "rag", emb_upstream)
    result = validate(tmp_path / "suite")
    assert result.exit_code == 0 and "1 log(s)" in result.output, result.output
    edit_call(log, 2, lambda data: data.__setitem__("status", 500))
    result = validate(tmp_path / "suite")
    assert result.exit_code != 0 and "EMBEDDINGS_BAD_LOG" in result.output, result.output
    log.unlink()
    (tmp_path / "elsewhere").mkdir()
    log.symlink_to(tmp_path / "elsewhere")
    result = validate(tmp_path / "suite")
    assert result.exit_code != 0 and "NOT_REGULAR_FILE" in result.output, result.output


def test_a_later_recording_supersedes_a_kept_run_and_a_rewrite_drops_old_conversations(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A run of embedding calls alone written into the directory removes an earlier kept run (so
    ``accept`` cannot bring it back over it), and as a rewrite it removes the conversations it did not
    have. Before: the kept run stayed and the old conversations stayed, to fail the next replay."""
    import httpx

    from pytest_dsh_replay.layout import PRIMARY_FILE

    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
        client(ep.url).chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path, RecordMode.REWRITE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="rome", encoding_format="float")
        httpx.post(f"{ep.url}/embeddings", json={"model": MODEL, "input": 5}, timeout=10)
    assert (tmp_path / ".dsh-kept" / "embeddings.jsonl").exists()
    with served(tmp_path, RecordMode.REWRITE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="tokyo", encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert not (tmp_path / ".dsh-kept").exists()
    assert not (tmp_path / PRIMARY_FILE).exists() and not (tmp_path / "endpoint.json").exists()
    with served(tmp_path) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="tokyo", encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_mask_never_keeps_old_vectors(tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream) -> None:
    """A re-record whose vectors differ from the recorded ones rewrites the log even when a mask matches
    base64 text. Before: the mask applied to the vectors, and the old ones were kept ("kept (the same
    calls)")."""
    import base64
    import struct

    from pytest_dsh_replay.session.masks import Masks

    masks = Masks.parse([r"[A-Za-z0-9+/]{8,}={0,2}"], source="the test")
    log = recorded(tmp_path, emb_upstream)
    other = base64.b64encode(struct.pack("<2f", 9.0, 9.0)).decode()  # an old recording's vector

    def base64_vector(data: dict[str, Any]) -> None:
        data["request"]["encoding_format"] = "base64"
        data["response"]["data"][0]["embedding"] = other

    edit_call(log, 2, base64_vector)
    with served(tmp_path, RecordMode.REWRITE, emb_upstream.url, api_key=UPSTREAM_KEY, masks=masks) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="base64")
        client(ep.url).embeddings.create(model=MODEL, input="rome", encoding_format="float")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert other not in log.read_text()


def test_a_replay_that_stopped_after_its_embedding_calls_says_they_reached_it(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """A retrieval agent that embedded and then stopped before its model call is told its embedding
    calls reached the replay. Before: "No model call reached the replay: the agent never asked for
    one ... check that it is pointed at this replay", which sent its user to check the base URL."""
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
        client(ep.url).chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep:
        client(ep.url).embeddings.create(model=MODEL, input="paris", encoding_format="float")
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "No model call reached the replay, though 1 embedding call(s) did" in report, report
    assert "pointed at this replay" not in report


def test_a_client_gets_the_same_bytes_recording_and_replaying(
    tmp_path: Path, emb_upstream: FakeEmbeddingsUpstream
) -> None:
    """Regression: recording passed the upstream's bytes on (``{"object": "list", ...}``) while a replay
    sent the recorded answer encoded again (``{"object":"list",...}``): one client, two byte streams."""
    import httpx

    body = {"model": MODEL, "input": ["paris", "rome"], "encoding_format": "float"}
    with served(tmp_path, RecordMode.ONCE, emb_upstream.url, api_key=UPSTREAM_KEY) as ep:
        recording = httpx.post(f"{ep.url}/embeddings", json=body, timeout=10)
    with served(tmp_path) as ep:
        replaying = httpx.post(f"{ep.url}/embeddings", json=body, timeout=10)
    assert recording.status_code == replaying.status_code == 200
    assert recording.content == replaying.content
    assert recording.headers["content-type"] == replaying.headers["content-type"]

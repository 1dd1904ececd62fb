"""Issue 20: the local model caches a long system prefix as the API does, on the run's clock."""

from __future__ import annotations

import anthropic

from constructs_lib.local_engine.local_model import LocalMessagesAPI

RUBRIC = "Score the lead: authority, fit and intent. " * 500  # 22,000 chars: 5,500 tokens
PREFIX_TOKENS = len(RUBRIC) // 4


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _ask(api: LocalMessagesAPI, row: str, system: object, model: str = "claude-haiku-5-5"):
    client = anthropic.Anthropic(api_key="sk-local", base_url=api.base_url, max_retries=0)
    return client.messages.create(
        model=model,
        max_tokens=16,
        # A one-word label: no thinking, which would use up 16 tokens (issue 32).
        thinking={"type": "disabled"},
        system=system,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": row}],
    )


def _cached(ttl: str = "5m") -> list[dict[str, object]]:
    return [{"type": "text", "text": RUBRIC, "cache_control": {"type": "ephemeral", "ttl": ttl}}]


def _usage(message) -> tuple[int, int, int]:
    usage = message.usage
    return (usage.input_tokens, usage.cache_creation_input_tokens, usage.cache_read_input_tokens)


def test_the_first_request_writes_and_the_next_within_the_ttl_reads():
    clock = Clock()
    with LocalMessagesAPI(run_clock=clock) as api:
        first = _ask(api, "row 1", _cached())
        clock.now += 299
        second = _ask(api, "row 2", _cached())

    assert _usage(first) == (1, PREFIX_TOKENS, 0)
    assert _usage(second) == (1, 0, PREFIX_TOKENS)
    assert (api.prompt_cache.writes, api.prompt_cache.reads) == (1, 1)
    assert (api.cache_creation_input_tokens, api.cache_read_input_tokens) == (
        PREFIX_TOKENS,
        PREFIX_TOKENS,
    )


def test_each_read_refreshes_the_ttl_and_an_expired_entry_is_written_again():
    clock = Clock()
    with LocalMessagesAPI(run_clock=clock) as api:
        _ask(api, "row 1", _cached())
        for row in range(2, 5):  # 4 x 200 s: past 5 minutes from the write, never from a read
            clock.now += 200
            assert _usage(_ask(api, f"row {row}", _cached()))[2] == PREFIX_TOKENS
        clock.now += 301
        late = _ask(api, "row 5", _cached())

    assert _usage(late)[1:] == (PREFIX_TOKENS, 0)
    assert (api.prompt_cache.writes, api.prompt_cache.reads) == (2, 3)


def test_the_one_hour_ttl_outlasts_five_minutes():
    clock = Clock()
    with LocalMessagesAPI(run_clock=clock) as api:
        _ask(api, "row 1", _cached("1h"))
        clock.now += 3000
        later = _ask(api, "row 2", _cached("1h"))

    assert _usage(later)[2] == PREFIX_TOKENS


def test_a_prefix_below_the_models_minimum_is_not_cached():
    short = [{"type": "text", "text": "Answer hot.", "cache_control": {"type": "ephemeral"}}]
    with LocalMessagesAPI() as api:
        message = _ask(api, "row 1", short)

    assert _usage(message)[1:] == (0, 0)
    assert message.usage.input_tokens == len("Answer hot.row 1") // 4


def test_an_unmarked_system_prompt_is_billed_whole_every_time():
    with LocalMessagesAPI() as api:
        first = _ask(api, "row 1", RUBRIC)
        second = _ask(api, "row 2", [{"type": "text", "text": RUBRIC}])

    assert _usage(first) == _usage(second) == ((len(RUBRIC) + 5) // 4, 0, 0)
    assert (api.prompt_cache.writes, api.prompt_cache.reads) == (0, 0)


def test_another_model_or_another_prefix_is_another_entry():
    with LocalMessagesAPI() as api:
        _ask(api, "row 1", _cached())
        other_model = _ask(api, "row 2", _cached(), model="claude-haiku-4-5")
        other_prefix = _ask(api, "row 3", [{**_cached()[0], "text": RUBRIC + "Edited."}])

    assert _usage(other_model)[1] > 0 and _usage(other_prefix)[1] > 0
    assert api.prompt_cache.writes == 3

"""Rule targets: a Lambda function (async, at-least-once) and an SNS topic (with the
target's InputTransformer applied)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .lambda_async import AsyncFunction
from .scheduling import WorkTracker


class Target(Protocol):
    """Something a matched event is handed to."""

    name: str

    def deliver(self, event: Mapping[str, Any]) -> None:
        """Hand over one event (must not block on the target's work)."""


class LambdaTarget:
    """Delivers each event ``duplicates`` times, as at-least-once delivery may.

    Default 1. With N > 1 the first two copies are invoked at once (concurrent duplicates:
    one of them meets the other's idempotency record IN_PROGRESS) and the remaining N - 2
    one after another once the earlier copies have settled (late redeliveries).

    With ``before_redelivery`` every copy after the first waits for the previous one to
    end, and the hook is called with the event before it starts: the copies model Lambda
    re-running the function after an attempt that failed once its work was done (the hook
    puts the state back as that failure left it, e.g. releases an idempotency record).
    """

    def __init__(
        self,
        function: AsyncFunction,
        tracker: WorkTracker,
        duplicates: int = 1,
        before_redelivery: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        if duplicates < 1:
            raise ValueError("duplicates must be at least 1")
        self.function = function
        self.name = function.spec.display_name
        self._tracker = tracker
        self._duplicates = duplicates
        self._before_redelivery = before_redelivery

    def deliver(self, event: Mapping[str, Any]) -> None:
        """Start the copies of ``event``; returns at once."""
        if self._before_redelivery is not None and self._duplicates > 1:
            self._tracker.begin()
            self.function.invoke(
                event, on_done=lambda _ok: self._redeliver(event, self._duplicates - 1)
            )
            return
        concurrent = min(2, self._duplicates)
        later = self._duplicates - concurrent
        if later == 0:
            for _ in range(concurrent):
                self.function.invoke(event)
            return
        # Held until the late copies are queued, so the run cannot look idle in between.
        self._tracker.begin()
        remaining = [concurrent]
        lock = threading.Lock()

        def pair_settled(_succeeded: bool) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._deliver_sequentially(event, later)

        for _ in range(concurrent):
            self.function.invoke(event, on_done=pair_settled)

    def _redeliver(self, event: Mapping[str, Any], count: int) -> None:
        if count == 0:
            self._tracker.end()
            return
        try:
            assert self._before_redelivery is not None
            self._before_redelivery(event)
        except BaseException:
            self._tracker.end()
            raise
        self.function.invoke(event, on_done=lambda _ok: self._redeliver(event, count - 1))

    def _deliver_sequentially(self, event: Mapping[str, Any], count: int) -> None:
        if count == 0:
            self._tracker.end()
            return
        self.function.invoke(
            event, on_done=lambda _ok: self._deliver_sequentially(event, count - 1)
        )


def _json_path(event: Mapping[str, Any], path: str) -> Any:
    """Value at a simple ``$.a.b.c`` path, or None when absent."""
    if path == "$":
        return event
    value: Any = event
    for part in path.removeprefix("$.").split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def render_input(event: Mapping[str, Any], target: Any) -> str:
    """The payload a target receives: ``Input``, ``InputPath`` or ``InputTransformer`` applied
    to ``event`` (a :class:`~.assembly.TargetSpec`, resolved), else the event as JSON.

    InputTransformer: each ``<name>`` of ``InputTemplate`` is replaced by the value at its
    ``InputPathsMap`` path. When the template is a JSON string (what CDK's
    ``RuleTargetInput.from_text`` produces) the values are inserted as string content and
    the result is that string's text, as EventBridge delivers it.
    """
    if target.input is not None:
        return str(target.input)
    if target.input_path:
        return json.dumps(_json_path(event, target.input_path))
    transformer = target.input_transformer
    if not transformer:
        return json.dumps(event)
    template = str(transformer.get("InputTemplate", ""))
    is_string = len(template) >= 2 and template.startswith('"') and template.endswith('"')
    for name, path in (transformer.get("InputPathsMap") or {}).items():
        value = _json_path(event, str(path))
        if is_string:
            text = "" if value is None else value if isinstance(value, str) else json.dumps(value)
            replacement = json.dumps(text)[1:-1]
        else:
            replacement = json.dumps(value)
        template = template.replace(f"<{name}>", replacement)
    if is_string:
        return str(json.loads(template))
    return template


class SqsTarget:
    """Sends the rendered input to a queue (EventBridge's SQS target), ``duplicates`` times
    as at-least-once delivery may: two copies at once, each later one a minute of the
    run's clock after the previous (``later(seconds, callback)`` schedules)."""

    def __init__(
        self,
        name: str,
        spec: Any,
        send: Callable[[str], None],
        *,
        duplicates: int,
        later: Callable[[float, Callable[[], None]], None],
        seconds_per_minute: float,
        tracker: WorkTracker,
        on_delivery: Callable[[], None] = lambda: None,
    ) -> None:
        self.name = name
        self._spec = spec
        self._send = send
        self._duplicates = duplicates
        self._later = later
        self._minute = seconds_per_minute
        self._tracker = tracker
        self._on_delivery = on_delivery

    def deliver(self, event: Mapping[str, Any]) -> None:
        """Send the copies (later ones on the timer); returns at once."""
        body = render_input(event, self._spec)
        for copy_number in range(self._duplicates):
            if copy_number < 2:
                self._send(body)
                self._on_delivery()
                continue
            self._tracker.begin()  # the run is not idle while a copy is still to come

            def send_later(body: str = body) -> None:
                try:
                    self._send(body)
                    self._on_delivery()
                except BaseException as exc:  # an emulator bug
                    self._tracker.fail(exc)
                finally:
                    self._tracker.end()

            self._later((copy_number - 1) * self._minute, send_later)


class SnsTarget:
    """Publishes the rendered input to a topic in moto and counts what was published."""

    def __init__(self, name: str, topic_arn: str, spec: Any, sns_client: Any) -> None:
        self.name = name
        self.topic_arn = topic_arn
        self._spec = spec
        self._sns = sns_client
        self._lock = threading.Lock()
        self.messages: list[str] = []

    def deliver(self, event: Mapping[str, Any]) -> None:
        """Publish once (EventBridge -> SNS is not duplicated locally)."""
        message = render_input(event, self._spec)
        self._sns.publish(TopicArn=self.topic_arn, Message=message)
        with self._lock:
            self.messages.append(message)

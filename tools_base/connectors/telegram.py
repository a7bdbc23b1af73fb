"""``telegram``: receive a Telegram bot's messages by long polling ``getUpdates``.

No public URL is needed: the connector asks the Bot API for new updates, waiting up to the poll
timeout for one to arrive, and confirms each batch by asking from the last ``update_id`` + 1,
so an update is seen once. The offset is kept in memory only: after a crash Telegram sends the
updates not confirmed yet again, and since an event's id derives from its ``update_id``
(:func:`update_delivery_id`) such an update is the event journaled already, run once.
Telegram refuses ``getUpdates`` (409, naming the webhook) while the bot has a webhook set: the
connector then calls ``deleteWebhook`` (a Connection switched back from webhook mode) and
polls again. Replies go out through the ``telegram`` tool (``telegram__send``), which reads
the same ``TELEGRAM_API_BASE_URL`` and ``TELEGRAM_ALLOWED_HOSTS``.

``TELEGRAM_MODE=webhook`` receives updates on a listener of its own instead (``setWebhook``
with a secret token): see :mod:`tools_base.connectors._telegram_webhook` for its settings.

Settings (each looked up in the Connection's ``secrets``, then its ``config``, then the
environment, see ``ConnectorContext.setting``):

``TELEGRAM_BOT_TOKEN`` / ``BOT_TOKEN`` / ``TELEGRAM_TOKEN``
    The bot token, first one set; required. Keep it in ``secrets`` (``valueFrom.env``).
``TELEGRAM_API_BASE_URL``
    Default ``https://api.telegram.org``; a local Bot API server works. Plain ``http:`` is
    accepted only for a loopback host, a host listed in ``TELEGRAM_ALLOWED_HOSTS``, or with
    ``TELEGRAM_ALLOW_PLAIN_HTTP=true`` (the token would cross the network in clear text).
``TELEGRAM_ALLOWED_HOSTS``
    ``host[:port]`` entries, comma or space separated: servers of the operator's the
    connector and the ``telegram`` tool may reach (over plain http too).
``TELEGRAM_POLL_TIMEOUT_SECONDS``
    How long one ``getUpdates`` may wait for an update; default 30 (0 to 600).
``TELEGRAM_REQUEST_TIMEOUT_MS``
    Deadline of one request, connecting and reading included; default the poll timeout + 5 s.
``TELEGRAM_RETRY_DELAY_MS``
    Pause after a failed poll (network error, HTTP 5xx, ``ok: false``); default 1000. A 429
    waits its ``parameters.retry_after`` seconds instead (this delay when it gives none).
``TELEGRAM_INITIAL_OFFSET``
    The ``offset`` of the first poll; default 0 (every update Telegram still holds).
    ``-1`` starts from the newest one.

A bad value stops the connector with ``E_CONNECTOR_CONFIG`` naming the setting. After it starts,
nothing stops it but cancellation: every failure is logged and the poll retried.

Event ``telegram_message``, instance key ``telegram:<chat id>``, for every ``message`` update
not written by a bot (other update kinds and messages with no text, caption, photo or document
are skipped). Properties (strings; absent when Telegram does not give them): ``update_id``,
``chat_id``, ``chat_type``, ``chat_title``, ``chat_username``, ``message_id``, ``date``,
``from_id``, ``from_username``, ``from_first_name``, ``from_last_name``, ``caption``; for a
photo, or a document whose MIME type is ``image/*``: ``image_file_id``,
``image_file_unique_id``, ``image_source`` (``photo`` or ``document``), ``image_width``,
``image_height``, ``image_file_size``, ``image_mime_type``, ``image_file_name`` (the largest
size of a photo is taken); for any other document: ``file_id``, ``file_unique_id``,
``file_name``, ``file_mime_type``, ``file_size``.

Message: the text as a text message; a photo or image document without a caption as an image
``telegram-file:<file id>``; another document without a caption as a file of that URL and its
name; media with a caption as a text message of the caption followed by a line
``[image] telegram-file:<file id>`` (or ``[file:<name>] ...``). The file URL holds no token: an
agent fetches the file with ``telegram__download_file`` and that ``fileId``.

The token never appears in a log line or an error: it is only ever part of a request path, no
message of ours names a path, errors of the HTTP client (``httpx2``) are reduced to their kind and
scrubbed of the token, and the client's own request log masks the token in the URL it names.
Requests go over ``httpx2`` with no proxy from the environment, no redirects followed, the
answer streamed and refused past :data:`~tools_base.tools._chat.MAX_API_ANSWER_BYTES`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tools_base import ConnectorContext, ConnectorError
from tools_base.connectors._telegram_api import EVENT as EVENT
from tools_base.connectors._telegram_api import TOKEN_NAMES as TOKEN_NAMES
from tools_base.connectors._telegram_api import (
    BotAnswer,
    RequestFailed,
    bot_ok,
    method_url,
    open_client,
    post_json,
)
from tools_base.connectors._telegram_api import PollSettings as PollSettings
from tools_base.connectors._telegram_api import read_settings as read_settings
from tools_base.connectors._telegram_api import update_delivery_id as update_delivery_id
from tools_base.connectors._telegram_api import update_event as update_event
from tools_base.tools._chat import MAX_API_ANSWER_BYTES, redact


@dataclass(frozen=True, slots=True)
class PollFailure:
    """Why a poll brought no updates, and how long to wait before the next one."""

    reason: str
    wait: float
    rate_limited: bool = False
    webhook_set: bool = False
    """Telegram answered 409: the bot has a webhook, which blocks ``getUpdates``."""


class Poller:
    """The ``getUpdates`` loop of one connection."""

    def __init__(self, ctx: ConnectorContext, settings: PollSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.offset = settings.initial_offset
        self._url = method_url(settings, "getUpdates")
        self._client = open_client(settings)

    async def run(self) -> None:
        """Poll until cancelled."""
        s = self.settings
        self.ctx.logger.info(
            "telegram polling started",
            api=f"{s.api_base.scheme}://{s.api_base.host}:{s.api_base.port}",
            offset=self.offset,
            poll_timeout_seconds=s.poll_timeout,
        )
        try:
            while True:
                outcome = await self.poll()
                if isinstance(outcome, PollFailure) and outcome.webhook_set:
                    await self.delete_webhook()
                    continue
                if isinstance(outcome, PollFailure):
                    self.ctx.report_failure(f"telegram getUpdates: {outcome.reason}")
                    self.ctx.logger.warning(
                        "telegram rate limited" if outcome.rate_limited else "telegram poll failed",
                        reason=outcome.reason,
                        retry_in_seconds=outcome.wait,
                        offset=self.offset,
                    )
                    await asyncio.sleep(outcome.wait)
                    continue
                self.ctx.report_success()
                for update in outcome:
                    await self.deliver(update)
        finally:
            await self._client.aclose()

    async def delete_webhook(self) -> None:
        """``deleteWebhook``, so ``getUpdates`` works again; a failure waits the retry delay
        (the next poll tells whether the webhook is still there)."""
        s = self.settings
        url = method_url(s, "deleteWebhook")
        try:
            async with asyncio.timeout(s.request_timeout):
                answer = await post_json(self._client, url, b"{}", MAX_API_ANSWER_BYTES)
            ok = bot_ok(answer)
            reason = "" if ok else f"HTTP {answer.status}"
        except TimeoutError:
            ok, reason = False, f"no answer within {s.request_timeout:g} s"
        except RequestFailed as exc:
            ok, reason = False, redact(str(exc), s.token)
        if ok:
            self.ctx.logger.warning("telegram webhook deleted to poll for updates")
            return
        self.ctx.logger.warning(
            "telegram deleteWebhook failed", reason=reason, retry_in_seconds=s.retry_delay
        )
        await asyncio.sleep(s.retry_delay)

    async def poll(self) -> list[Mapping[str, Any]] | PollFailure:
        """One ``getUpdates``: the updates, or why there are none."""
        s = self.settings
        payload: dict[str, int] = {"timeout": s.poll_timeout}
        if self.offset:
            payload["offset"] = self.offset
        try:
            async with asyncio.timeout(s.request_timeout):
                answer = await post_json(
                    self._client, self._url, json.dumps(payload).encode(), MAX_API_ANSWER_BYTES
                )
        except TimeoutError:
            return PollFailure(f"no answer within {s.request_timeout:g} s", s.retry_delay)
        except RequestFailed as exc:
            return PollFailure(redact(str(exc), s.token), s.retry_delay)
        return self._updates(answer)

    def _updates(self, answer: BotAnswer) -> list[Mapping[str, Any]] | PollFailure:
        s = self.settings
        data = _answer_json(answer)
        code = data.get("error_code")
        if answer.status == 429 or code == 429:
            return self._rate_limited(answer, data)
        description = data.get("description")
        if (answer.status == 409 or code == 409) and "webhook" in str(description).lower():
            # Not every 409: "terminated by other getUpdates request" is another poller.
            return PollFailure("HTTP 409: a webhook is set", 0.0, webhook_set=True)
        if data.get("ok") is not True:
            return PollFailure(redact(_refusal(answer, data), s.token), s.retry_delay)
        result = data.get("result")
        if not isinstance(result, list):
            return PollFailure("getUpdates gave no list of updates", s.retry_delay)
        return [u for u in result if isinstance(u, dict)]

    def _rate_limited(self, answer: BotAnswer, data: Mapping[str, Any]) -> PollFailure:
        """HTTP 429: wait as long as the answer's ``retry_after`` (or header) says."""
        parameters = data.get("parameters")
        after = parameters.get("retry_after") if isinstance(parameters, dict) else None
        header = answer.headers.get("retry-after", "")
        if not isinstance(after, int | float) and header.isdigit():
            after = int(header)
        wait = float(after) if isinstance(after, int | float) and after >= 0 else None
        reason = "HTTP 429" + (f", retry_after={after}" if wait is not None else "")
        return PollFailure(
            reason, wait if wait is not None else self.settings.retry_delay, rate_limited=True
        )

    async def deliver(self, update: Mapping[str, Any]) -> None:
        """Advance the offset past ``update`` and emit its event, if it has one.

        An update below the offset was already seen (a server that ignored the offset) and is
        skipped, so nothing is emitted twice; one seen again after a restart is the same event
        (:func:`update_delivery_id`), which the runtime runs once.
        """
        update_id = update.get("update_id")
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return
        if self.offset > 0 and update_id < self.offset:
            return
        self.offset = update_id + 1
        event = update_event(update)
        if event is None:
            self.ctx.logger.debug("telegram update skipped", update_id=update_id)
            return
        # The offset lives in memory: after a crash Telegram sends the update again, and the
        # delivery id makes that the event already journaled.
        delivery_id = update_delivery_id(self.settings, update_id)
        await self.ctx.emit(dataclasses.replace(event, delivery_id=delivery_id))


async def run(ctx: ConnectorContext) -> None:
    """Poll the Bot API (or, with ``TELEGRAM_MODE=webhook``, serve its webhook) and emit
    ``telegram_message`` events until cancelled."""
    mode = (ctx.setting("TELEGRAM_MODE", "mode") or "polling").strip().lower()
    if mode not in ("polling", "webhook"):
        raise ConnectorError(f"telegram: TELEGRAM_MODE must be polling or webhook, got {mode!r}")
    settings = read_settings(ctx)
    if mode == "webhook":
        from tools_base.connectors import _telegram_webhook

        await _telegram_webhook.run(ctx, settings)
        return
    await Poller(ctx, settings).run()


def _answer_json(answer: BotAnswer) -> dict[str, Any]:
    """The answer's JSON object, empty when it is none."""
    try:
        data = json.loads(answer.body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _refusal(answer: BotAnswer, data: Mapping[str, Any]) -> str:
    """What an answer that is not ``ok`` says went wrong (status, error code, description)."""
    code = data.get("error_code")
    description = data.get("description")
    what = f"HTTP {answer.status}"
    if isinstance(code, int):
        what += f", error_code {code}"
    if isinstance(description, str) and description:
        what += f": {description[:300]}"
    elif not data:
        what += ": the answer is not Bot API JSON"
    return what

"""The Telegram connector's events: one ``message`` update of the Bot API as the swarm's
``telegram_message`` event (the properties and message that :mod:`tools_base.connectors.telegram`
documents), or nothing for an update that is not a message for the swarm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools_base import ConnectorEvent, FileMessage, ImageMessage, TextMessage

EVENT = "telegram_message"
FILE_URL_SCHEME = "telegram-file:"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _identifier(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return _text(value)


def _put(properties: dict[str, str], key: str, value: Any) -> None:
    text = _identifier(value)
    if text is not None:
        properties[key] = text


def _largest_photo(sizes: list[Any]) -> Mapping[str, Any] | None:
    photos = [p for p in sizes if isinstance(p, dict) and _text(p.get("file_id"))]
    if not photos:
        return None

    def area(photo: Mapping[str, Any]) -> tuple[int, int]:
        width, height, size = photo.get("width"), photo.get("height"), photo.get("file_size")
        pixels = width * height if isinstance(width, int) and isinstance(height, int) else 0
        return pixels, size if isinstance(size, int) else 0

    return max(photos, key=area)


def update_event(update: Mapping[str, Any]) -> ConnectorEvent | None:
    """The event of one update, or ``None`` when it is not a message for the swarm."""
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    chat = message.get("chat")
    sender = message.get("from")
    chat_id = _identifier(chat.get("id")) if isinstance(chat, dict) else None
    if chat_id is None or not isinstance(chat, dict):
        return None
    if isinstance(sender, dict) and sender.get("is_bot") is True:
        return None
    properties = _message_properties(update, message, chat, chat_id, sender)
    caption = _text(message.get("caption"))
    if caption is not None:
        properties["caption"] = caption
    attachment = _attachment(message, properties)
    return _event(
        f"telegram:{chat_id}", _text(message.get("text")), caption, attachment, properties
    )


def _message_properties(
    update: Mapping[str, Any],
    message: dict[str, Any],
    chat: dict[str, Any],
    chat_id: str,
    sender: object,
) -> dict[str, str]:
    """The update's, the chat's, the message's and the sender's properties."""
    properties: dict[str, str] = {"chat_id": chat_id}
    _put(properties, "update_id", update.get("update_id"))
    _put(properties, "chat_type", chat.get("type"))
    _put(properties, "chat_title", chat.get("title"))
    _put(properties, "chat_username", chat.get("username"))
    _put(properties, "message_id", message.get("message_id"))
    _put(properties, "date", message.get("date"))
    if isinstance(sender, dict):
        _put(properties, "from_id", sender.get("id"))
        _put(properties, "from_username", sender.get("username"))
        _put(properties, "from_first_name", sender.get("first_name"))
        _put(properties, "from_last_name", sender.get("last_name"))
    return properties


def _attachment(
    message: dict[str, Any], properties: dict[str, str]
) -> ImageMessage | FileMessage | None:
    """The message's photo (its largest size) or document, its properties added."""
    photo = message.get("photo")
    document = message.get("document")
    largest = _largest_photo(photo) if isinstance(photo, list) else None
    if largest is not None:
        properties["image_source"] = "photo"
        _put(properties, "image_file_id", largest.get("file_id"))
        _put(properties, "image_file_unique_id", largest.get("file_unique_id"))
        _put(properties, "image_width", largest.get("width"))
        _put(properties, "image_height", largest.get("height"))
        _put(properties, "image_file_size", largest.get("file_size"))
        return ImageMessage(FILE_URL_SCHEME + properties["image_file_id"])
    if isinstance(document, dict) and _text(document.get("file_id")):
        return _document(document, properties)
    return None


def _document(document: dict[str, Any], properties: dict[str, str]) -> ImageMessage | FileMessage:
    """A document: an image when its MIME type says so, else a file."""
    mime = _text(document.get("mime_type")) or ""
    prefix = "image_" if mime.lower().startswith("image/") else ""
    _put(properties, f"{prefix}file_id", document.get("file_id"))
    _put(properties, f"{prefix}file_unique_id", document.get("file_unique_id"))
    _put(properties, f"{prefix}file_name", document.get("file_name"))
    _put(properties, f"{prefix}file_size", document.get("file_size"))
    _put(properties, f"{prefix}mime_type" if prefix else "file_mime_type", mime)
    url = FILE_URL_SCHEME + str(document["file_id"])
    if not prefix:
        return FileMessage(url, _text(document.get("file_name")) or "document")
    properties["image_source"] = "document"
    _put(properties, "image_width", document.get("width"))
    _put(properties, "image_height", document.get("height"))
    return ImageMessage(url)


def _event(
    key: str,
    text: str | None,
    caption: str | None,
    attachment: ImageMessage | FileMessage | None,
    properties: dict[str, str],
) -> ConnectorEvent | None:
    """The message: its text, else the attachment (with its caption first), else the caption
    alone; ``None`` when it has none of them."""
    if text is not None:
        return ConnectorEvent(EVENT, TextMessage(text), key, properties)
    if attachment is None:
        if caption is None:
            return None
        return ConnectorEvent(EVENT, TextMessage(caption), key, properties)
    if caption is not None:
        marker = ConnectorEvent(EVENT, attachment, key).text()
        return ConnectorEvent(EVENT, TextMessage(f"{caption}\n{marker}"), key, properties)
    return ConnectorEvent(EVENT, attachment, key, properties)

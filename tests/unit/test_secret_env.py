"""The one rule naming the environment variables a ``secretRef`` is read from, shared by the
bundle's value sources and the chat tools' tokens."""

from __future__ import annotations

from bundle.secrets import secret_candidates
from bundle.spec_base import SecretRef
from goondan.secret_env import env_name_part, secret_env_names
from tools_base.tools._chat import TokenSource


def test_name_parts() -> None:
    assert env_name_part("my-bot.token") == "MY_BOT_TOKEN"
    assert env_name_part("--a  b--") == "A_B"
    assert env_name_part("x\u00e9y") == "X_Y"


def test_order_and_no_repeats() -> None:
    assert secret_env_names("slack-bot", "bot-token", "token") == [
        "GOONDAN_SECRET_SLACK_BOT_BOT_TOKEN",
        "GOONDAN_SECRET_SLACK_BOT_TOKEN",
        "GOONDAN_SECRET_SLACK_BOT",
        "SECRET_SLACK_BOT_BOT_TOKEN",
        "SECRET_SLACK_BOT_TOKEN",
        "SECRET_SLACK_BOT",
    ]
    assert secret_env_names("tg", None, "token") == [
        "GOONDAN_SECRET_TG_TOKEN",
        "GOONDAN_SECRET_TG",
        "SECRET_TG_TOKEN",
        "SECRET_TG",
    ]


def test_bundle_and_tools_name_the_same_variables() -> None:
    ref = SecretRef(ref="Secret/chat-bot", key="api.key")
    tool = TokenSource(secret="chat-bot", key="api.key")
    assert secret_candidates(ref, "token") == tool.candidates()
    assert (
        secret_candidates(SecretRef(ref="Secret/chat-bot"), "token")
        == TokenSource(secret="chat-bot").candidates()
    )

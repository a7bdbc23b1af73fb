"""Environment files: ``.env`` and ``.env.local`` beside the bundle, and ``--env-file``.

Precedence, highest first (as the original runtime): ``--env-file`` > ``.env.local`` >
``.env`` > the environment the command was started with. A file's values therefore override
the shell's: the bundle's files describe the deployment. A missing ``--env-file`` is an error;
missing ``.env``/``.env.local`` are not. Only variable *names* are ever logged or printed.
Agent processes inherit the result (they start from this process's environment).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path


class EnvFileMissing(FileNotFoundError):
    """``--env-file`` names a file that does not exist (or cannot be read)."""


@dataclass
class LoadedEnv:
    """What was loaded: the files read (in order of increasing precedence) and the names of
    the variables they set."""

    files: list[Path] = field(default_factory=list)
    names: set[str] = field(default_factory=set)


def bundle_directory(bundle_path: Path) -> Path:
    """The directory a bundle's ``.env`` files lie in."""
    resolved = bundle_path.resolve()
    return resolved if resolved.is_dir() else resolved.parent


def key_hint(bundle_path: Path) -> str:
    """Where to put a missing key: ``.env`` beside the bundle, naming its ``.env.example`` only
    when there is one."""
    example = bundle_directory(bundle_path) / ".env.example"
    see = " (see .env.example)" if example.is_file() else ""
    return f"put it in .env beside goondan.yaml{see}, or export it"


def load_env_files(
    bundle_path: Path,
    env_file: Path | None = None,
    environ: MutableMapping[str, str] | None = None,
) -> LoadedEnv:
    """Apply ``.env``, ``.env.local`` (beside ``bundle_path``) and ``env_file`` to
    ``environ`` (default ``os.environ``), later ones winning. Raises
    :class:`EnvFileMissing` for an ``env_file`` that cannot be read."""
    from dotenv import dotenv_values

    target = os.environ if environ is None else environ
    directory = bundle_directory(bundle_path)
    candidates = [directory / ".env", directory / ".env.local"]
    if env_file is not None:
        if not env_file.is_file():
            raise EnvFileMissing(f"--env-file {env_file}: no such file")
        candidates.append(env_file)
    loaded = LoadedEnv()
    for path in candidates:
        if not path.is_file():
            continue
        try:
            values = dotenv_values(path, interpolate=True)
        except (OSError, UnicodeDecodeError) as exc:
            raise EnvFileMissing(f"{path}: cannot be read ({type(exc).__name__})") from None
        for name, value in values.items():
            if value is not None:
                target[name] = value
                loaded.names.add(name)
        loaded.files.append(path)
    return loaded

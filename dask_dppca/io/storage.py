"""Where data lives: fsspec URLs, their storage options, and errors that keep secrets.

Storage options are the user's fsspec keyword arguments (credentials, endpoint, region).
They reach the workers inside the task graph, pickled with the filesystem that the read
tasks hold, so worker processes need no credentials of their own.  They are never
formatted into a message: :func:`describe_error` builds the one line shown for a
backend's failure, and masks the value of any secret-looking option a backend echoes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "BACKEND_EXTRAS",
    "check_storage_options",
    "describe_error",
    "display_location",
    "filesystem",
    "is_url",
    "mask_locations",
    "missing_backend",
    "remote_error",
    "storage_kind",
]

#: URL scheme -> the dask-dppca extra that installs its fsspec backend.
BACKEND_EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
}
#: An option whose name contains one of these holds a secret (masked in messages).
_SECRET_WORDS = (
    "secret",
    "token",
    "password",
    "key",
    "credential",
    "sas",
    "signature",
    "connection_string",
)
_MESSAGE_LIMIT = 300


def is_url(location: Any) -> bool:
    """Whether ``location`` is an fsspec URL (``s3://...``, ``simplecache::gs://...``)."""
    return isinstance(location, str) and "://" in location


def storage_kind(location: str) -> str:
    """Where a location's bytes live: a URL's protocol (the last of a chained URL, e.g.
    ``"s3"`` for ``simplecache::s3://...``) or ``"local"``: the machine model's key.
    """
    return location.split("://", 1)[0].split("::")[-1] if "://" in location else "local"


def display_location(location: Any) -> str:
    """``location`` as it may be shown: a URL's user and password, and the value of every
    query parameter (SAS tokens, presigned signatures, ``?token=...``), masked.

    The query's parameter names stay (``?sv=***&sig=***``): they say what kind of URL it
    is without saying what grants access.
    """
    text = os.fspath(location) if isinstance(location, os.PathLike) else str(location)
    if not is_url(text):
        return text
    parts = []
    for part in text.split("::"):
        split = urlsplit(part)
        if "@" in split.netloc:
            split = split._replace(netloc="***@" + split.netloc.rsplit("@", 1)[1])
        if split.query:
            split = split._replace(query=_masked_query(split.query))
        if split.fragment:
            split = split._replace(fragment=_masked_query(split.fragment))
        parts.append(urlunsplit(split))
    return "::".join(parts)


def _masked_query(query: str) -> str:
    """``a=1&b=2`` as ``a=***&b=***``; a bare value (``?abc``) as ``***``."""
    masked = []
    for item in re.split(r"([&;])", query):
        if item in ("&", ";", ""):
            masked.append(item)
        elif "=" in item:
            masked.append(item.split("=", 1)[0] + "=***")
        else:
            masked.append("***")
    return "".join(masked)


#: A URL inside a message (a backend's error text may quote the location it was given).
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def mask_locations(text: str) -> str:
    """``text`` with every URL in it shown as :func:`display_location` shows it."""

    def shown(match: re.Match) -> str:
        url = match.group(0)
        core = url.rstrip(".,:;)]}")  # punctuation of the sentence around the URL
        return display_location(core) + url[len(core) :]

    return _URL_IN_TEXT.sub(shown, text)


def check_storage_options(storage_options: Any, location: Any, name: str = "X") -> dict | None:
    """The storage options as a dict, or None; refused unless ``location`` is a URL.

    Local paths and in-memory inputs take no storage options (as ``zarr.open`` refuses
    them): a URL missing its scheme should not pass for a local path silently.
    """
    if storage_options is None or (isinstance(storage_options, Mapping) and not storage_options):
        return None
    if not isinstance(storage_options, Mapping) or not all(
        isinstance(key, str) for key in storage_options
    ):
        raise ValueError(
            "storage_options: must be a dict of fsspec keyword arguments "
            f"(str keys), got {type(storage_options).__name__}"
        )
    if not is_url(location):
        raise ValueError(
            f"storage_options: apply to fsspec URLs (s3://, gs://, az://, ...); "
            f"{name} is {_describe_input(location)}"
        )
    _check_chained(storage_options, str(location))
    return dict(storage_options)


def _check_chained(storage_options: Mapping, location: str) -> None:
    """A chained URL (``simplecache::s3://...``) takes its options nested per protocol.

    fsspec hands top-level options to the outermost filesystem only (the cache), so
    credentials given flat never reach S3, which then fails later as "no credentials".
    """
    if "::" not in location:
        return
    protocols = [part.split("://", 1)[0] for part in location.split("::")]
    flat = sorted(key for key in storage_options if key not in protocols)
    if flat:
        example = ", ".join(f'"{protocol}": {{...}}' for protocol in protocols)
        raise ValueError(
            f"storage_options: {display_location(location)!r} is a chained URL, whose options "
            f"are nested per protocol ({{{example}}}); got top-level keys {flat} "
            "(values not shown), which fsspec would give to the first filesystem only"
        )


def filesystem(location: str, storage_options: dict | None, name: str = "X"):
    """``(fs, path)`` for an fsspec URL; a missing backend names the extra to install."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(location, **(storage_options or {}))
    except ImportError as error:
        raise ValueError(missing_backend(location, name, error)) from None
    except Exception as error:
        raise ValueError(
            f"{name}: cannot use {display_location(location)!r} "
            f"({remote_error(error, storage_options)})"
        ) from None


def describe_error(error: BaseException, storage_options: Mapping | None = None) -> str:
    """``Type: first line of the message``, secrets of ``storage_options`` masked."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    for secret in _secrets(storage_options or {}):
        text = text.replace(secret, "***")
    text = mask_locations(text)
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def remote_error(error: BaseException, storage_options: Mapping | None) -> str:
    """:func:`describe_error` for a store's answer, with a hint when access was refused."""
    text = describe_error(error, storage_options)
    if isinstance(error, PermissionError):
        text += "; check the credentials in the storage options"
    return text


def _secrets(options: Mapping) -> list[str]:
    found = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            found += _secrets(value)
        elif (
            isinstance(value, str)
            and len(value) >= 4
            and any(word in str(key).lower() for word in _SECRET_WORDS)
        ):
            found.append(value)
    return found


def missing_backend(location: str, name: str, error: ImportError) -> str:
    """The one line for a URL whose fsspec backend is not installed: the extra to install
    (``pip install 'dask-dppca[s3]'``), else the backend's own message.
    """
    schemes = [part.split("://", 1)[0] for part in location.split("::") if "://" in part]
    extras = sorted({BACKEND_EXTRAS[s] for s in schemes if s in BACKEND_EXTRAS})
    if extras:
        install = " ".join(f"'dask-dppca[{extra}]'" for extra in extras)
        return (
            f"{name}: reading {display_location(location)!r} needs an fsspec backend that "
            f"is not installed: pip install {install}"
        )
    return (
        f"{name}: no fsspec backend installed for {display_location(location)!r} "
        f"({describe_error(error)})"
    )


def _describe_input(location: Any) -> str:
    if isinstance(location, (str, os.PathLike)):
        return f"the local path {display_location(location)!r}"
    return f"a {type(location).__name__}"

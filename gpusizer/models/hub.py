"""A model's ``config.json`` from the Hugging Face Hub, through ``huggingface_hub``.

``--hf-model ORG/NAME`` reads the file from the local Hugging Face cache, or
downloads it when online. huggingface_hub itself honours ``HF_HUB_OFFLINE`` (use
the cache only), ``HF_TOKEN`` (gated and private repositories), ``HF_ENDPOINT``
(a mirror) and ``HF_HOME``. Only ``config.json`` is read: never weights, never code.
Each way it can fail becomes one :class:`~gpusizer.errors.HubError` line that says
what to do next.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpusizer.errors import HubError, MissingExtraError, UsageError

#: ORG/NAME as the Hub spells repository ids (96 characters at most per part)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")


def check_repo_id(repo_id: str) -> str:
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise UsageError(f"{repo_id[:80]!r} is not a Hugging Face repository id", hint="e.g. Qwen/Qwen3-8B",
                         field="hf_model")
    return repo_id


def hub_config_path(repo_id: str, revision: str | None = None) -> Path:
    """The local path of ``repo_id``'s config.json, downloaded if it is not cached."""
    check_repo_id(repo_id)
    try:
        import huggingface_hub
        from huggingface_hub import errors
    except ImportError:
        raise MissingExtraError("reading models from the Hugging Face Hub needs huggingface_hub", hint="pip install 'gpusizer[hub]'") from None
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, "config.json", revision=revision))
    except errors.GatedRepoError:
        raise HubError(f"{repo_id} is gated: its config needs an accepted licence and a token",
                       hint=f"accept the terms at huggingface.co/{repo_id}, then set HF_TOKEN") from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{repo_id} was not found on the Hub (or is private)",
                       hint="check the name; for a private repository set HF_TOKEN") from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{repo_id} has no revision {revision!r}", hint="check the revision") from None
    # (LocalEntryNotFoundError subclasses EntryNotFoundError: it comes first)
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled):
        raise HubError(f"{repo_id}'s config.json is not in the local cache and the Hub cannot be reached",
                       hint="connect and unset HF_HUB_OFFLINE, or download config.json and give the local file") from None
    except errors.EntryNotFoundError:
        raise HubError(f"{repo_id} has no config.json", hint="give a local config.json instead") from None
    except (errors.HfHubHTTPError, OSError) as exc:
        raise HubError(f"{repo_id}: the Hub could not be read: {str(exc).splitlines()[0][:160]}",
                       hint="retry, or download config.json and give the local file") from None

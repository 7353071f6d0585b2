"""Publish a pruned model folder to the Hugging Face Hub through `huggingface_hub`, private by default.

`push` checks everything it can offline first (a pruned folder with weights, a well-formed
`NAMESPACE/NAME`, a token from `HF_TOKEN` or `hf auth login`), then creates the repository and
uploads the folder in one commit. `dry_run=True` lists what would be uploaded and touches nothing.
The card's loading examples name the local folder; the uploaded copy names the repository.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nirvana.errors import CorruptCheckpoint, InvalidInput, PublishFailed
from nirvana.export.card import CARD_FILE, read_report, write_model_card
from nirvana.export.modeling import (
    MODELING_FILE,
    add_stock_loading,
    has_per_layer_widths,
    is_stock_loadable,
    model_folder,
    read_config,
)

TOKEN_HELP = "https://huggingface.co/settings/tokens"


@dataclass(frozen=True)
class Upload:
    """One file of the commit: where it goes in the repository, where it comes from, its size."""

    path_in_repo: str
    local: Path
    size: int
    note: str = ""


def pruned_model_folder(path: str | Path) -> Path:
    """The model folder itself (a `prune --out` folder holding `model/` is accepted), or a clear error."""

    if not Path(path).expanduser().is_dir():
        raise InvalidInput(f"--model {str(path)!r} is not a folder; pass the folder written by `nirvana prune --out`.")
    folder = model_folder(path)
    try:
        config = read_config(folder)
    except CorruptCheckpoint:
        config = None
    if not config or not has_per_layer_widths(config):
        raise CorruptCheckpoint(
            f"{str(path)!r} is not a pruned model folder (no config.json with per-layer widths); pass the "
            "folder written by `nirvana prune --out` or its model/ subfolder. To publish a dense model, "
            "use `hf upload` instead."
        )
    if not (folder / "model.safetensors").exists() and not (folder / "model.safetensors.index.json").exists():
        raise CorruptCheckpoint(f"{str(folder)!r} has no model.safetensors; re-save the pruned model.")
    return folder


def check_repo_id(repo_id: str) -> str:
    """`NAMESPACE/NAME` with the Hub's allowed characters, or `InvalidInput` saying why not."""
    # here, not at the top: huggingface_hub is needed only to publish or look up a licence
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo_id = (repo_id or "").strip()
    if repo_id.count("/") != 1:
        raise InvalidInput(
            f"--repo-id {repo_id!r} must be NAMESPACE/NAME (your user or organisation, a slash, the model's "
            "name), e.g. alice/smollm2-135m-nirvana-50."
        )
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InvalidInput(
            f"--repo-id {repo_id!r} is not a valid Hub repository id: use letters, digits, '-', '_' and '.', "
            "not starting or ending with '-' or '.', at most 96 characters (e.g. alice/smollm2-135m-nirvana-50)."
        ) from exc
    return repo_id


def planned_uploads(folder: Path) -> list[Upload]:
    """Every file the commit will hold, with notes for the ones `push` adds to an older folder."""
    files = [
        Upload(p.relative_to(folder).as_posix(), p, p.stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    names = {f.path_in_repo for f in files}
    if not is_stock_loadable(folder):
        note = "added: stock-transformers modeling file (and auto_map in config.json)"
        if MODELING_FILE in names:
            note = "updated to the current modeling file (and auto_map in config.json)"
        files = [f for f in files if f.path_in_repo != MODELING_FILE] + [
            Upload(MODELING_FILE, folder / MODELING_FILE, 0, note)
        ]
    if CARD_FILE not in names:
        files.append(Upload(CARD_FILE, folder / CARD_FILE, 0, "added: model card from plan.json / report.json"))
    return sorted(files, key=lambda f: f.path_in_repo)


def _card_for_repo(folder: Path, repo_id: str) -> bytes:
    """The card with its loading examples pointing at the repository instead of the local folder."""
    text = (folder / CARD_FILE).read_text()
    for shown in (str(folder), str(folder.resolve())):
        text = text.replace(f'"{shown}"', f'"{repo_id}"').replace(f"--model {shown} ", f"--model {repo_id} ")
    return text.encode()


def _offline() -> bool:
    # here, not at the top: huggingface_hub is needed only to publish or look up a licence
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}


def _is_network_error(exc: BaseException) -> bool:
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"ConnectError", "TransportError", "TimeoutException", "NetworkError", "ConnectionError"})


def push(
    model: str | Path,
    repo_id: str,
    *,
    private: bool = True,
    dry_run: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> dict:
    """Upload a pruned model folder to `repo_id` (created if missing, private unless `private=False`).

    Returns {"repo_id", "private", "files": [{path, bytes, note}], "dry_run", "url"?}. Example:
        >>> push("/tmp/p50", "alice/smollm2-135m-nirvana-50", dry_run=True)["files"][0]["path"]
        'README.md'
    """
    folder = pruned_model_folder(model)
    repo_id = check_repo_id(repo_id)
    uploads = planned_uploads(folder)
    summary = {
        "repo_id": repo_id,
        "private": private,
        "folder": str(folder),
        "files": [{"path": u.path_in_repo, "bytes": u.size, **({"note": u.note} if u.note else {})} for u in uploads],
        "total_bytes": sum(u.size for u in uploads),
        "dry_run": dry_run,
    }
    if dry_run:
        return summary
    # here, not at the top: huggingface_hub is needed only to publish or look up a licence
    from huggingface_hub import CommitOperationAdd, HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    token = token or get_token()
    if not token:
        raise InvalidInput(
            "no Hugging Face token: set HF_TOKEN to a token with write access (create one at "
            f"{TOKEN_HELP}) or run `hf auth login`, then push again. `--dry-run` lists the files without one."
        )
    if _offline():
        raise PublishFailed("HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it and push again.")
    if not is_stock_loadable(folder):
        add_stock_loading(folder)
    if not (folder / CARD_FILE).exists():
        write_model_card(folder, read_report(folder))
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        operations = [
            CommitOperationAdd(
                path_in_repo=u.path_in_repo,
                path_or_fileobj=_card_for_repo(folder, repo_id) if u.path_in_repo == CARD_FILE else str(u.local),
            )
            for u in planned_uploads(folder)
        ]
        api.create_commit(
            repo_id, operations, commit_message=commit_message or "Upload NIRVANA-pruned model (NIRVANA Explorer)"
        )
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            raise PublishFailed(
                f"the Hub rejected the token (401); set HF_TOKEN to a valid write token ({TOKEN_HELP})."
            ) from exc
        if status == 403:
            raise PublishFailed(
                f"the token may not write to {repo_id!r} (403); use your own namespace or a token with write "
                "access to that organisation."
            ) from exc
        raise PublishFailed(f"the Hub refused the upload to {repo_id!r}: {str(exc).splitlines()[0]}") from exc
    except Exception as exc:
        if _is_network_error(exc) or isinstance(exc, OSError):
            raise PublishFailed(
                f"cannot reach the Hugging Face Hub ({type(exc).__name__}: {str(exc)[:120]}); check the network "
                "connection (or HF_ENDPOINT) and push again. Nothing was uploaded unless the repository was created."
            ) from exc
        raise
    uploaded = [{"path": u.path_in_repo, "bytes": u.size} for u in planned_uploads(folder)]
    return {**summary, "files": uploaded, "total_bytes": sum(f["bytes"] for f in uploaded), "url": str(url)}

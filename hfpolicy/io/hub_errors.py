"""Why a Hub transfer failed, in one line with the fix (huggingface_hub hides most causes in the exception chain)."""

from huggingface_hub import constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)


def describe_hub_error(error: BaseException, repo_id: str, filename: str, revision: str | None = None) -> str:
    """A one-line cause and fix for a failed `hf_hub_download(repo_id, filename)`."""
    chain = _chain(error)
    at = f" (revision {revision})" if revision else ""
    endpoint = constants.ENDPOINT
    invalid = next((e for e in chain if isinstance(e, HFValidationError)), None)
    if invalid is not None:  # before offline mode: an invalid id is never in any cache
        if repo_id.startswith(("/", ".", "~")) or repo_id.count("/") > 1:
            return f"there is no directory {repo_id!r} (a path, not a Hub repo id like user/name): check the path"
        return f"{repo_id!r} is neither an existing local directory nor a valid Hub repo id ({invalid})"
    if any(isinstance(e, OfflineModeIsEnabled) for e in chain) or constants.HF_HUB_OFFLINE:
        return (
            f"{filename} of {repo_id!r}{at} is not in the local Hub cache and HF_HUB_OFFLINE=1 forbids downloading "
            "it: unset HF_HUB_OFFLINE (or download it once while online), or pass a local directory"
        )
    for e in chain:
        if isinstance(e, GatedRepoError):
            return f"the Hub repo {repo_id!r} is gated: accept its terms on the Hub and log in (`hf auth login`)"
        if isinstance(e, RepositoryNotFoundError):
            return (
                f"there is no Hub repo {repo_id!r} on {endpoint}, or it is private: check the name, or log in "
                "(`hf auth login`) if it is yours; a local directory path must exist"
            )
        if isinstance(e, RevisionNotFoundError):
            return f"the Hub repo {repo_id!r} has no revision {revision!r}: check the branch, tag or commit"
        if isinstance(e, HfHubHTTPError) and not isinstance(e, EntryNotFoundError):
            status = e.response.status_code if getattr(e, "response", None) is not None else None
            if status is not None and status >= 500:
                return (
                    f"the Hub at {endpoint} answered {status} (a server error) for {filename} of {repo_id!r}: "
                    "try again later"
                )
            if status in (401, 403):
                return f"the Hub refused access to {repo_id!r} ({status}): log in (`hf auth login`) or pass a token"
        if is_missing_file(e):
            return f"the Hub repo {repo_id!r}{at} has no {filename}"
    network = next((e for e in chain if _is_network_error(e)), None)
    if network is not None:
        return (
            f"cannot reach the Hub at {endpoint} ({type(network).__name__}: {str(network).splitlines()[0]}) to get "
            f"{filename} of {repo_id!r}: check the network (and HF_ENDPOINT), or set HF_HUB_OFFLINE=1 to use the "
            "local cache, or pass a local directory"
        )
    return f"could not get {filename} of {repo_id!r}{at} from the Hub ({type(error).__name__}: {error})"


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _is_network_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "NetworkError"}) or (
        isinstance(error, ConnectionError | TimeoutError)
    )


def is_missing_file(error: BaseException) -> bool:
    """The repo exists but lacks the file (as opposed to a network or cache problem)."""
    return isinstance(error, EntryNotFoundError) and isinstance(error, HfHubHTTPError)


def describe_push_error(error: BaseException, repo_id: str) -> str | None:
    """A one-line cause and fix for a failed push to (or access check of) the Hub repo `repo_id`; None when the error
    is not a Hub or network failure (a bug, to be shown with its traceback)."""
    endpoint = constants.ENDPOINT
    for e in _chain(error):
        if isinstance(e, HfHubHTTPError):
            status = e.response.status_code if getattr(e, "response", None) is not None else None
            if status in (401, 403):
                return (
                    f"the Hub at {endpoint} refused to let this token write to {repo_id!r} ({status}): log in with a "
                    "token that has write access (`hf auth login`, or HF_TOKEN), or choose a repo in your namespace"
                )
            if status is not None and status >= 500:
                return f"the Hub at {endpoint} answered {status} (a server error) for {repo_id!r}: try again later"
            return f"the Hub at {endpoint} refused the push to {repo_id!r} ({status}: {str(e).splitlines()[0]})"
    network = next((e for e in _chain(error) if _is_network_error(e)), None)
    if network is not None:
        return (
            f"cannot reach the Hub at {endpoint} ({type(network).__name__}: {str(network).splitlines()[0]}): check "
            "the network, or HF_ENDPOINT if it points at another server"
        )
    return None

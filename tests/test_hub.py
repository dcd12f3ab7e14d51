"""``--hf-model ORG/NAME`` against a small fake Hub served on 127.0.0.1.

The CLI runs as a subprocess with ``HF_ENDPOINT`` pointing at the fake Hub and
``HF_HOME`` / ``HF_HUB_CACHE`` in a temporary folder, so huggingface_hub's real
download path runs (HEAD then GET on ``/{repo}/resolve/main/config.json``, the
cache layout, offline mode, the error headers) and no real cache or network is
touched. huggingface_hub reads these variables when it is imported, hence a
subprocess rather than an in-process run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("huggingface_hub")  # the hub extra (also in the test extra)

ROOT = Path(__file__).resolve().parent.parent

#: the commit every fake repository is at (X-Repo-Commit)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_test123"

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
}
CONFIG_BYTES = json.dumps(TINY_LLAMA, indent=2).encode()


def llama_params(c: dict[str, Any]) -> int:
    """LlamaForCausalLM's parameter count for ``c`` (full multi-head attention), by hand."""
    h, f, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    assert c["num_key_value_heads"] == c["num_attention_heads"]  # so k and v are h x h like q and o
    embed = vocab * h
    per_layer = 4 * h * h + 3 * h * f + 2 * h  # q, k, v, o; gate, up, down; two RMSNorms
    lm_head = 0 if c["tie_word_embeddings"] else vocab * h
    return embed + layers * per_layer + h + lm_head  # + the final norm


EXPECTED_PARAMS = llama_params(TINY_LLAMA)


def test_expected_params_by_hand() -> None:
    assert EXPECTED_PARAMS == 32000 * 512 * 2 + 4 * (4 * 512 * 512 + 3 * 512 * 1376 + 2 * 512) + 512 == 45_421_056


# ----------------------------------------------------------------------------- the fake Hub


class FakeHub(ThreadingHTTPServer):
    """Answers HEAD and GET on ``/{org}/{name}/resolve/{revision}/{file}`` the way the Hub does.

    Public repositories serve ``config.json`` with the headers huggingface_hub needs
    (X-Repo-Commit, ETag: the git blob sha1, Content-Length). The others answer with
    the Hub's error headers: ``X-Error-Code`` RepoNotFound, GatedRepo or EntryNotFound.
    Every request is recorded with its Authorization header.
    """

    daemon_threads = True

    #: repositories whose config.json anyone may read
    PUBLIC = {"test-org/tiny-llama", "test-org/other-llama"}
    #: readable with ``Authorization: Bearer hf_test123`` only; otherwise "not found", like the Hub
    PRIVATE = {"test-org/private-llama"}
    #: gated: 401 without a token, 403 with one (the terms were not accepted)
    GATED = {"test-org/gated-llama"}
    #: a repository without a config.json
    NO_CONFIG = {"test-org/no-config"}

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, str | None]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def requests_for(self, repo_id: str) -> list[dict[str, str | None]]:
        return [r for r in self.requests if r["path"].startswith(f"/{repo_id}/")]


class _Handler(BaseHTTPRequestHandler):
    server: FakeHub

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    def _answer(self, *, send_body: bool) -> None:
        path = urlsplit(self.path).path
        auth = self.headers.get("Authorization")
        self.server.requests.append({"method": self.command, "path": path, "authorization": auth})
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if match is None:
            return self._error(404, None, "Not found", send_body)
        repo_id, revision, filename = match.groups()
        hub = FakeHub
        if repo_id in hub.GATED:
            status = 403 if auth else 401
            return self._error(status, "GatedRepo", f"Access to model {repo_id} is restricted.", send_body)
        readable = repo_id in hub.PUBLIC or repo_id in hub.NO_CONFIG or (
            repo_id in hub.PRIVATE and auth == f"Bearer {TOKEN}")
        if not readable:
            return self._error(404, "RepoNotFound", "Repository not found", send_body)
        if revision != "main":
            return self._error(404, "RevisionNotFound", "Invalid rev id", send_body)
        if filename != "config.json" or repo_id in hub.NO_CONFIG:
            return self._error(404, "EntryNotFound", "Entry not found", send_body, commit=True)
        etag = hashlib.sha1(b"blob %d\0" % len(CONFIG_BYTES) + CONFIG_BYTES).hexdigest()  # git's blob id
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(CONFIG_BYTES)))
        self.send_header("ETag", f'"{etag}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if send_body:
            self.wfile.write(CONFIG_BYTES)

    def _error(self, status: int, code: str | None, message: str, send_body: bool, *, commit: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code is not None:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    server = FakeHub()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def dead_endpoint() -> str:
    """The URL of a port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ----------------------------------------------------------------------------- running the CLI

_PROXIES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


def hub_env(hf_home: Path, endpoint: str, **extra: str) -> dict[str, str]:
    """The environment for one run: no Hugging Face or proxy settings of the caller's,
    the Hub at ``endpoint`` and its cache under ``hf_home``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "TRANSFORMERS_OFFLINE" and k.lower() not in _PROXIES}
    env.update(HF_HOME=str(hf_home), HF_HUB_CACHE=str(hf_home / "hub"), HF_ENDPOINT=endpoint,
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "gpusizer", *args], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def fit(repo_id: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli("fit-model", "--hf-model", repo_id, "--memory", "24GiB", "--json", env=env)


def ok_document(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return json.loads(result.stdout)


def error_document(result: subprocess.CompletedProcess[str], code: str, exit_code: int) -> dict[str, Any]:
    """The one JSON error document on stdout, checked against the exit code; returns its ``error``."""
    assert result.returncode == exit_code, (result.returncode, result.stdout, result.stderr)
    doc = json.loads(result.stdout)  # one document, nothing else
    error = doc["error"]
    assert error["code"] == code and error["exit_code"] == exit_code, doc
    assert doc["command"] == "fit-model"
    assert result.stderr.startswith(f"Error: {error['message']}\n"), result.stderr
    return error


def assert_tiny_llama(doc: dict[str, Any]) -> None:
    assert doc["command"] == "fit-model"
    assert doc["input"]["params"] == EXPECTED_PARAMS
    assert doc["results"]["params"] == EXPECTED_PARAMS
    assert doc["input"]["model"] == "tiny-llama"
    assert doc["results"]["model"] == "tiny-llama"
    assert doc["input"]["gpus_checked"] == ["24GiB card"]


# ----------------------------------------------------------------------------- downloads and the cache


@pytest.fixture(scope="module")
def downloaded(hub: FakeHub, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """test-org/tiny-llama downloaded once into a fresh cache: the run and HF_HOME."""
    hf_home = tmp_path_factory.mktemp("hf-home")
    return fit("test-org/tiny-llama", hub_env(hf_home, hub.url)), hf_home


def test_download(hub: FakeHub, downloaded: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, hf_home = downloaded
    assert_tiny_llama(ok_document(result))
    # the real download path: a HEAD for the metadata, then a GET for the file, with no token
    assert [(r["method"], r["path"]) for r in hub.requests_for("test-org/tiny-llama")] == [
        ("HEAD", "/test-org/tiny-llama/resolve/main/config.json"),
        ("GET", "/test-org/tiny-llama/resolve/main/config.json"),
    ]
    assert all(r["authorization"] is None for r in hub.requests_for("test-org/tiny-llama"))
    # ... into the cache under HF_HOME, laid out as huggingface_hub lays it out
    repo = hf_home / "hub" / "models--test-org--tiny-llama"
    assert (repo / "refs" / "main").read_text() == COMMIT
    assert (repo / "snapshots" / COMMIT / "config.json").read_bytes() == CONFIG_BYTES


@pytest.mark.parametrize(("offline", "server_up"), [(True, False), (True, True), (False, False)],
                         ids=["offline-dead-port", "offline-server-up", "online-dead-port"])
def test_cached_config_is_used_without_the_hub(
    hub: FakeHub, downloaded: tuple[subprocess.CompletedProcess[str], Path], offline: bool, server_up: bool,
) -> None:
    _, hf_home = downloaded
    extra = {"HF_HUB_OFFLINE": "1"} if offline else {}
    before = len(hub.requests)
    result = fit("test-org/tiny-llama", hub_env(hf_home, hub.url if server_up else dead_endpoint(), **extra))
    assert_tiny_llama(ok_document(result))
    assert len(hub.requests) == before  # offline: not one request, even with the Hub there


def test_offline_and_not_cached(hub: FakeHub, tmp_path: Path) -> None:
    result = fit("test-org/other-llama", hub_env(tmp_path, hub.url, HF_HUB_OFFLINE="1"))
    error = error_document(result, "hub", 8)
    assert error["message"].startswith("test-org/other-llama")
    assert error["hint"]
    assert hub.requests_for("test-org/other-llama") == []
    assert not (tmp_path / "hub" / "models--test-org--other-llama" / "snapshots").exists()


def test_offline_and_not_cached_says_so(hub: FakeHub, tmp_path: Path) -> None:
    error = error_document(fit("test-org/other-llama", hub_env(tmp_path, hub.url, HF_HUB_OFFLINE="1")), "hub", 8)
    assert "cache" in error["message"]
    assert "HF_HUB_OFFLINE" in error["hint"]


# ----------------------------------------------------------------------------- what the Hub refuses


def test_missing_repository(hub: FakeHub, tmp_path: Path) -> None:
    result = fit("test-org/does-not-exist", hub_env(tmp_path, hub.url))
    error = error_document(result, "hub", 8)
    assert error["message"] == "test-org/does-not-exist was not found on the Hub (or is private)"
    assert "HF_TOKEN" in error["hint"]
    assert [r["method"] for r in hub.requests_for("test-org/does-not-exist")] == ["HEAD"]


def test_repository_without_config(hub: FakeHub, tmp_path: Path) -> None:
    error = error_document(fit("test-org/no-config", hub_env(tmp_path, hub.url)), "hub", 8)
    assert error["message"] == "test-org/no-config has no config.json"
    assert error["hint"]


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no-token-401", "token-403"])
def test_gated_repository(hub: FakeHub, tmp_path: Path, token: str | None) -> None:
    extra = {"HF_TOKEN": token} if token else {}
    error = error_document(fit("test-org/gated-llama", hub_env(tmp_path, hub.url, **extra)), "hub", 8)
    assert "test-org/gated-llama is gated" in error["message"]
    assert "HF_TOKEN" in error["hint"]
    assert "huggingface.co/test-org/gated-llama" in error["hint"]


def test_token_is_sent(hub: FakeHub, tmp_path: Path) -> None:
    """HF_TOKEN reaches the Hub as a bearer token, and opens a private repository."""
    result = fit("test-org/private-llama", hub_env(tmp_path, hub.url, HF_TOKEN=TOKEN))
    doc = ok_document(result)
    assert doc["input"]["params"] == EXPECTED_PARAMS
    seen = hub.requests_for("test-org/private-llama")
    assert [r["method"] for r in seen] == ["HEAD", "GET"]
    assert {r["authorization"] for r in seen} == {f"Bearer {TOKEN}"}


def test_private_repository_without_token(hub: FakeHub, tmp_path: Path) -> None:
    error = error_document(fit("test-org/private-llama", hub_env(tmp_path / "home", hub.url)), "hub", 8)
    assert "was not found" in error["message"]


# ----------------------------------------------------------------------------- bad repository ids


@pytest.mark.parametrize("repo_id", ["../etc", "no-slash", "org/../etc", "a/b/c"])
def test_bad_repository_id_is_a_usage_error(hub: FakeHub, tmp_path: Path, repo_id: str) -> None:
    before = len(hub.requests)
    error = error_document(fit(repo_id, hub_env(tmp_path, hub.url)), "usage", 2)
    assert error["message"].startswith("--hf-model: ")
    assert "is not a Hugging Face repository id" in error["message"]
    assert len(hub.requests) == before  # refused before asking the Hub
    assert not (tmp_path / "hub").exists()


def test_bad_repository_id_without_json(hub: FakeHub, tmp_path: Path) -> None:
    result = run_cli("fit-model", "--hf-model", "../etc", "--memory", "24GiB", env=hub_env(tmp_path, hub.url))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("Error: --hf-model: '../etc' is not a Hugging Face repository id\n")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
                    reason="needs gpusizer[torch] (CI runs it in its own virtualenv)")
def test_exact_mode_builds_a_model_read_from_the_hub(hub: FakeHub, tmp_path: Path) -> None:
    """Acceptance: fit-model --exact --hf-model against the local test hub downloads the
    config and traces the model transformers builds from it, with the same count."""
    env = hub_env(tmp_path, hub.url)
    result = run_cli("fit-model", "--exact", "--hf-model", "test-org/tiny-llama", "--batch", "2", "--seq-len", "128",
                     "--memory", "24GiB", "--json", env=env)
    doc = ok_document(result)
    assert doc["results"]["method"] == "exact"
    assert doc["input"]["exact"]["source"] == "hf-model" and doc["input"]["exact"]["ref"] == "test-org/tiny-llama"
    assert doc["results"]["params"] == llama_params(TINY_LLAMA)
    assert doc["results"]["trace"]["model_class"] == "LlamaForCausalLM"
    assert "Traceback" not in result.stderr

"""The service token file and where ``streamplace serve`` binds: loopback unless the JobManager
is elsewhere (host mode's head address, a real multi-host cluster), then that address with a
token that ``job submit`` hands to the hooks; the token file is read only when it is safe."""

from __future__ import annotations

import argparse
import os
import stat

import pytest

from streamplace.cli import _hook_settings, service_settings
from streamplace.config import ConfigError, load_config
from streamplace.service_token import (MAX_TOKEN_FILE_BYTES, TokenFileError, ensure_token,
                                       read_token, token_path)

HEAD = "10.213.0.1"


@pytest.fixture(autouse=True)
def _no_token_in_environment(monkeypatch):
    monkeypatch.delenv("STREAMPLACE_SERVICE_TOKEN", raising=False)


def test_a_made_token_is_private_and_reused(tmp_path):
    token = ensure_token(tmp_path)
    mode = stat.S_IMODE(os.stat(token_path(tmp_path)).st_mode)
    assert mode == 0o600
    assert ensure_token(tmp_path) == token == read_token(tmp_path)
    assert len(token) == 32 and not list(tmp_path.glob(".*.tmp"))


def _write(tmp_path, content: bytes, mode: int = 0o600):
    path = token_path(tmp_path)
    path.write_bytes(content)
    os.chmod(path, mode)


@pytest.mark.parametrize("content,mode,problem", [
    (b"abcdefgh12345678\n", 0o644, "readable or writable by others"),
    (b"abcdefgh12345678\n", 0o620, "readable or writable by others"),
    (b"x" * (MAX_TOKEN_FILE_BYTES + 1), 0o600, "larger than"),
    (b"short", 0o600, "does not hold a token"),
    (b"has spaces in it", 0o600, "does not hold a token"),
    (b"\xff\xfe\x00binary-token", 0o600, "does not hold a token"),
    (b"", 0o600, "does not hold a token"),
], ids=["world-readable", "group-writable", "too-large", "too-short", "spaces", "binary",
        "empty"])
def test_an_untrustworthy_token_file_is_refused(tmp_path, content, mode, problem):
    _write(tmp_path, content, mode)
    with pytest.raises(TokenFileError, match=problem):
        read_token(tmp_path)
    with pytest.raises(TokenFileError):   # and never silently replaced
        ensure_token(tmp_path)


def test_a_link_or_a_folder_is_not_a_token_file(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("abcdefgh12345678")
    os.chmod(target, 0o600)
    token_path(tmp_path).symlink_to(target)
    with pytest.raises(TokenFileError):
        read_token(tmp_path)
    token_path(tmp_path).unlink()
    token_path(tmp_path).mkdir()
    with pytest.raises(TokenFileError):
        read_token(tmp_path)


def test_a_missing_file_is_no_token(tmp_path):
    assert read_token(tmp_path) is None


def _config(tmp_path, *overrides):
    return load_config(overrides=[f"home={tmp_path}", *overrides])


@pytest.mark.parametrize("overrides,flag_host,env_token,expect_host,expect_file", [
    ((), None, None, "127.0.0.1", False),                        # laptop: loopback, no token
    ((f"flink.host={HEAD}",), None, None, HEAD, True),           # JobManager elsewhere
    ((f"flink.host={HEAD}",), None, "from-the-environment", HEAD, False),
    ((f"flink.host={HEAD}",), "127.0.0.1", None, "127.0.0.1", False),   # the flag wins
    ((f"flink.host={HEAD}", "service.host=127.0.0.1"), None, None, "127.0.0.1", False),
], ids=["loopback", "head-address-made-token", "head-address-env-token", "flag-wins",
        "config-wins"])
def test_where_the_service_binds(tmp_path, monkeypatch, overrides, flag_host, env_token,
                                 expect_host, expect_file):
    if env_token:
        monkeypatch.setenv("STREAMPLACE_SERVICE_TOKEN", env_token)
    settings = service_settings(_config(tmp_path, *overrides), host=flag_host)
    assert settings.host == expect_host
    assert token_path(tmp_path).exists() == expect_file
    if expect_file:
        assert settings.token == read_token(tmp_path)
    elif env_token:
        assert settings.token == env_token


def test_a_bad_token_file_stops_serve_with_the_reason(tmp_path):
    _write(tmp_path, b"abcdefgh12345678", 0o644)
    with pytest.raises(ConfigError, match="needs a token.*readable or writable by others"):
        service_settings(_config(tmp_path, f"flink.host={HEAD}"))


def test_job_submit_hands_the_service_token_to_the_hooks(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    args = argparse.Namespace(policy="ldwp", service_url=f"http://{HEAD}:8471", plan="",
                              scheduler="iawp")
    assert _hook_settings(cfg, args)["service_token"] == ""   # no token anywhere yet
    token = ensure_token(tmp_path)
    assert _hook_settings(cfg, args)["service_token"] == token
    monkeypatch.setenv("STREAMPLACE_SERVICE_TOKEN", "env-token-wins")
    assert _hook_settings(cfg, args)["service_token"] == "env-token-wins"
    args.service_url = ""
    assert _hook_settings(cfg, args)["service_token"] == ""    # no service: no token sent

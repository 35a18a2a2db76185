"""The API client's connection pool holds every watch and the writers (`kube/connect.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.kube import cache
from gpuscale.kube.connect import POOL_CONNECTIONS, api_client

KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
              "users": [{"name": "u", "user": {"token": "t"}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


def _pool_size(api: object) -> int:
    return int(api.rest_client.pool_manager.connection_pool_kw["maxsize"])  # type: ignore[attr-defined]


def test_the_pool_holds_every_watch_and_room_for_writes() -> None:
    assert len(cache.KINDS) + 1 + 8 <= POOL_CONNECTIONS  # each kind's watch, Events, and room for the writers


def _check(api: Any) -> None:
    try:
        assert _pool_size(api) == POOL_CONNECTIONS
        assert api.configuration.host == "https://127.0.0.1:6443"
    finally:
        api.close()


def test_a_client_from_a_kubeconfig_keeps_the_pool_size(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(KUBECONFIG), encoding="utf-8")
    _check(api_client(path))


def test_an_in_cluster_client_keeps_the_pool_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config

    (tmp_path / "token").write_text("t", encoding="utf-8")
    (tmp_path / "ca.crt").write_text("not checked until a request is made", encoding="utf-8")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    _check(api_client(None))

"""Reading cluster dumps from files: a `v1 List` as `kubectl get nodes,pods,pdb -A -o json` prints it, a single
object, or multi-document YAML. The only I/O is reading the file; conversion is `gpuscale.kube.convert`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpuscale.kube.convert import cluster_from_objects
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import InputError


def load_objects(path: Path) -> list[Any]:
    """The objects in a file; raises `InputError` for unreadable files, bad JSON/YAML or a non-object document."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(str(path), "file", err.strerror or str(err)) from None
    except UnicodeDecodeError as err:
        raise InputError(str(path), f"byte {err.start}", "not UTF-8 text") from None
    if text.lstrip().startswith(("{", "[")):
        try:
            docs: list[Any] = [json.loads(text)]
        except json.JSONDecodeError as err:
            raise InputError(str(path), f"line {err.lineno} column {err.colno}", f"bad JSON: {err.msg}") from None
    else:
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "document"
            raise InputError(str(path), where, f"bad YAML: {getattr(err, 'problem', None) or err}") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            raise InputError(str(path), f"document {i + 1}",
                             "expected a Kubernetes object or a v1 List (an object with 'kind')")
    return docs


def load_cluster(path: Path) -> Cluster:
    return cluster_from_objects(load_objects(path), source=str(path))

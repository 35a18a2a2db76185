"""Reading cluster dumps from files: a `v1 List` as `kubectl get nodes,pods,pdb -A -o json` prints it, a single
object, or multi-document YAML. The only I/O is reading the file (at most `DUMP_BYTES`, JSON without NaN, YAML as
YAML 1.2 with nesting and alias budgets: `gpuscale.inputs`); conversion is `gpuscale.kube.convert`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuscale.inputs import jsonread, yaml12
from gpuscale.inputs.files import DUMP_BYTES, read_text
from gpuscale.kube.convert import cluster_from_objects
from gpuscale.model.cluster import Cluster
from gpuscale.model.errors import InputError

_INT64_MAX = 2**63 - 1


def load_objects(path: Path) -> list[Any]:
    """The objects in a file; raises `InputError` for unreadable files, bad JSON/YAML or a non-object document."""
    text = read_text(path, DUMP_BYTES, "a cluster dump")
    if text.lstrip().startswith(("{", "[")):
        docs: list[Any] = [jsonread.loads(text, str(path))]
    else:
        try:
            docs = yaml12.load_all(text)
        except yaml.YAMLError as err:
            where, problem = yaml12.describe(err)
            raise InputError(str(path), where or "document", problem) from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
            raise InputError(str(path), f"document {i + 1}",
                             "expected a Kubernetes object or a v1 List (an object with 'kind')")
    return docs


def _check_totals(cluster: Cluster, source: str) -> None:
    """Every resource summed over the cluster's nodes, and over its pods, stays within int64, as the engine's NumPy
    tables hold it; each amount alone is already within int64 milli-units (`model.quantity`)."""
    for kind, vectors in (("nodes' allocatable", [n.allocatable for n in cluster.nodes]),
                          ("pods' requests", [p.requests for p in cluster.pods])):
        totals: dict[str, int] = {}
        for vector in vectors:
            for name, amount in vector.items:
                totals[name] = totals.get(name, 0) + amount
        for name, total in sorted(totals.items()):
            if total > _INT64_MAX:
                raise InputError(source, name, f"the {kind} add up to more than int64 ({total:.3e})")


def load_cluster(path: Path) -> Cluster:
    """The cluster in a dump; a dump without a single Node or Pod is an error (a wrong file or an empty listing)."""
    cluster = cluster_from_objects(load_objects(path), source=str(path))
    if not cluster.nodes and not cluster.pods:
        others = ", ".join(f"{n} {k}" for k, n in sorted(cluster.other_kinds.items()))
        raise InputError(str(path), "items", "no nodes and no pods in the dump" + (f" (only {others})" if others
                                                                                   else ""))
    _check_totals(cluster, str(path))
    return cluster

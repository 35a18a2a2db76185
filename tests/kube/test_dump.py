"""`gpuscale.kube.dump`: reading cluster dumps (JSON v1 List, single objects, multi-document YAML) from files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscale.kube.dump import load_cluster, load_objects
from gpuscale.model.errors import InputError
from tests.builders import k8s_list, k8s_node, k8s_pod


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_json_list(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.json", json.dumps(k8s_list(k8s_node("n1"), k8s_pod("a"), k8s_pod("b"))))
    cluster = load_cluster(path)
    assert [n.name for n in cluster.nodes] == ["n1"]
    assert [p.key for p in cluster.pods] == ["default/a", "default/b"]


def test_single_json_object(tmp_path: Path) -> None:
    path = _write(tmp_path, "pod.json", "  \n" + json.dumps(k8s_pod("a")))
    assert [p.name for p in load_cluster(path).pods] == ["a"]


def test_multi_document_yaml(tmp_path: Path) -> None:
    text = """
apiVersion: v1
kind: Node
metadata:
  name: n1
  creationTimestamp: 2024-01-01T00:00:00Z
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: 8}
---
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: ml}
spec:
  containers:
  - name: c
    resources:
      requests: {cpu: 0.5, memory: 1Gi}
"""
    cluster = load_cluster(_write(tmp_path, "c.yaml", text))
    (node,) = cluster.nodes
    assert node.allocatable.get("nvidia.com/gpu") == 8
    assert node.created_s == 1704067200.0  # an unquoted YAML timestamp is read too
    (pod,) = cluster.pods
    assert (pod.key, pod.requests.get("cpu"), pod.requests.get("memory")) == ("ml/a", 500, 2**30)


def test_empty_file_holds_no_objects_and_is_no_cluster(tmp_path: Path) -> None:
    """An empty listing is a wrong file or a wrong context, not a healthy cluster (issue 30, item 6)."""
    assert load_objects(_write(tmp_path, "empty.yaml", "")) == []
    for name, text in (("empty2.yaml", "---\n"), ("list.json", '{"kind": "List", "items": []}'),
                       ("pdb.yaml", "kind: PodDisruptionBudget\nmetadata: {name: p}\n")):
        with pytest.raises(InputError, match="items: no nodes and no pods in the dump"):
            load_cluster(_write(tmp_path, name, text))


def test_nodes_without_pods_are_a_cluster(tmp_path: Path) -> None:
    node = {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1", "memory": "1Gi"}}}
    assert len(load_cluster(_write(tmp_path, "nodes.json", json.dumps(node))).nodes) == 1


BAD_FILES = [
    # file name, content, field, problem fragment
    ("array.json", json.dumps([k8s_pod("a")]), "document 1", "an object with 'kind'"),
    ("nokind.json", json.dumps({"items": []}), "document 1", "an object with 'kind'"),
    ("scalar.yaml", "just text\n", "document 1", "an object with 'kind'"),
    ("second.yaml", "kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n- 1\n", "document 2",
     "an object with 'kind'"),
    ("bad.json", '{"kind": "List", "items": [}', "line 1 column 28", "bad JSON"),
    ("bad.yaml", "kind: Pod\nmetadata: {name: a\n", "line 3 column 1", "bad YAML"),
    ("tabs.yaml", "kind: Pod\n\tmetadata: {}\n", "line 2 column 1", "bad YAML"),
    ("latin1.yaml", b"kind: Pod\nmetadata: {name: caf\xe9}\n", "byte 30", "not UTF-8"),
]


@pytest.mark.parametrize(("name", "content", "field", "problem"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_files_raise_input_error_naming_the_file(tmp_path: Path, name: str, content: str | bytes, field: str,
                                                     problem: str) -> None:
    path = _write(tmp_path, name, content)
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert (caught.value.obj, caught.value.field) == (str(path), field)
    assert problem in caught.value.problem


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        load_cluster(tmp_path / "absent.json")
    assert caught.value.field == "file"
    assert "No such file" in caught.value.problem


def test_a_directory_is_not_a_dump(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        load_cluster(tmp_path)
    assert caught.value.field == "file"


@pytest.mark.parametrize(("content", "obj", "field"), [
    (json.dumps(k8s_list(k8s_pod("x", containers=[{"name": "c", "resources": {"requests": {"cpu": "NaN"}}}]))),
     "Pod default/x", "spec.containers[0].resources.requests.cpu"),
    ('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "x", "namespace": "default"}, "spec": '
     '{"containers": [{"name": "c", "resources": {"requests": {"cpu": NaN}}}]}}]}',
     "Pod default/x", "spec.containers[0].resources.requests.cpu"),  # a bare NaN, which Python's json accepts
    (json.dumps(k8s_list(k8s_node("n1", taints=[{"key": "k", "effect": "Never"}]))), "Node n1",
     "spec.taints[0].effect"),
    (json.dumps(k8s_list({"kind": "Pod", "metadata": {"name": "x", "namespace": "ml"}, "spec": {"containers": []}})),
     "Pod ml/x", "spec.containers"),
])
def test_conversion_errors_name_the_object_not_the_file(tmp_path: Path, content: str, obj: str, field: str) -> None:
    with pytest.raises(InputError) as caught:
        load_cluster(_write(tmp_path, "c.json", content))
    assert (caught.value.obj, caught.value.field) == (obj, field)
    assert str(caught.value).startswith(f"{obj}: {field}: ")

"""`KubeEvents`: an `EventSink` that creates core/v1 Events, as Cluster Autoscaler records them.

Node events go to the `default` namespace (as the kubelet's do); pod and ConfigMap events to the object's namespace.
Names are `<object name>.<random hex>`, like client-go's recorder. No aggregation: the loop already rate-limits the
chatty ones (NotTriggerScaleUp).
"""

from __future__ import annotations

import socket
import uuid
from datetime import UTC, datetime

from kubernetes import client

from gpuscale.loop.ports import EventType

COMPONENT = "gpuscale"


class KubeEvents:
    def __init__(self, api_client: client.ApiClient, *, instance: str | None = None) -> None:
        self._core = client.CoreV1Api(api_client)
        self._instance = instance or socket.gethostname()

    def emit(self, obj_kind: str, obj_key: str, event_type: EventType, reason: str, message: str) -> None:
        namespace, _, name = obj_key.rpartition("/")
        namespace = namespace or "default"
        now = datetime.now(tz=UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(name=f"{name}.{uuid.uuid4().hex[:16]}", namespace=namespace),
            involved_object=client.V1ObjectReference(
                kind=obj_kind, name=name, namespace=None if obj_kind == "Node" else namespace,
                api_version="v1"),
            reason=reason, message=message[:1024], type=str(event_type), count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT, reporting_instance=self._instance)
        self._core.create_namespaced_event(namespace, event)

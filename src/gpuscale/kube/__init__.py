"""A real cluster: Kubernetes objects to model values, dumps, and (later) the watch cache and actuation."""

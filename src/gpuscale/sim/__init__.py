"""The digital twin: a deterministic discrete-event simulation of cluster, cloud and workloads."""

"""gpuscale: a GPU-aware cluster autoscaler for Kubernetes ML platforms, with a deterministic digital twin."""

__version__ = "0.1.0"
